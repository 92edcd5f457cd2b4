"""Speed work must not change a byte of output: run inspect, route and lint (JSON and
text, each engine model) on every factory scenario, every published layout (sparse
copies, first 4 layers), every producer fixture and both benchmark checkpoints, and
write each output to OUTDIR (one file per command). Run it before and after a change
and compare the folders:

    python benchmarks/same_output.py /tmp/before   # on the old commit
    python benchmarks/same_output.py /tmp/after    # on the new one
    diff -r /tmp/before /tmp/after && echo identical

Checkpoints are written once under $SPECGUARD_BENCH_DIR (default /tmp/specguard-bench).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT / "scripts"))
os.environ["COLUMNS"] = "80"

from published_sparse import MODELS, build  # noqa: E402

from specguard.cli import main as cli  # noqa: E402
from specguard.factory import SCENARIOS, write_scenario  # noqa: E402
from specguard.resolve import Resolver  # noqa: E402

BENCH = Path(os.environ.get("SPECGUARD_BENCH_DIR", "/tmp/specguard-bench"))
ENGINES = ("vllm-0.33", "vllm-0.32", "sglang-0.5.23")


def checkpoints() -> dict[str, list[str]]:
    """Name -> the source arguments of every command (a target and its --draft)."""
    out: dict[str, list[str]] = {}
    scen = BENCH / "same-output" / "scenarios"
    for name in SCENARIOS:
        d = scen / name
        if not (d / ".complete").exists():
            write_scenario(name, d)
            (d / ".complete").touch()
        if (d / "target").is_dir():
            draft = next(p for p in sorted(d.iterdir()) if p.is_dir() and p.name != "target")
            out[f"scenario-{name}"] = [str(d / "target"), "--draft", str(draft)]
        else:
            out[f"scenario-{name}"] = [str(d)]
    for model in sorted(MODELS):
        d = BENCH / "same-output" / "published" / model
        if not (d / ".complete").exists():
            build(model, d, layers=4)
            (d / ".complete").touch()
        out[f"published-{model}"] = [str(d)]
    for p in sorted((ROOT / "tests" / "data" / "producers").iterdir()):
        if any(p.glob("*.safetensors")):
            out[f"producer-{p.name}"] = [str(p)]
    for name in ("deepseek-r1-nvfp4", "v3-100000-61", "v4-100000-64"):
        if (BENCH / name / ".complete").exists() or (BENCH / name / "config.json").exists():
            out[f"bench-{name}"] = [str(BENCH / name)]
    return out


def run(argv: list[str]) -> str:
    buf, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(err):
        try:
            code = cli(argv)
        except SystemExit as e:
            code = e.code
    Resolver.clear_cache()
    return f"exit {code}\n--- stdout\n{buf.getvalue()}--- stderr\n{err.getvalue()}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("outdir", type=Path)
    ap.add_argument("--only", default="", help="run checkpoints whose name contains this")
    args = ap.parse_args()
    args.outdir.mkdir(parents=True, exist_ok=True)
    for name, src in checkpoints().items():
        if args.only not in name:
            continue
        target = src[:1]
        commands = {"inspect.json": ["inspect", *target, "--json"], "inspect.txt": ["inspect", *target]}
        for engine in ENGINES if name.startswith("scenario") else ENGINES[:1]:
            commands[f"lint-{engine}.json"] = ["lint", *src, "--json", "--engine", engine]
            commands[f"route-{engine}.json"] = ["route", *src, "--all", "--json", "--engine", engine]
        commands["lint.txt"] = ["lint", *src]
        commands["lint.sarif"] = ["lint", *src, "--format", "sarif"]
        for file, argv in commands.items():
            (args.outdir / f"{name}.{file}").write_text(run(argv))
        print(name, flush=True)


if __name__ == "__main__":
    main()
