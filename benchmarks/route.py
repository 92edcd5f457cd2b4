"""Resolving every runtime module of a 100,000-tensor checkpoint, against the
inspect pass alone (headers + classification), in the same run.

    python benchmarks/route.py [--tensors 100000] [--repeat 3]

Goal: route <= 1.5x inspect.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from synth import bench_checkpoint, machine, take_turns

from specguard.checkpoint import open_checkpoint
from specguard.formats import classify
from specguard.resolve import Resolver


def inspect_pass(root: Path) -> int:
    return len(classify(open_checkpoint(root)))


def route_pass(root: Path) -> int:
    return len(Resolver(open_checkpoint(root)).routes())


def main() -> None:
    print(machine())
    root, args = bench_checkpoint(__doc__)
    cpu: dict[str, float] = {}
    best, counts = take_turns({"inspect": inspect_pass, "route": route_pass}, root, args.repeat, cpu)
    ins, rte = best["inspect"], best["route"]
    n = len(open_checkpoint(root).tensors)
    print(f"checkpoint: {n:,} tensors, {counts['inspect']:,} modules, {counts['route']:,} runtime modules; "
          f"best of {args.repeat}")
    print(f"  inspect (headers + classify)        {ins * 1000:8.1f} ms")
    print(f"  route (inspect + resolve all)       {rte * 1000:8.1f} ms")
    print(f"route / inspect = {rte / ins:.2f} (goal <= 1.5)")
    print(f"CPU: inspect {cpu['inspect'] * 1000:.1f} ms, route {cpu['route'] * 1000:.1f} ms, "
          f"route / inspect = {cpu['route'] / cpu['inspect']:.2f}")


if __name__ == "__main__":
    main()
