"""The long differential header fuzz: specguard's header parser against safetensors' own reader.

Every case is a real header (producer fixtures, the factory's S1 shards, a published
Qwen index's names) with one to three mutations of the kinds in
tests/checkpoint/mutations.py (deep nesting, repeated fields / keys / __metadata__,
invalid UTF-8, 1e999, -0, dimensions past 2**64, overflow beside a 0, ...), judged
by ``mutations.judge``: the same verdict and tensors as safetensors, no crash, one
bounded line per refusal. Prints counts per mutation kind and every disagreement.

    python scripts/fuzz_headers.py [--cases 1000000] [--seed 0] [--workers 2]

Result: benchmarks/results/fuzz_headers.txt (tests/checkpoint/test_fuzz.py runs a few thousand in CI).
"""

from __future__ import annotations

import argparse
import collections
import functools
import multiprocessing
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.checkpoint import mutations as M  # noqa: E402


@functools.cache
def _seeds() -> list[M.Seed]:
    """Once per process: the factory writes S1 into a temporary folder."""
    from specguard.factory import write_scenario

    with tempfile.TemporaryDirectory(prefix="fuzz-seeds-") as tmp:
        write_scenario("s1", Path(tmp) / "s1", seed=0)
        return M.seeds(sorted((Path(tmp) / "s1").glob("*.safetensors")))


def _run(job: tuple[int, int, int]) -> tuple[collections.Counter, collections.Counter, list, int]:
    """Cases [start, start + count) of the stream seeded ``seed``: counts and disagreements."""
    seed, count, _ = job
    seeds = _seeds()
    kinds: collections.Counter = collections.Counter()
    verdicts: collections.Counter = collections.Counter()
    bad: list = []
    for raw, size, kind in M.cases(seeds, count, seed=seed):
        for k in kind.split("+"):
            kinds[k] += 1
        problem, accepted = M.judge(raw, size)
        verdicts["accepted" if accepted else "rejected"] += 1
        if problem:
            bad.append((problem, kind, raw[:200]))
    return kinds, verdicts, bad, count


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", type=int, default=1_000_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--chunk", type=int, default=10_000)
    args = ap.parse_args()
    import safetensors

    print(f"python {platform.python_version()}, safetensors {safetensors.__version__}, "
          f"{os.cpu_count()} CPUs (load average {', '.join(f'{x:.1f}' for x in os.getloadavg())})")
    print(f"seeds: {', '.join(s.name for s in _seeds())}")
    jobs = [(args.seed * 1_000_003 + i, min(args.chunk, args.cases - i * args.chunk), i)
            for i in range(-(-args.cases // args.chunk))]
    kinds: collections.Counter = collections.Counter()
    verdicts: collections.Counter = collections.Counter()
    bad: list = []
    done, t0 = 0, time.time()
    stopped = ""
    with multiprocessing.Pool(args.workers) as pool:
        try:
            for k, v, b, n in pool.imap_unordered(_run, jobs):
                kinds.update(k)
                verdicts.update(v)
                bad += b
                done += n
                print(f"  {done:,} cases, {len(bad)} disagreements, {time.time() - t0:.0f} s", file=sys.stderr,
                      flush=True)
        except KeyboardInterrupt:  # Ctrl-C: report the chunks that finished
            pool.terminate()
            stopped = f" (stopped by Ctrl-C before {args.cases:,})"
    print(f"{done:,} cases{stopped} in {time.time() - t0:.0f} s ({args.workers} workers); safetensors accepted "
          f"{verdicts['accepted']:,}, rejected {verdicts['rejected']:,}")
    print("mutation kinds applied (a case has one to three, sometimes a byte-level one after):")
    for k, n in sorted(kinds.items(), key=lambda kv: -kv[1]):
        print(f"  {n:9,}  {k}")
    crashes = sum("crash" in p for p, _, _ in bad)
    looser = sum("looser" in p for p, _, _ in bad)
    stricter = sum("stricter" in p for p, _, _ in bad)
    print(f"crashes: {crashes}; looser than safetensors: {looser}; stricter: {stricter}; "
          f"other disagreements: {len(bad) - crashes - looser - stricter}")
    for problem, kind, raw in bad[:20]:
        print(f"  {problem} [{kind}] {raw!r}")


if __name__ == "__main__":
    main()
