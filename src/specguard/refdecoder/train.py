"""Train the reference model: target, then its MTP block, then a DSpark drafter, each on the frozen target.

Byte-level language modelling on the Python standard library's source
(``specguard.refdecoder.corpus``). Phase 1 trains the target on next-byte
prediction; phase 2 freezes it and trains the MTP block to predict the
next-next byte from the target's detached hidden state and the next byte's
embedding, as DeepSeek's MTP does; the optional phase 3 trains a separate
DSpark-style drafter the same way from two target layers. The best held-out
checkpoint of each phase is kept. Output: ``model.safetensors`` (BF16,
DeepSeek-V4 native names, the model config in the safetensors metadata),
``dspark.safetensors`` and the log.

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

from specguard.factory.models import Sizes
from specguard.refdecoder.corpus import read_split, stdlib_dir, unigram_bits_per_byte
from specguard.refdecoder.model import TRAINED, DSparkDrafter, Transformer, sizes_json
from specguard.refdecoder.specdec import Drafter, DSparkDraft, MTPDrafter, Runner, SpecStats, cache_size
from specguard.refdecoder.weights import load_weights, save_dspark, save_weights

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
    dspark_steps: int = 0  # > 0: also train a separate DSpark-style drafter on the frozen target
    dspark_stages: int = 3
    dspark_block: int = 3  # query block (draft tokens per pass) the DSpark drafter trains on
    dspark_stride: int = 8  # one block anchored every this many positions of a window
    time_limit_s: float = 0.0  # 0: none; else the target phase stops at 80 % of it, the rest at 100 %
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


def dspark_anchors(t: int, block: int, stride: int, offset: int, device: torch.device) -> torch.Tensor:
    """Anchor positions of DSpark query blocks in a window of t positions, every
    ``stride`` from ``offset``, each leaving room for its ``block`` labels."""
    return torch.arange(offset, t - block + 1, stride, device=device)


@torch.no_grad()
def evaluate(model: Transformer, windows: torch.Tensor, dspark: DSparkDrafter | None = None,
             batch: int = 32, block: int = 3) -> dict[str, float]:
    """Held-out bits/byte of the target, of MTP's next-next prediction and of
    DSpark's block (mean over its positions), and how often a drafter's first
    argmax equals the target's (the teacher-forced counterpart of position-0
    acceptance)."""
    model.eval()
    sums: dict[str, float] = {}
    counts: dict[str, int] = {}

    def add(key: str, value: float, n: int) -> None:
        sums[key] = sums.get(key, 0.0) + value
        counts[key] = counts.get(key, 0) + n

    def score(name: str, logits: torch.Tensor, labels: torch.Tensor, first: torch.Tensor,
              target_first: torch.Tensor) -> None:
        ce = F.cross_entropy(logits.flatten(0, -2).float(), labels.flatten(), reduction="sum").item()
        add(f"{name}_bpb", ce, labels.numel())
        add(f"{name}_agree", (first.argmax(-1) == target_first.argmax(-1)).sum().item(), first.shape[:-1].numel())

    for chunk in windows.split(batch):
        x, y = chunk[:, :-1], chunk[:, 1:]
        logits, hidden = model(x)
        add("target_bpb", F.cross_entropy(logits.flatten(0, 1).float(), y.flatten(), reduction="sum").item(),
            y.numel())
        mtp = model.mtp_forward(hidden[:, :-1], x[:, 1:])[0]
        score("mtp", mtp, y[:, 1:], mtp, logits[:, 1:])
        if dspark is not None:
            _, feats = model(x, capture=dspark.target_layers)
            anchors = dspark_anchors(x.shape[1], block, stride=8, offset=1, device=x.device)
            dlogits = dspark(model, feats, x, anchors, block)  # [B, M, block, V]
            labels = chunk[:, anchors[:, None] + 1 + torch.arange(block, device=x.device)]
            score("dspark", dlogits, labels, dlogits[:, :, 0], logits[:, anchors])
    model.train()
    return {k: v / counts[k] / (LN2 if k.endswith("bpb") else 1.0) for k, v in sums.items()}


def _optimizer(params: list[torch.nn.Parameter], cfg: TrainConfig, fused: bool) -> torch.optim.AdamW:
    decay = [p for p in params if p.dim() >= 2]
    rest = [p for p in params if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": rest, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=(0.9, 0.95), fused=fused)


@dataclass
class Phase:
    """What one training phase updates, minimises and keeps."""

    name: str
    owner: torch.nn.Module  # whose state is kept at the best held-out metric
    params: list[torch.nn.Parameter]
    blocks: torch.nn.ModuleList  # MoE blocks whose router bias is balanced
    loss: Callable[[torch.Tensor], torch.Tensor]
    metric: str
    steps: int


def _run_phase(
    phase: Phase,
    model: Transformer,
    score: Callable[[], dict[str, float]],
    cfg: TrainConfig,
    data: Iterator[torch.Tensor],
    device: torch.device,
    log: Callable[[str], None],
    deadline: float,
) -> dict[str, float]:
    """Train ``phase.params``; keep the owner's state with the best held-out ``phase.metric``."""
    for p in phase.params:  # only this phase's parameters learn; the rest is an input
        p.requires_grad_(True)
    opt = _optimizer(phase.params, cfg, fused=device.type == "cuda")
    best, best_state = math.inf, None
    steps = phase.steps
    t0 = time.perf_counter()
    for step in range(steps + 1):
        if step < steps and time.perf_counter() > deadline:
            log(f"{phase.name} stopped at step {step} of {steps}: time limit")
            steps = step
        if step % cfg.eval_every == 0 or step == steps:
            scores = score()
            log(f"{phase.name} step {step:5d}  " + "  ".join(f"{k} {v:.4f}" for k, v in scores.items())
                + f"  ({time.perf_counter() - t0:.0f}s)")
            if scores[phase.metric] < best:
                best = scores[phase.metric]
                best_state = {k: v.detach().clone() for k, v in phase.owner.state_dict().items()}
        if step == steps:
            break
        for group in opt.param_groups:
            group["lr"] = _lr(step, steps, cfg)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
            loss = phase.loss(next(data))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(phase.params, 1.0)
        opt.step()
        model.update_router_bias(phase.blocks, cfg.bias_update_rate)
    assert best_state is not None
    phase.owner.load_state_dict(best_state)
    for p in phase.params:  # frozen from here on: later phases read it as an input
        p.requires_grad_(False)
    scores = score()
    log(f"{phase.name} kept best held-out {phase.metric}: " + "  ".join(f"{k} {v:.4f}" for k, v in scores.items()))
    return scores


