"""Greedy decoding and lossless greedy speculative decoding with the MTP drafter.

One step of speculative decoding, as vLLM runs it:

1. the target verifies ``[last token, d1 .. dk]`` in ONE batched forward of
   k+1 positions against its KV cache;
2. the longest prefix of drafts equal to the target's own greedy choices is
   accepted, plus one bonus token (the target's choice after that prefix), so
   the output is token for token what plain greedy decoding gives;
3. the drafter (the MTP block, or a separate DSpark-style drafter) consumes
   the target's hidden states at the accepted positions and proposes the next
   k drafts: the first from the target's hidden state, drafts 2..k
   recurrently from the drafter's own hidden state (vLLM's
   ``num_speculative_tokens > num_nextn_predict_layers`` path).

Both caches are rolled back by truncating their length. Metrics follow vLLM's
counters (``spec_decode_num_drafts`` etc.; docs/formats.md).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from specguard.engine.model import DSparkDrafter, KVCache, Transformer


@dataclass
class SpecStats:
    """vLLM's speculative-decoding counters and the rates derived from them."""

    k: int
    num_drafts: int = 0
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0
    accepted_per_pos: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.accepted_per_pos:
            self.accepted_per_pos = [0] * self.k

    def record(self, accepted: int) -> None:
        self.num_drafts += 1
        self.num_draft_tokens += self.k
        self.num_accepted_tokens += accepted
        for pos in range(accepted):
            self.accepted_per_pos[pos] += 1

    @property
    def acceptance_rate(self) -> float:
        """accepted / draft tokens."""
        return self.num_accepted_tokens / self.num_draft_tokens if self.num_draft_tokens else 0.0

    @property
    def mean_acceptance_length(self) -> float:
        """1 + accepted / drafts: tokens emitted per target forward."""
        return 1.0 + self.num_accepted_tokens / self.num_drafts if self.num_drafts else 1.0

    @property
    def per_position_rate(self) -> list[float]:
        """accepted at position i / drafts."""
        n = self.num_drafts or 1
        return [a / n for a in self.accepted_per_pos]

    def merge(self, other: SpecStats) -> None:
        if other.k != self.k:
            raise ValueError("cannot merge stats of different k")
        self.num_drafts += other.num_drafts
        self.num_draft_tokens += other.num_draft_tokens
        self.num_accepted_tokens += other.num_accepted_tokens
        self.accepted_per_pos = [a + b for a, b in zip(self.accepted_per_pos, other.accepted_per_pos, strict=True)]


@dataclass
class Generation:
    tokens: list[int]  # generated tokens only (prompt excluded)
    seconds: float
    stats: SpecStats | None = None  # None for plain greedy decoding

    @property
    def tokens_per_s(self) -> float:
        return len(self.tokens) / self.seconds if self.seconds > 0 else float("inf")


def _as_batch(tokens: list[int], device: torch.device) -> torch.Tensor:
    return torch.tensor([tokens], dtype=torch.long, device=device)


def _check_length(model: Transformer, prompt: list[int], max_new_tokens: int, k: int) -> None:
    if not prompt:
        raise ValueError("prompt must hold at least one token")
    need = len(prompt) + max_new_tokens + k + 1
    if need > model.cfg.max_seq_len:
        raise ValueError(f"prompt + new tokens + drafts = {need} > max_seq_len={model.cfg.max_seq_len}")


@torch.inference_mode()
def greedy_generate(model: Transformer, prompt: list[int], max_new_tokens: int) -> Generation:
    """Plain greedy decoding, one target forward per token (the yardstick)."""
    _check_length(model, prompt, max_new_tokens, 0)
    device = model.head.weight.device
    caches = model.new_caches()
    t0 = time.perf_counter()
    logits, _ = model(_as_batch(prompt, device), caches)
    out = [int(logits[0, -1].argmax())]
    while len(out) < max_new_tokens:
        logits, _ = model(_as_batch(out[-1:], device), caches)
        out.append(int(logits[0, -1].argmax()))
    return Generation(out, time.perf_counter() - t0)


