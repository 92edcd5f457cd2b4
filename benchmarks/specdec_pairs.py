"""Why S4's ``bf16`` policy can accept fewer drafts than the stored-FP4 drafter.

Acceptance is agreement between a drafter and the target it drafts for, on the
text that target generates. S4's policies change both at once: ``resolver``
pairs the NVFP4 target with the FP4 drafter (both dequantized from S4's disk),
``bf16`` the shipped BF16 target with the shipped BF16 drafter. This benchmark
crosses them, so a gap can be put on the target (its greedy text) or on the
drafter (its weights):

    target \\ drafter   bf16   fp4
    bf16               A      B
    nvfp4              C      D      (A = the bf16 policy, D = resolver)

and, per prompt, acceptance and how repetitive the target's greedy text is
(the share of its 16-byte windows seen before in the same output: a target
stuck in a loop is easy to draft for). It also checks that S4's FP4 drafter is
the shipped BF16 drafter quantized (the largest relative error of its
dequantized weights).

    python benchmarks/specdec_pairs.py                      # the shipped held-out prompts
    python benchmarks/specdec_pairs.py --corpus /usr/lib/python3.12
"""

from __future__ import annotations

import argparse
import platform
import tempfile
from pathlib import Path

import torch

from specguard.refdecoder.corpus import prompts_sha256
from specguard.refdecoder.demo import export_all, measure, prompts_from_held_out
from specguard.refdecoder.policies import Loaded, load_policy, reference
from specguard.refdecoder.specdec import DSparkDraft, Runner, SpecStats, cache_size


def repeated_share(tokens: list[int], width: int = 16) -> float:
    """Share of ``tokens``' windows of ``width`` that occurred earlier in ``tokens``."""
    seen, repeats, n = set(), 0, max(0, len(tokens) - width + 1)
    for i in range(n):
        w = tuple(tokens[i:i + width])
        repeats += w in seen
        seen.add(w)
    return repeats / n if n else 0.0


@torch.no_grad()
def weight_error(fp4: torch.nn.Module, bf16: torch.nn.Module) -> float:
    """Largest ||fp4 - bf16|| / ||bf16|| over the drafter's 2-D weights."""
    ref = dict(bf16.named_parameters())
    worst = 0.0
    for name, w in fp4.named_parameters():
        if w.dim() == 2:
            r = ref[name].float()
            worst = max(worst, float((w.float() - r).norm() / r.norm().clamp_min(1e-12)))
    return worst


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--prompts", type=int, default=8)
    p.add_argument("--new-tokens", type=int, default=128)
    p.add_argument("-k", type=int, default=3)
    p.add_argument("--corpus", type=Path, help="standard-library copy to cut prompts from (default: the shipped split)")
    args = p.parse_args(argv)
    prompts = prompts_from_held_out(args.prompts, corpus=args.corpus)
    print(f"specdec pairs: S4, {len(prompts)} held-out prompts (sha256 {prompts_sha256(prompts)}, "
          f"{args.corpus or 'shipped split'}) x {args.new_tokens} new tokens, k = {args.k}; "
          f"torch {torch.__version__}, Python {platform.python_version()}, {args.device}")
    with tempfile.TemporaryDirectory(prefix="specdec-pairs-") as tmp:
        info = export_all(Path(tmp), ["s4"])["s4"]
        stored = load_policy(info.path, "resolver", drafter=info.drafter_path, device=args.device)
        shipped = reference(dspark=True, device=args.device)
    assert isinstance(stored.drafter, DSparkDraft) and isinstance(shipped.drafter, DSparkDraft)
    drafters = {"bf16": shipped.drafter.drafter, "fp4": stored.drafter.drafter}
    print(f"fp4 drafter vs shipped bf16 drafter: largest relative weight error "
          f"{weight_error(drafters['fp4'], drafters['bf16']):.3f} (FP4 rounding; a different checkpoint is ~1)")
    targets = {"bf16": shipped.model, "nvfp4": stored.model}
    print(f"{'target':<6} {'drafter':<7} {'accept':>7}  per prompt accept % (target text repeated %)")
    for tname, model in targets.items():
        runner = Runner(model, None, args.k, cache_size(max(map(len, prompts)), args.new_tokens, args.k))
        texts = [runner.greedy(pr, args.new_tokens).tokens for pr in prompts]
        for dname, drafter in drafters.items():
            loaded = Loaded(f"{tname}+{dname}", model, DSparkDraft(model, drafter))
            per = [measure(loaded, [pr], args.new_tokens, args.k)[0] for pr in prompts]
            total = SpecStats(args.k)
            for s in per:
                total.merge(s)
            cells = " ".join(f"{100 * s.acceptance_rate:.0f}({100 * repeated_share(t):.0f})"
                             for s, t in zip(per, texts, strict=True))
            print(f"{tname:<6} {dname:<7} {100 * total.acceptance_rate:6.1f}%  {cells}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
