#!/usr/bin/env python3
"""Produce tiny quantized checkpoints with the real quantizers (ground truth).

Run with the producers' own venv (see README.md next to this file), e.g.

    /work/venv-producers/bin/python scripts/producers/make_fixtures.py            # all
    /work/venv-producers/bin/python scripts/producers/make_fixtures.py --tool modelopt
    /work/venv-producers/bin/python scripts/producers/make_fixtures.py --only ct_nvfp4

Every fixture runs in a fresh child process (the tools patch torch and
transformers globally), writes tests/data/producers/<name>/ and its
expected.json, and a failure is reported with its last error line without
stopping the others.
"""

from __future__ import annotations

import argparse
import importlib
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
DEFAULT_OUT = REPO / "tests" / "data" / "producers"
TOOLS = {
    "llmcompressor": "llmcompressor_fixtures",
    "modelopt": "modelopt_fixtures",
    "autoround": "autoround_fixtures",
    "bitsandbytes": "bnb_fixtures",
    "quanto": "quanto_fixtures",
    "torchao": "torchao_fixtures",
    "quark": "quark_fixtures",
}


def fixtures(tool: str | None) -> dict[str, str]:
    """fixture name -> module that builds it."""
    out: dict[str, str] = {}
    for t, mod in TOOLS.items():
        if tool in (None, t):
            out.update(dict.fromkeys(importlib.import_module(mod).FIXTURES, mod))
    return out


def run_child(name: str, mod: str, out: Path) -> None:
    importlib.import_module(mod).build(name, out / name)


def last_error(log: str) -> str:
    lines = [ln for ln in log.splitlines() if ln.strip()]
    for ln in reversed(lines):
        if "Error" in ln or "error" in ln or "Exception" in ln:
            return ln.strip()
    return lines[-1].strip() if lines else "(no output)"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--tool", choices=sorted(TOOLS))
    ap.add_argument("--only", nargs="+", metavar="NAME")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--child", metavar="NAME", help=argparse.SUPPRESS)
    args = ap.parse_args()
    sys.path.insert(0, str(HERE))
    if args.child:  # "module:fixture", set by the parent below
        mod, name = args.child.split(":")
        run_child(name, mod, args.out)
        return 0
    table = fixtures(args.tool)
    names = args.only or list(table)
    unknown = [n for n in names if n not in table]
    if unknown:
        print(f"unknown fixture(s): {', '.join(unknown)}", file=sys.stderr)
        return 2
    if args.list:
        print("\n".join(names))
        return 0
    failed = []
    for name in names:
        t0 = time.monotonic()
        child = f"{table[name]}:{name}"
        cmd = [sys.executable, __file__, "--child", child, "--out", str(args.out)]
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
        took = time.monotonic() - t0
        if proc.returncode == 0:
            print(f"ok    {name:24s} {took:6.1f}s")
            continue
        failed.append(name)
        log = Path(tempfile.gettempdir()) / f"specguard-producer-{name}.log"
        log.write_text(proc.stdout + proc.stderr)
        print(f"FAIL  {name:24s} {took:6.1f}s  {last_error(proc.stdout + proc.stderr)}  (log: {log})")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