class MTPDrafter:
    """The target's own MTP block (DeepSeek ``num_nextn_predict_layers = 1``)."""

    def __init__(self, model: Transformer) -> None:
        self.model = model
        self.capture = (model.cfg.n_layers - 1,)  # the last hidden state

    def new_caches(self) -> list[KVCache]:
        return self.model.new_caches(1)

    def step(
        self, features: torch.Tensor, next_tokens: torch.Tensor, caches: list[KVCache]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return self.model.mtp_forward(features, next_tokens, caches[0])


class DSparkDraft:
    """A separate DSpark-style drafter reading several target layers."""

    def __init__(self, model: Transformer, drafter: DSparkDrafter) -> None:
        self.model, self.drafter = model, drafter
        self.capture = drafter.target_layers

    def new_caches(self) -> list[KVCache]:
        return self.model.new_caches(len(self.drafter.mtp))

    def step(
        self, features: torch.Tensor, next_tokens: torch.Tensor, caches: list[KVCache]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return self.drafter(self.model, features, next_tokens, caches)


Drafter = MTPDrafter | DSparkDraft


class _Proposer:
    """Runs a drafter over verified positions, then k-1 recurrent steps."""

    def __init__(self, drafter: Drafter, k: int, device: torch.device) -> None:
        self.drafter, self.k, self.device = drafter, k, device
        self.caches = drafter.new_caches()

    def propose(self, features: torch.Tensor, next_tokens: list[int]) -> list[int]:
        """features [1, T, ...] of the target at T verified positions; next_tokens: the T tokens after them."""
        logits, h = self.drafter.step(features, _as_batch(next_tokens, self.device), self.caches)
        verified = self.caches[0].length
        drafts = [int(logits[0, -1].argmax())]
        for _ in range(self.k - 1):  # the drafter's own hidden state stands in for the target's
            logits, h = self.drafter.step(h[:, -1:], _as_batch(drafts[-1:], self.device), self.caches)
            drafts.append(int(logits[0, -1].argmax()))
        for cache in self.caches:  # recurrent positions are provisional
            cache.length = verified
        return drafts


@torch.inference_mode()
def speculative_generate(
    model: Transformer,
    prompt: list[int],
    max_new_tokens: int,
    k: int = 3,
    drafter: Drafter | None = None,
) -> Generation:
    """Greedy speculative decoding with k draft tokens; output equals greedy_generate's.

    ``drafter`` defaults to the model's own MTP block.
    """
    if k < 1:
        raise ValueError("k must be >= 1")
    _check_length(model, prompt, max_new_tokens, k)
    device = model.head.weight.device
    drafter = drafter or MTPDrafter(model)
    caches = model.new_caches()
    proposer = _Proposer(drafter, k, device)
    stats = SpecStats(k)
    t0 = time.perf_counter()
    logits, features = model(_as_batch(prompt, device), caches, drafter.capture)
    out = [int(logits[0, -1].argmax())]
    drafts = proposer.propose(features, prompt[1:] + out)
    while len(out) < max_new_tokens:
        verified = caches[0].length
        # one batched target forward verifies all k drafts
        logits, features = model(_as_batch(out[-1:] + drafts, device), caches, drafter.capture)
        greedy = logits[0].argmax(-1).tolist()  # target's choice after each fed token
        accepted = 0
        while accepted < k and drafts[accepted] == greedy[accepted]:
            accepted += 1
        stats.record(accepted)
        new = [*drafts[:accepted], greedy[accepted]]
        out.extend(new)
        for cache in caches:  # keep the fed token and the accepted drafts
            cache.length = verified + accepted + 1
        drafts = proposer.propose(features[:, : accepted + 1], new)
    return Generation(out[:max_new_tokens], time.perf_counter() - t0, stats)
