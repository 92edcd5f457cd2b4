"""`specguard lint` of a ModelOpt NVFP4 DeepSeek-R1 export against the inspect
pass alone, in the same run: 180,125 tensors, ~45,000 modules, 123
``exclude_modules`` entries (issue 12 item 10). The checkpoint is the sparse copy
``scripts/published_sparse.py deepseek-r1-nvfp4`` writes (real names, shapes,
shard grouping; data sections are holes).

    python benchmarks/lint_export.py [--repeat 3]

Goal: lint <= 2x inspect. Also prints SG101 (the exclusion rule) alone, and CPU
time beside wall time (on a shared machine wall time counts others' load).
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "scripts"))
from published_sparse import build  # noqa: E402
from synth import paired, take_turns  # noqa: E402

from specguard.checkpoint import open_checkpoint  # noqa: E402
from specguard.formats import classify  # noqa: E402
from specguard.lint import RULES, lint  # noqa: E402
from specguard.resolve import Resolver  # noqa: E402

MODEL = "deepseek-r1-nvfp4"


def inspect_pass(root: Path) -> object:
    return classify(open_checkpoint(root))


def lint_pass(root: Path) -> object:
    return lint([Resolver(open_checkpoint(root))])


def sg101_pass(root: Path) -> object:
    return lint([Resolver(open_checkpoint(root))], select_codes=("SG101",))


def checkpoint() -> Path:
    root = Path(os.environ.get("SPECGUARD_BENCH_DIR", "/tmp/specguard-bench")) / MODEL
    if not (root / ".complete").exists():
        build(MODEL, root)
        (root / ".complete").touch()
    return root


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    root = checkpoint()
    fns = {"inspect": inspect_pass, "lint": lint_pass, "sg101": sg101_pass}
    cpu: dict[str, float] = {}
    per_turn: dict[str, list[float]] = {}
    best, results = take_turns(fns, root, args.repeat, cpu, per_turn)
    r = Resolver(open_checkpoint(root))
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPU(s) (load average "
          f"{', '.join(f'{x:.2f}' for x in os.getloadavg())}), Python {platform.python_version()}")
    print(f"checkpoint: {MODEL}, {len(r.checkpoint.tensors):,} tensors, {len(r.table.modules):,} modules, "
          f"{len(r.declared_config.exclusions)} exclusion entries; best of {args.repeat}")
    ins, lnt, one = best["inspect"], best["lint"], best["sg101"]
    print(f"  inspect (headers + classify)     {ins * 1000:8.1f} ms")
    print(f"  lint (all {len(RULES)} rules)            {lnt * 1000:8.1f} ms")
    print(f"  lint --select SG101              {one * 1000:8.1f} ms")
    print(f"  findings: {len(results['lint'].findings)}")
    print(f"lint / inspect = {lnt / ins:.2f} (goal <= 2)")
    print(f"CPU time: inspect {cpu['inspect'] * 1000:.1f} ms, lint {cpu['lint'] * 1000:.1f} ms, "
          f"SG101 alone {cpu['sg101'] * 1000:.1f} ms; lint / inspect = {cpu['lint'] / cpu['inspect']:.2f}")
    print(f"CPU turn by turn: lint / inspect = {paired(per_turn['lint'], per_turn['inspect'])}")


if __name__ == "__main__":
    main()
