"""Resolving every runtime module of a 100,000-tensor checkpoint, against the
inspect pass alone (headers + classification), in the same run.

    python benchmarks/route.py [--tensors 100000] [--repeat 3]

Goal: route <= 1.5x inspect.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from synth import default_root, write_sparse

from specguard.checkpoint import open_checkpoint
from specguard.formats import classify
from specguard.resolve import Resolver


def inspect_pass(root: Path) -> int:
    return len(classify(open_checkpoint(root)))


def route_pass(root: Path) -> int:
    return len(Resolver(open_checkpoint(root)).routes())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tensors", type=int, default=100_000)
    ap.add_argument("--shards", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    root = write_sparse(default_root().with_name(f"v4-{args.tensors}-{args.shards}"), args.tensors, args.shards)
    times: dict[str, list[float]] = {"inspect": [], "route": []}
    counts = {}
    for _ in range(args.repeat):  # take turns so machine noise hits both alike
        for label, fn in (("inspect", inspect_pass), ("route", route_pass)):
            t = time.perf_counter()
            counts[label] = fn(root)
            times[label].append(time.perf_counter() - t)
    ins, rte = min(times["inspect"]), min(times["route"])
    n = len(open_checkpoint(root).tensors)
    print(f"checkpoint: {n:,} tensors, {counts['inspect']:,} modules, {counts['route']:,} runtime modules; "
          f"best of {args.repeat}")
    print(f"  inspect (headers + classify)        {ins * 1000:8.1f} ms")
    print(f"  route (inspect + resolve all)       {rte * 1000:8.1f} ms")
    print(f"route / inspect = {rte / ins:.2f} (goal <= 1.5)")


if __name__ == "__main__":
    main()
