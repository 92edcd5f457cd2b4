"""Speculative decoding speed per routing policy, against plain greedy decoding of the same model.

The trained reference model is exported through the factory (S1: MTP draft
experts stored MXFP4 under an NVFP4 global config; S4: a separate DSpark
drafter in native FP4 beside an NVFP4 target) and loaded under each routing
policy. The yardstick is plain greedy decoding of the same loaded model,
measured in the same run, prompt by prompt interleaved with the speculative
run: ``speedup = tokens/s with speculation / tokens/s without``.

    python benchmarks/specdec.py                  # CPU (and CUDA when present)
    python benchmarks/specdec.py --device cuda    # one device
"""

from __future__ import annotations

import argparse
import platform
import sys
import tempfile
import time
from pathlib import Path

import torch

from specguard.refdecoder.corpus import prompts_sha256
from specguard.refdecoder.demo import export_all, prompts_from_held_out, run_case
from specguard.refdecoder.policies import POLICIES


def device_name(device: str) -> str:
    if device.startswith("cuda"):
        return torch.cuda.get_device_name(torch.device(device))
    return f"{platform.processor() or platform.machine()}, {torch.get_num_threads()} torch thread(s)"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", action="append", help="cpu / cuda (repeatable; default: cpu, plus cuda if present)")
    p.add_argument("--scenario", action="append", choices=["s1", "s2", "s4"], help="default: s1 and s4")
    p.add_argument("--prompts", type=int, default=8)
    p.add_argument("--new-tokens", type=int, default=128)
    p.add_argument("-k", type=int, default=3)
    p.add_argument("--threads", type=int, default=1, help="CPU torch threads")
    p.add_argument("--corpus", type=Path,
                   help="standard-library copy to cut prompts from (default: the held-out split shipped "
                        "with the weights, the same on every machine)")
    args = p.parse_args(argv)
    devices = args.device or (["cpu", "cuda"] if torch.cuda.is_available() else ["cpu"])
    scenarios = args.scenario or ["s1", "s4"]
    torch.set_num_threads(args.threads)
    prompts = prompts_from_held_out(args.prompts, corpus=args.corpus)
    print(f"specdec benchmark: {len(prompts)} held-out prompts (sha256 {prompts_sha256(prompts)}) x "
          f"{args.new_tokens} new tokens, k = {args.k}, greedy; torch {torch.__version__}, "
          f"Python {platform.python_version()}")
    print("speedup = tokens/s with speculation / tokens/s of plain greedy decoding of the same model "
          "(the yardstick, same run); verification = one batched forward of k+1 positions on a KV cache")
    header = (f"{'device':<6} {'scen':<4} {'policy':<8} {'accept':>7} {'per pos %':>12} {'mean len':>8} "
              f"{'no-spec tok/s':>13} {'spec tok/s':>10} {'speedup':>8}  identical")
    with tempfile.TemporaryDirectory(prefix="specdec-bench-") as tmp:
        infos = export_all(Path(tmp), scenarios)
        for device in devices:
            print(f"\n[{device}] {device_name(device)}")
            print(header)
            t0 = time.perf_counter()
            for scenario in scenarios:
                by_policy = {}
                for policy in POLICIES:
                    r = run_case(scenario, policy, infos, prompts, args.new_tokens, args.k, device)
                    by_policy[policy] = r
                    if r.error or r.stats is None:
                        print(f"{device:<6} {scenario:<4} {policy:<8} load fails: {r.error}")
                        continue
                    per_pos = "/".join(f"{100 * x:.0f}" for x in r.stats.per_position_rate)
                    print(f"{device:<6} {scenario:<4} {policy:<8} {100 * r.stats.acceptance_rate:6.1f}% "
                          f"{per_pos:>12} {r.stats.mean_acceptance_length:8.2f} {r.plain_tokens_per_s:13.1f} "
                          f"{r.spec_tokens_per_s:10.1f} {r.speedup:7.2f}x  {'yes' if r.identical else 'NO'}",
                          flush=True)
                good, bad = by_policy["resolver"], by_policy["global"]
                if good.stats and bad.stats:
                    print(f"{device:<6} {scenario:<4} resolver / global tokens/s: "
                          f"{good.spec_tokens_per_s / bad.spec_tokens_per_s:.2f}x")
            print(f"({time.perf_counter() - t0:.0f} s on {device})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
