"""`specguard lint` of a 100,000-tensor checkpoint against the inspect pass alone,
in the same run, and the content rules' bytes read as a fraction of the checkpoint.

    python benchmarks/lint.py [--tensors 100000] [--repeat 3]

Goals: lint <= 2x inspect; bytes read < 1 % of the checkpoint. The synthetic
checkpoint's data sections are holes (zeros), so the content rules do report
findings on it (zero scales): the work is the same as on real bytes.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from synth import bench_checkpoint, machine, paired, take_turns

from specguard.checkpoint import open_checkpoint
from specguard.formats import classify
from specguard.lint import RULES, lint
from specguard.resolve import Resolver


def inspect_pass(root: Path) -> object:
    return classify(open_checkpoint(root))


def lint_pass(root: Path) -> object:
    return lint([Resolver(open_checkpoint(root))])


def main() -> None:
    print(machine())
    root, args = bench_checkpoint(__doc__)
    cpu: dict[str, float] = {}
    turns: dict[str, list[float]] = {}
    best, results = take_turns({"inspect": inspect_pass, "lint": lint_pass}, root, args.repeat, cpu, turns)
    result = results["lint"]
    ins, lnt = best["inspect"], best["lint"]
    print(f"checkpoint: {len(open_checkpoint(root).tensors):,} tensors, {result.checkpoint_bytes / 1e12:.2f} TB "
          f"(sparse); best of {args.repeat}")
    print(f"  inspect (headers + classify)   {ins * 1000:8.1f} ms")
    print(f"  lint (all {len(RULES)} rules)          {lnt * 1000:8.1f} ms")
    print(f"lint / inspect = {lnt / ins:.2f} (goal <= 2)")
    print(f"CPU: inspect {cpu['inspect'] * 1000:.1f} ms, lint {cpu['lint'] * 1000:.1f} ms, "
          f"lint / inspect = {cpu['lint'] / cpu['inspect']:.2f}")
    print(f"CPU turn by turn: lint / inspect = {paired(turns['lint'], turns['inspect'])}")
    for code, n in result.bytes_by_rule.items():
        if RULES[code].reads_bytes:
            print(f"  {code} read {n:,} bytes")
    frac = result.bytes_read / result.checkpoint_bytes
    print(f"bytes read / checkpoint = {result.bytes_read:,} / {result.checkpoint_bytes:,} = {frac:.5%} (goal < 1 %)")
    print(f"header-only rules read 0 bytes: "
          f"{all(n == 0 for c, n in result.bytes_by_rule.items() if not RULES[c].reads_bytes)}")


if __name__ == "__main__":
    main()
