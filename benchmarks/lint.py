"""`specguard lint` of a 100,000-tensor checkpoint against the inspect pass alone,
in the same run, and the content rules' bytes read as a fraction of the checkpoint.

    python benchmarks/lint.py [--tensors 100000] [--repeat 3]

Goals: lint <= 2x inspect; bytes read < 1 % of the checkpoint. The synthetic
checkpoint's data sections are holes (zeros), so the content rules do report
findings on it (zero scales): the work is the same as on real bytes.
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
from specguard.lint import RULES, lint
from specguard.resolve import Resolver


def inspect_pass(root: Path) -> object:
    return classify(open_checkpoint(root))


def lint_pass(root: Path) -> object:
    return lint([Resolver(open_checkpoint(root))])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tensors", type=int, default=100_000)
    ap.add_argument("--shards", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    root = write_sparse(default_root().with_name(f"v4-{args.tensors}-{args.shards}"), args.tensors, args.shards)
    times: dict[str, list[float]] = {"inspect": [], "lint": []}
    result = None
    for _ in range(args.repeat):
        for label, fn in (("inspect", inspect_pass), ("lint", lint_pass)):
            t = time.perf_counter()
            out = fn(root)
            times[label].append(time.perf_counter() - t)
            result = out if label == "lint" else result
    ins, lnt = min(times["inspect"]), min(times["lint"])
    print(f"checkpoint: {len(open_checkpoint(root).tensors):,} tensors, {result.checkpoint_bytes / 1e12:.2f} TB "
          f"(sparse); best of {args.repeat}")
    print(f"  inspect (headers + classify)   {ins * 1000:8.1f} ms")
    print(f"  lint (all {len(RULES)} rules)          {lnt * 1000:8.1f} ms")
    print(f"lint / inspect = {lnt / ins:.2f} (goal <= 2)")
    for code, n in result.bytes_by_rule.items():
        if RULES[code].reads_bytes:
            print(f"  {code} read {n:,} bytes")
    frac = result.bytes_read / result.checkpoint_bytes
    print(f"bytes read / checkpoint = {result.bytes_read:,} / {result.checkpoint_bytes:,} = {frac:.5%} (goal < 1 %)")
    print(f"header-only rules read 0 bytes: "
          f"{all(n == 0 for c, n in result.bytes_by_rule.items() if not RULES[c].reads_bytes)}")


if __name__ == "__main__":
    main()
