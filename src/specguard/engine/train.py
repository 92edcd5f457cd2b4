"""Train the reference model: target first, then its MTP block on the frozen target.

Byte-level language modelling on the Python standard library's source
(``specguard.engine.corpus``). Phase 1 trains the target on next-byte
prediction; phase 2 freezes it and trains the MTP block to predict the
next-next byte from the target's detached hidden state and the next byte's
embedding, as DeepSeek's MTP does. The best held-out checkpoint of each phase
is kept. Output: ``model.safetensors`` (BF16, DeepSeek-V4 native names, the
model config in the safetensors metadata) and ``train_log.txt``.

Run through ``scripts/train_engine.py``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import platform
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from specguard.engine.corpus import read_split, stdlib_dir, unigram_bits_per_byte
from specguard.engine.model import ModelConfig, Transformer
from specguard.engine.specdec import SpecStats, greedy_generate, speculative_generate
from specguard.engine.weights import save_weights

LN2 = math.log(2.0)


@dataclass(frozen=True)
class TrainConfig:
    seed: int = 1234
    seq_len: int = 512
    batch_size: int = 64
    target_steps: int = 3000
    mtp_steps: int = 1000
    lr: float = 3e-3
    min_lr: float = 3e-4
    warmup_steps: int = 100
    weight_decay: float = 0.1
    aux_loss_coef: float = 0.001  # small sequence-level balance loss, as DeepSeek-V3
    bias_update_rate: float = 0.001  # aux-loss-free router-bias balancing (DeepSeek-V3 gamma)
    eval_every: int = 250
    eval_windows: int = 192
    time_limit_s: float = 0.0  # 0: none; else phase 1 stops at 80 % of it, phase 2 at 100 %
    spec_prompts: int = 16  # held-out prompts for the final speculative-decoding check


def _lr(step: int, total: int, cfg: TrainConfig) -> float:
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    progress = (step - cfg.warmup_steps) / max(1, total - cfg.warmup_steps)
    return cfg.min_lr + 0.5 * (cfg.lr - cfg.min_lr) * (1 + math.cos(math.pi * progress))


def _batches(data: torch.Tensor, cfg: TrainConfig, gen: torch.Generator) -> Iterator[torch.Tensor]:
    """Random windows of seq_len + 1 bytes; offsets drawn on the CPU so any device sees the same ones."""
    span = torch.arange(cfg.seq_len + 1, device=data.device)
    while True:
        starts = torch.randint(0, len(data) - cfg.seq_len - 1, (cfg.batch_size,), generator=gen)
        yield data[starts.to(data.device)[:, None] + span].long()


def eval_windows(data: torch.Tensor, cfg: TrainConfig) -> torch.Tensor:
    """Evenly spaced, non-overlapping held-out windows [n, seq_len + 1]."""
    n_all = len(data) // (cfg.seq_len + 1)
    idx = torch.linspace(0, n_all - 1, min(cfg.eval_windows, n_all)).long()
    windows = data[: n_all * (cfg.seq_len + 1)].view(n_all, cfg.seq_len + 1)
    return windows[idx.to(data.device)].long()


@torch.no_grad()
def evaluate(model: Transformer, windows: torch.Tensor, batch: int = 32) -> dict[str, float]:
    """Held-out target bpb, MTP next-next bpb, and how often MTP's argmax equals the target's.

    The last one is the teacher-forced counterpart of position-0 acceptance.
    """
    model.eval()
    sums = {"target": 0.0, "mtp": 0.0, "agree": 0.0}
    n_t = n_m = 0
    for chunk in windows.split(batch):
        x, y = chunk[:, :-1], chunk[:, 1:]
        logits, hidden = model(x)
        sums["target"] += F.cross_entropy(logits.flatten(0, 1).float(), y.flatten(), reduction="sum").item()
        mtp_logits, _ = model.mtp_forward(hidden[:, :-1], x[:, 1:])
        sums["mtp"] += F.cross_entropy(
            mtp_logits.flatten(0, 1).float(), y[:, 1:].flatten(), reduction="sum"
        ).item()
        sums["agree"] += (mtp_logits.argmax(-1) == logits[:, 1:].argmax(-1)).sum().item()
        n_t += y.numel()
        n_m += y[:, 1:].numel()
    model.train()
    return {
        "target_bpb": sums["target"] / n_t / LN2,
        "mtp_bpb": sums["mtp"] / n_m / LN2,
        "mtp_agree": sums["agree"] / n_m,
    }


def _optimizer(params: list[torch.nn.Parameter], cfg: TrainConfig, fused: bool) -> torch.optim.AdamW:
    decay = [p for p in params if p.dim() >= 2]
    rest = [p for p in params if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": rest, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=(0.9, 0.95), fused=fused)


def _run_phase(
    name: str,
    model: Transformer,
    params: list[torch.nn.Parameter],
    loss_fn: Callable[[torch.Tensor], torch.Tensor],
    blocks: torch.nn.ModuleList,
    steps: int,
    metric: str,
    cfg: TrainConfig,
    data: Iterator[torch.Tensor],
    held: torch.Tensor,
    log: Callable[[str], None],
    deadline: float,
) -> dict[str, float]:
    """Train ``params`` on ``loss_fn`` for ``steps``; keep the state with the best held-out ``metric``."""
    device = held.device
    opt = _optimizer(params, cfg, fused=device.type == "cuda")
    best, best_state = math.inf, None
    t0 = time.perf_counter()
    for step in range(steps + 1):
        if step < steps and time.perf_counter() > deadline:
            log(f"{name} stopped at step {step} of {steps}: time limit")
            steps = step
        if step % cfg.eval_every == 0 or step == steps:
            scores = evaluate(model, held)
            log(f"{name} step {step:5d}  " + "  ".join(f"{k} {v:.4f}" for k, v in scores.items())
                + f"  ({time.perf_counter() - t0:.0f}s)")
            if scores[metric] < best:
                best = scores[metric]
                best_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
        if step == steps:
            break
        for group in opt.param_groups:
            group["lr"] = _lr(step, steps, cfg)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
            loss = loss_fn(next(data))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        model.update_router_bias(blocks, cfg.bias_update_rate)
    assert best_state is not None
    model.load_state_dict(best_state)
    scores = evaluate(model, held)
    log(f"{name} kept best held-out {metric}: " + "  ".join(f"{k} {v:.4f}" for k, v in scores.items()))
    return scores


def train(corpus_root: Path, out_dir: Path, cfg: TrainConfig, mcfg: ModelConfig, device: str) -> dict[str, float]:
    out_dir.mkdir(parents=True, exist_ok=True)
    lines: list[str] = []

    def log(line: str) -> None:
        print(line, flush=True)
        lines.append(line)

    torch.manual_seed(cfg.seed)
    gen = torch.Generator().manual_seed(cfg.seed)
    train_bytes, held_bytes, files = read_split(corpus_root)
    if len(held_bytes) <= cfg.seq_len + 1 or len(train_bytes) <= cfg.seq_len + 1:
        raise ValueError(f"{corpus_root}: too little train or held-out text for seq_len {cfg.seq_len}")
    dev = torch.device(device)
    log(f"command: {' '.join(sys.argv)}")
    log(f"device: {dev} {torch.cuda.get_device_name(dev) if dev.type == 'cuda' else platform.processor()}"
        f"  torch {torch.__version__}  python {platform.python_version()}")
    log(f"corpus: {corpus_root} ({len(files)} files, train {len(train_bytes)} B sha256 "
        f"{hashlib.sha256(train_bytes).hexdigest()[:16]}, held-out {len(held_bytes)} B sha256 "
        f"{hashlib.sha256(held_bytes).hexdigest()[:16]})")
    log(f"train config: {json.dumps(asdict(cfg))}")
    log(f"model config: {mcfg.to_json()}")
    unigram = unigram_bits_per_byte(train_bytes, held_bytes)
    log(f"unigram baseline (train byte frequencies, add-one) held-out bpb: {unigram:.4f}")

    def to_dev(b: bytes) -> torch.Tensor:
        return torch.frombuffer(bytearray(b), dtype=torch.uint8).to(dev)

    data, held = _batches(to_dev(train_bytes), cfg, gen), eval_windows(to_dev(held_bytes), cfg)
    model = Transformer(mcfg).to(dev)
    log(f"parameters: {sum(p.numel() for p in model.parameters()):,}")
    target_params = [p for n, p in model.named_parameters() if not n.startswith("mtp.")]
    mtp_params = [p for n, p in model.named_parameters() if n.startswith("mtp.")]

    def target_loss(batch: torch.Tensor) -> torch.Tensor:
        logits, _ = model(batch[:, :-1])
        ce = F.cross_entropy(logits.flatten(0, 1).float(), batch[:, 1:].flatten())
        return ce + cfg.aux_loss_coef * model.moe_aux_loss(model.layers)

    def mtp_loss(batch: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():  # the target is frozen: its hidden state is an input, as in MTP
            _, hidden = model(batch[:, :-2])
        logits, _ = model.mtp_forward(hidden, batch[:, 1:-1])
        ce = F.cross_entropy(logits.flatten(0, 1).float(), batch[:, 2:].flatten())
        return ce + cfg.aux_loss_coef * model.moe_aux_loss(model.mtp)

    t0 = time.perf_counter()
    limit = cfg.time_limit_s or math.inf
    model.train()
    _run_phase("target", model, target_params, target_loss, model.layers, cfg.target_steps, "target_bpb",
               cfg, data, held, log, t0 + 0.8 * limit)
    for p in target_params:
        p.requires_grad_(False)
    scores = _run_phase("mtp", model, mtp_params, mtp_loss, model.mtp, cfg.mtp_steps, "mtp_bpb",
                        cfg, data, held, log, t0 + limit)
    log(f"training time: {time.perf_counter() - t0:.0f}s")
    log(f"RESULT held-out bpb {scores['target_bpb']:.4f} (unigram {unigram:.4f}); "
        f"MTP next-next bpb {scores['mtp_bpb']:.4f}; MTP/target argmax agreement {scores['mtp_agree']:.3f}")
    model = model.float().eval()
    stats = speculation_check(model, held_bytes, cfg.spec_prompts)
    log(f"RESULT greedy speculative decoding k={stats.k} on {cfg.spec_prompts} held-out prompts "
        f"(fp32): acceptance {stats.acceptance_rate:.3f}, per position "
        f"{[round(r, 3) for r in stats.per_position_rate]}, mean acceptance length "
        f"{stats.mean_acceptance_length:.2f}")
    save_weights(model.cpu(), out_dir / "model.safetensors",
                 {"train_config": json.dumps(asdict(cfg)), "held_out_bpb": f"{scores['target_bpb']:.4f}",
                  "unigram_bpb": f"{unigram:.4f}"})
    (out_dir / "train_log.txt").write_text("\n".join(lines) + "\n")
    return scores | {"unigram_bpb": unigram}


def speculation_check(
    model: Transformer, held_bytes: bytes, n_prompts: int, prompt_len: int = 64, new_tokens: int = 128, k: int = 3
) -> SpecStats:
    """Speculative decoding on prompts cut from held-out text; asserts it is lossless."""
    stats = SpecStats(k)
    step = len(held_bytes) // max(1, n_prompts)
    for i in range(n_prompts):
        prompt = list(held_bytes[i * step : i * step + prompt_len])
        spec = speculative_generate(model, prompt, new_tokens, k)
        if spec.tokens != greedy_generate(model, prompt, new_tokens).tokens:
            raise RuntimeError(f"speculative output differs from greedy on prompt {i}")
        assert spec.stats is not None
        stats.merge(spec.stats)
    return stats


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--corpus", type=Path, default=None, help="stdlib directory (default: this Python's)")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    for name, value in asdict(TrainConfig()).items():
        p.add_argument(f"--{name.replace('_', '-')}", type=type(value), default=value)
    args = p.parse_args(argv)
    tcfg = TrainConfig(**{k: getattr(args, k) for k in asdict(TrainConfig())})
    train(args.corpus or stdlib_dir(), args.out, tcfg, ModelConfig(), args.device)
    return 0