def _ce(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.flatten(0, 1).float(), y.flatten())


def _phases(model: Transformer, dspark: DSparkDrafter | None, cfg: TrainConfig) -> list[Phase]:
    def target_loss(batch: torch.Tensor) -> torch.Tensor:
        logits, _ = model(batch[:, :-1])
        return _ce(logits, batch[:, 1:]) + cfg.aux_loss_coef * model.moe_aux_loss(model.layers)

    def mtp_loss(batch: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():  # the target is frozen: its hidden state is an input, as in MTP
            _, hidden = model(batch[:, :-3])
        logits, own = model.mtp_forward(hidden, batch[:, 1:-2])
        # a second, recurrent pass (training-time test): the block's own hidden state at t
        # stands in for the target's at t+1, as drafts 2..k use it in decoding
        logits2, _ = model.mtp_forward(own, batch[:, 2:-1], start=1)
        aux = cfg.aux_loss_coef * model.moe_aux_loss(model.mtp)
        return _ce(logits, batch[:, 2:-1]) + _ce(logits2, batch[:, 3:]) + aux

    def dspark_loss(batch: torch.Tensor) -> torch.Tensor:
        assert dspark is not None
        x = batch[:, :-1]
        with torch.no_grad():
            _, feats = model(x, capture=dspark.target_layers)
        offset = int(torch.randint(0, cfg.dspark_stride, (1,)))
        anchors = dspark_anchors(x.shape[1], cfg.dspark_block, cfg.dspark_stride, offset, x.device)
        logits = dspark(model, feats, x, anchors, cfg.dspark_block)
        labels = batch[:, anchors[:, None] + 1 + torch.arange(cfg.dspark_block, device=x.device)]
        return _ce(logits.flatten(1, 2), labels.flatten(1)) + cfg.aux_loss_coef * model.moe_aux_loss(dspark.mtp)

    def params(module: torch.nn.Module, mtp: bool) -> list[torch.nn.Parameter]:
        return [p for n, p in module.named_parameters() if n.startswith("mtp.") == mtp]

    phases = [
        Phase("target", model, params(model, False), model.layers, target_loss, "target_bpb", cfg.target_steps),
        Phase("mtp", model, params(model, True), model.mtp, mtp_loss, "mtp_bpb", cfg.mtp_steps),
    ]
    if dspark is not None:
        phases.append(Phase("dspark", dspark, list(dspark.parameters()), dspark.mtp, dspark_loss,
                            "dspark_bpb", cfg.dspark_steps))
    return [p for p in phases if p.steps > 0]


def train(corpus_root: Path, out_dir: Path, cfg: TrainConfig, mcfg: Sizes, device: str,
          init: Path | None = None) -> dict[str, float]:
    """Run the phases with steps > 0; ``init``: start from saved target + MTP weights."""
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
    model = load_weights(init) if init else Transformer(mcfg)
    mcfg = model.cfg
    log(f"model config: {sizes_json(mcfg)}" + (f" (initialised from {init})" if init else ""))
    unigram = unigram_bits_per_byte(train_bytes, held_bytes)
    log(f"unigram baseline (train byte frequencies, add-one) held-out bpb: {unigram:.4f}")

    def to_dev(b: bytes) -> torch.Tensor:
        return torch.frombuffer(bytearray(b), dtype=torch.uint8).to(dev)

    data, held = _batches(to_dev(train_bytes), cfg, gen), eval_windows(to_dev(held_bytes), cfg)
    model = model.to(dev).train()
    dspark = DSparkDrafter(mcfg, cfg.dspark_stages).to(dev).train() if cfg.dspark_steps else None
    log(f"parameters: target + MTP {sum(p.numel() for p in model.parameters()):,}"
        + (f", DSpark drafter {sum(p.numel() for p in dspark.parameters()):,}" if dspark else ""))
    for p in [*model.parameters(), *(dspark.parameters() if dspark else ())]:
        p.requires_grad_(False)

    t0 = time.perf_counter()
    limit = cfg.time_limit_s or math.inf
    phases = _phases(model, dspark, cfg)
    scores: dict[str, float] = {}
    for i, phase in enumerate(phases):
        share = 0.8 if phase.name == "target" and i + 1 < len(phases) else 1.0
        deadline = t0 + share * limit
        scores = _run_phase(phase, model, lambda: evaluate(model, held, dspark, block=cfg.dspark_block),
                            cfg, data, dev, log,
                            deadline)
    log(f"training time: {time.perf_counter() - t0:.0f}s")
    log(f"RESULT held-out bpb {scores['target_bpb']:.4f} (unigram {unigram:.4f}); "
        f"MTP next-next bpb {scores['mtp_bpb']:.4f}; MTP/target argmax agreement {scores['mtp_agree']:.3f}"
        + (f"; DSpark block bpb (position mean) {scores['dspark_bpb']:.4f}, agreement {scores['dspark_agree']:.3f}"
           if dspark else ""))
    meta = {"train_config": json.dumps(asdict(cfg)), "held_out_bpb": f"{scores['target_bpb']:.4f}",
            "unigram_bpb": f"{unigram:.4f}"}
    log_name = "train_log.txt" if any(p.name in ("target", "mtp") for p in phases) else "dspark_log.txt"

    def write_out() -> None:  # weights first, so a failing check below still leaves them
        if any(p.name in ("target", "mtp") for p in phases):
            save_weights(model, out_dir / "model.safetensors", meta)
        if dspark is not None:
            save_dspark(dspark, out_dir / "dspark.safetensors", meta)
        (out_dir / log_name).write_text("\n".join(lines) + "\n")

    write_out()
    model = model.float().eval()
    drafters: list[tuple[str, Drafter]] = [("MTP", MTPDrafter(model))]
    if dspark is not None:
        drafters.append(("DSpark", DSparkDraft(model, dspark.float().eval())))
    for name, drafter in drafters:
        stats = speculation_check(model, held_bytes, cfg.spec_prompts, drafter=drafter)
        log(f"RESULT {name} greedy speculative decoding k={stats.k} on {cfg.spec_prompts} held-out prompts "
            f"(fp32): acceptance {stats.acceptance_rate:.3f}, per position "
            f"{[round(r, 3) for r in stats.per_position_rate]}, mean acceptance length "
            f"{stats.mean_acceptance_length:.2f}")
    write_out()
    return scores | {"unigram_bpb": unigram}


def speculation_check(
    model: Transformer, held_bytes: bytes, n_prompts: int, prompt_len: int = 64, new_tokens: int = 128,
    k: int = 3, drafter: Drafter | None = None,
) -> SpecStats:
    """Speculative decoding on prompts cut from held-out text; asserts it is lossless."""
    stats = SpecStats(k)
    step = len(held_bytes) // max(1, n_prompts)
    runner = Runner(model, drafter or MTPDrafter(model), k, cache_size(prompt_len, new_tokens, k))
    for i in range(n_prompts):
        prompt = list(held_bytes[i * step : i * step + prompt_len])
        spec = runner.speculative(prompt, new_tokens)
        if spec.tokens != runner.greedy(prompt, new_tokens).tokens:
            raise RuntimeError(f"speculative output differs from greedy on prompt {i}")
        assert spec.stats is not None
        stats.merge(spec.stats)
    return stats


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--corpus", type=Path, default=None, help="stdlib directory (default: this Python's)")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--init", type=Path, default=None,
                   help="start from these target + MTP weights (e.g. to train only the DSpark drafter)")
    for name, value in asdict(TrainConfig()).items():
        p.add_argument(f"--{name.replace('_', '-')}", type=type(value), default=value)
    args = p.parse_args(argv)
    tcfg = TrainConfig(**{k: getattr(args, k) for k in asdict(TrainConfig())})
    train(args.corpus or stdlib_dir(), args.out, tcfg, TRAINED, args.device, args.init)
    return 0
