"""Greedy decoding and lossless greedy speculative decoding, on static buffers.

One step of speculative decoding, as vLLM runs it:

1. the target verifies ``[last token, d1 .. dk]`` in ONE batched forward of
   k+1 positions against its KV cache;
2. the longest prefix of drafts equal to the target's own greedy choices is
   accepted, plus one bonus token (the target's choice after that prefix), so
   the output is token for token what plain greedy decoding gives;
3. the drafter consumes the target's hidden states at the verified positions
   and proposes the next k drafts: the MTP block the first from the target's
   hidden state and drafts 2..k recurrently from its own (vLLM's
   ``num_speculative_tokens > num_nextn_predict_layers`` path); a DSpark
   drafter all k in one parallel pass over a query block.

Caches are static and written at explicit positions, so rejected drafts are
rolled back by writing over them; a whole step has fixed shapes and runs as one
CUDA graph on GPU (:class:`Runner`). Metrics follow vLLM's counters
(``spec_decode_num_drafts`` etc.; docs/formats.md).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from specguard.refdecoder.model import DSparkDrafter, KVCache, Transformer


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

    @classmethod
    def from_histogram(cls, hist: list[int]) -> SpecStats:
        """From the number of steps that accepted 0, 1, .. k drafts."""
        stats = cls(len(hist) - 1)
        for accepted, n in enumerate(hist):
            for _ in range(n):
                stats.record(accepted)
        return stats

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


class MTPDrafter:
    """The target's own MTP block (DeepSeek ``num_nextn_predict_layers = 1``).

    Drafts k tokens in k steps: the first from the target's hidden state, the
    rest recurrently from the block's own hidden state (vLLM's
    ``num_speculative_tokens > num_nextn_predict_layers`` path).
    """

    def __init__(self, model: Transformer) -> None:
        self.model = model
        self.capture = (model.cfg.layers - 1,)  # the last hidden state

    def new_caches(self, size: int) -> list[KVCache]:
        return self.model.new_caches(1, size)

    def propose(self, features: torch.Tensor, next_tokens: torch.Tensor, positions: torch.Tensor,
                last: torch.Tensor, k: int, caches: list[KVCache]) -> torch.Tensor:
        """k drafts [k] after verified position ``positions[last]``.

        ``features`` [1, T, dim] are the target's at ``positions`` [T],
        ``next_tokens`` [1, T] the token after each; entries after index ``last``
        are stale (rejected) and only write cache slots that are overwritten later.
        """
        logits, h = self.model.mtp_forward(features, next_tokens, caches[0], positions=positions)
        draft = logits[0].index_select(0, last).argmax(-1)  # [1]
        h = h[:, last]  # [1, 1, dim]
        drafts, pos = [draft], positions.index_select(0, last)
        for _ in range(k - 1):  # the block's own hidden state stands in for the target's
            pos = pos + 1
            logits, h = self.model.mtp_forward(h, draft[None], caches[0], positions=pos)
            draft = logits[0, -1:].argmax(-1)
            drafts.append(draft)
        return torch.cat(drafts)


class DSparkDraft:
    """A separate DSpark drafter: context from several target layers, k drafts in one pass."""

    def __init__(self, model: Transformer, drafter: DSparkDrafter) -> None:
        self.model, self.drafter = model, drafter
        self.capture = drafter.target_layers

    def new_caches(self, size: int) -> list[KVCache]:
        return self.model.new_caches(len(self.drafter.mtp), size)

    def propose(self, features: torch.Tensor, next_tokens: torch.Tensor, positions: torch.Tensor,
                last: torch.Tensor, k: int, caches: list[KVCache]) -> torch.Tensor:
        """k drafts [k] after the anchor ``next_tokens[last]`` (the bonus token)."""
        self.drafter.write_context(self.model, features, positions, caches)
        anchor_pos = positions.index_select(0, last) + 1
        block = anchor_pos + torch.arange(k, device=positions.device)
        logits = self.drafter.draft(self.model, next_tokens[0].index_select(0, last), block, caches)
        return logits[0].argmax(-1)


Drafter = MTPDrafter | DSparkDraft


def _check_length(prompt: list[int], max_new_tokens: int, k: int, size: int) -> None:
    if not prompt:
        raise ValueError("prompt must hold at least one token")
    need = len(prompt) + max_new_tokens + 2 * (k + 1)
    if need > size:
        raise ValueError(f"prompt + new tokens + drafts = {need} > max_seq_len={size}")


def cache_size(prompt_len: int, max_new_tokens: int, k: int) -> int:
    """Slots a run needs (prompt, new tokens, one step of overshoot and drafts), in 64s."""
    need = prompt_len + max_new_tokens + 2 * (k + 1)
    return -(-need // 64) * 64


class Runner:
    """Greedy and speculative decoding of one model (and drafter) on static buffers.

    Every piece of state a step touches lives in a preallocated tensor (KV
    caches, positions, the output, the counters), and a step has fixed shapes:
    verification always feeds k+1 positions and the drafter always reads them,
    with the accepted count used as a device-side index. So on CUDA each step
    (and each prefill) is captured once as a CUDA graph and replayed, and the
    host synchronises only to learn how many tokens are out, a few times per
    generation. On CPU the same functions run eagerly.
    """

    def __init__(self, model: Transformer, drafter: Drafter | None = None, k: int = 3,
                 size: int | None = None, graphs: bool | None = None) -> None:
        if k < 1:
            raise ValueError("k must be >= 1")
        self.model, self.drafter, self.k = model, drafter, k
        self.device = model.head.weight.device
        self.size = min(size or model.cfg.max_seq_len, model.cfg.max_seq_len)
        self.graphs = self.device.type == "cuda" if graphs is None else graphs
        dev, long = self.device, torch.long
        self.caches = model.new_caches(size=self.size)
        self.d_caches = drafter.new_caches(self.size) if drafter else []
        self.out = torch.zeros(self.size, dtype=long, device=dev)  # generated tokens
        self.n_out = torch.zeros((), dtype=long, device=dev)
        self.pos = torch.zeros((), dtype=long, device=dev)  # verified target positions
        self.last = torch.zeros(1, dtype=long, device=dev)  # last token out, not yet fed
        self.drafts = torch.zeros(k, dtype=long, device=dev)
        self.hist = torch.zeros(k + 1, dtype=long, device=dev)  # steps by accepted count
        self.steps = torch.arange(k + 1, device=dev)
        self.prompts: dict[int, torch.Tensor] = {}
        self._fns: dict[tuple[str, int], Callable[[], None]] = {}

    # ---------------------------------------------------------------- steps

    def _greedy_prefill(self, t: int) -> None:
        logits, _ = self.model(self.prompts[t][None], self.caches,
                               positions=torch.arange(t, device=self.device))
        self._emit_first(logits, t)

    def _emit_first(self, logits: torch.Tensor, t: int) -> None:
        self.last.copy_(logits[0, -1:].argmax(-1))
        self.out[:1] = self.last
        self.n_out.fill_(1)
        self.pos.fill_(t)

    def _greedy_step(self) -> None:
        logits, _ = self.model(self.last[None], self.caches, positions=self.pos[None])
        self.last.copy_(logits[0, -1:].argmax(-1))
        self.out.index_copy_(0, self.n_out[None], self.last)
        self.n_out += 1
        self.pos += 1

    def _spec_prefill(self, t: int) -> None:
        assert self.drafter is not None
        prompt = self.prompts[t]
        positions = torch.arange(t, device=self.device)
        logits, features = self.model(prompt[None], self.caches, self.drafter.capture, positions)
        self._emit_first(logits, t)
        self.hist.zero_()
        next_tokens = torch.cat((prompt[1:], self.last))[None]
        last = positions[-1:]
        self.drafts.copy_(self.drafter.propose(features, next_tokens, positions, last, self.k, self.d_caches))

    def _spec_step(self) -> None:
        """Verify [last, d1..dk] in one forward, accept the longest matching prefix plus the
        target's own next token, then draft k more from the verified positions."""
        assert self.drafter is not None
        k = self.k
        positions = self.pos + self.steps
        fed = torch.cat((self.last, self.drafts))
        logits, features = self.model(fed[None], self.caches, self.drafter.capture, positions)
        greedy = logits[0].argmax(-1)  # the target's choice after each fed token
        accepted = (self.drafts == greedy[:k]).long().cumprod(0).sum()
        bonus = greedy.index_select(0, accepted[None])
        # out: d1..d_accepted then the bonus; later slots are overwritten by the next step
        emitted = torch.where(self.steps < accepted, torch.cat((self.drafts, bonus)), bonus)
        self.out.index_copy_(0, self.n_out + self.steps, emitted)
        self.hist.index_add_(0, accepted[None], torch.ones_like(accepted[None]))
        self.n_out += accepted + 1
        self.pos += accepted + 1
        self.last.copy_(bonus)
        self.drafts.copy_(self.drafter.propose(features, emitted[None], positions, accepted[None], k,
                                               self.d_caches))

    # ---------------------------------------------------------------- graphs

    def _fn(self, name: str, t: int, fn: Callable[[], None]) -> Callable[[], None]:
        """``fn``, captured as a CUDA graph on first use when running on CUDA."""
        key = (name, t)
        if key not in self._fns:
            self._fns[key] = self._capture(fn) if self.graphs else fn
        return self._fns[key]

    @staticmethod
    def _capture(fn: Callable[[], None]) -> Callable[[], None]:
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):  # warm-up outside the graph (allocator, kernels)
            for _ in range(2):
                fn()
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fn()
        return graph.replay

    # ---------------------------------------------------------------- runs

    def _load_prompt(self, prompt: list[int], max_new_tokens: int) -> int:
        _check_length(prompt, max_new_tokens, self.k, self.size)
        t = len(prompt)
        if t not in self.prompts:
            self.prompts[t] = torch.zeros(t, dtype=torch.long, device=self.device)
        self.prompts[t].copy_(torch.tensor(prompt, dtype=torch.long))
        return t

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    @torch.inference_mode()
    def greedy(self, prompt: list[int], max_new_tokens: int) -> Generation:
        """Plain greedy decoding, one target forward per token (the yardstick)."""
        self._sync()
        t0 = time.perf_counter()
        t = self._load_prompt(prompt, max_new_tokens)
        self._fn("greedy-prefill", t, lambda: self._greedy_prefill(t))()
        step = self._fn("greedy-step", 0, self._greedy_step)
        for _ in range(max_new_tokens - 1):
            step()
        out = self.out[:max_new_tokens].tolist()
        return Generation(out, time.perf_counter() - t0)

    @torch.inference_mode()
    def speculative(self, prompt: list[int], max_new_tokens: int) -> Generation:
        """Greedy speculative decoding with k draft tokens; output equals :meth:`greedy`'s."""
        if self.drafter is None:
            raise ValueError("speculative decoding needs a drafter")
        self._sync()
        t0 = time.perf_counter()
        t = self._load_prompt(prompt, max_new_tokens)
        self._fn("spec-prefill", t, lambda: self._spec_prefill(t))()
        step = self._fn("spec-step", 0, self._spec_step)
        done = 1
        while done < max_new_tokens:
            # each step emits 1..k+1 tokens: this many steps are all needed
            for _ in range(-(-(max_new_tokens - done) // (self.k + 1))):
                step()
            done = int(self.n_out)
        out = self.out[:max_new_tokens].tolist()
        seconds = time.perf_counter() - t0
        return Generation(out, seconds, SpecStats.from_histogram(self.hist.tolist()))


@torch.inference_mode()
def greedy_generate(model: Transformer, prompt: list[int], max_new_tokens: int) -> Generation:
    """Plain greedy decoding (a one-off :class:`Runner`, eager)."""
    size = min(cache_size(len(prompt), max_new_tokens, 1), model.cfg.max_seq_len)
    return Runner(model, None, 1, size, graphs=False).greedy(prompt, max_new_tokens)


@torch.inference_mode()
def speculative_generate(
    model: Transformer,
    prompt: list[int],
    max_new_tokens: int,
    k: int = 3,
    drafter: Drafter | None = None,
) -> Generation:
    """Greedy speculative decoding with k draft tokens (a one-off :class:`Runner`, eager);
    output equals greedy_generate's. ``drafter`` defaults to the model's own MTP block."""
    if k < 1:
        raise ValueError("k must be >= 1")
    size = min(cache_size(len(prompt), max_new_tokens, k), model.cfg.max_seq_len)
    runner = Runner(model, drafter or MTPDrafter(model), k, size, graphs=False)
    return runner.speculative(prompt, max_new_tokens)
