"""Counter deltas between scrapes, a sliding window over them, and the verdict per model.

Rates follow vLLM 0.33's own definitions (``SpecDecodingProm`` docstring and
``SpecDecodingLogging.log``, vllm/v1/spec_decode/metrics.py): acceptance =
accepted / draft tokens; mean acceptance length = 1 + accepted / drafts
(the bonus token included); per-position acceptance = accepted at position i
/ drafts.

Counter resets. ``SpecDecodingProm.observe`` increments drafts, draft tokens,
accepted and every per-position counter of an engine in one call, and
prometheus_client stamps each labelled series with ``_created`` when the
engine's process creates it. So a series (model_name, engine) *restarted*
when its drafts counter's ``_created`` is newer than at the previous scrape
or, where no ``_created`` is exported (vLLM's multiprocess mode,
vllm/v1/metrics/prometheus.py), when its drafts counter dropped; a restarted
series counts from zero. A counter *went backwards* when it is lower than at
the previous scrape and the series did not restart by that rule (e.g. one
counter dropping alone, or the same ``_created`` with lower values: a stale
cache or several servers behind one URL), or when ``_created`` moved back
in time (an older process answered). That is an error, not a reset.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field

from specguard.integrations.watch.levels import (
    ALERT,
    COSTLY_MEAN_LENGTH,
    IDLE,
    MAX_DROP,
    MIN_ACCEPTANCE,
    MIN_DRAFT_TOKENS,
    OK,
)
from specguard.integrations.watch.metrics import (
    DRAFTS,
    Counters,
    CounterWentBackwards,
    SeriesKey,
    Snapshot,
)
from specguard.terminal import percent


@dataclass
class Delta:
    """What one engine counted between two scrapes."""

    drafts: float = 0.0
    draft_tokens: float = 0.0
    accepted: float = 0.0
    per_pos: dict[int, float] = field(default_factory=dict)
    generation_tokens: float | None = None

    def add(self, other: Delta) -> None:
        self.drafts += other.drafts
        self.draft_tokens += other.draft_tokens
        self.accepted += other.accepted
        for p, v in other.per_pos.items():
            self.per_pos[p] = self.per_pos.get(p, 0.0) + v
        if other.generation_tokens is not None:
            self.generation_tokens = (self.generation_tokens or 0.0) + other.generation_tokens


def _label(key: SeriesKey) -> str:
    return f"{key[0] or '(no model_name)'} engine {key[1] or '?'}"


def _restarted(key: SeriesKey, prev: Counters, cur: Counters) -> bool:
    if prev.created is not None and cur.created is not None:
        if cur.created < prev.created:
            raise CounterWentBackwards(
                f"{_label(key)}: {DRAFTS}_created went back from {prev.created:.3f} to {cur.created:.3f}: "
                "an older process answered (several servers behind one URL?)")
        return cur.created > prev.created
    return cur.drafts < prev.drafts


def series_delta(key: SeriesKey, prev: Counters | None, cur: Counters) -> tuple[Delta, bool]:
    """(counts between the scrapes, whether the series restarted); raises CounterWentBackwards."""
    if prev is None or _restarted(key, prev, cur):
        return Delta(cur.drafts, cur.draft_tokens, cur.accepted, dict(cur.per_pos), cur.generation_tokens), (
            prev is not None)
    before, after = prev.values(), cur.values()
    for name, value in after.items():
        old = before.get(name, 0.0)
        if value < old:
            why = (f"same {DRAFTS}_created" if cur.created is not None
                   else f"while {DRAFTS} did not drop")
            raise CounterWentBackwards(f"{_label(key)}: {name} went backwards from {old:g} to {value:g} "
                                       f"({why}): not a restart")
    gen = None
    if cur.generation_tokens is not None:
        gen = cur.generation_tokens - (prev.generation_tokens or 0.0)
    return Delta(cur.drafts - prev.drafts, cur.draft_tokens - prev.draft_tokens, cur.accepted - prev.accepted,
                 {p: v - prev.per_pos.get(p, 0.0) for p, v in cur.per_pos.items()}, gen), False


def diff(prev: Snapshot | None, cur: Snapshot) -> tuple[dict[SeriesKey, Delta], list[SeriesKey]]:
    """Per-series counts between two scrapes (``prev`` None: since each engine started) and the
    series that restarted; raises CounterWentBackwards."""
    deltas: dict[SeriesKey, Delta] = {}
    restarted: list[SeriesKey] = []
    for key, c in cur.series.items():
        deltas[key], again = series_delta(key, prev.series.get(key) if prev else None, c)
        if again:
            restarted.append(key)
    return deltas, restarted


@dataclass
class ModelStats:
    """One model's counts over a span, summed over its engines, and the rates derived from them."""

    model: str
    engines: list[str]
    seconds: float | None  # None: since the engines started (no wall-clock span)
    counts: Delta

    @property
    def acceptance(self) -> float | None:
        c = self.counts
        return c.accepted / c.draft_tokens if c.draft_tokens else None

    @property
    def mean_acceptance_length(self) -> float | None:
        c = self.counts
        return 1.0 + c.accepted / c.drafts if c.drafts else None

    @property
    def per_position(self) -> list[float] | None:
        c = self.counts
        if not c.drafts:
            return None
        return [c.per_pos.get(p, 0.0) / c.drafts for p in range(max(c.per_pos, default=-1) + 1)]

    @property
    def k(self) -> int:
        """Draft tokens per step: vLLM exports one per-position counter per speculative token."""
        return len(self.counts.per_pos)

    def rate(self, value: float | None) -> float | None:
        return value / self.seconds if value is not None and self.seconds else None

    @property
    def drafts_per_s(self) -> float | None:
        return self.rate(self.counts.drafts)

    @property
    def generation_tokens_per_s(self) -> float | None:
        return self.rate(self.counts.generation_tokens)

    def as_dict(self) -> dict:
        c = self.counts
        return {
            "model": self.model, "engines": self.engines, "seconds": _round(self.seconds),
            "drafts": _count(c.drafts), "draft_tokens": _count(c.draft_tokens), "accepted_tokens": _count(c.accepted),
            "generation_tokens": _count(c.generation_tokens), "acceptance": self.acceptance,
            "per_position": self.per_position, "mean_acceptance_length": self.mean_acceptance_length,
            "drafts_per_s": _round(self.drafts_per_s), "generation_tokens_per_s": _round(self.generation_tokens_per_s),
        }


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 3)


def _count(x: float | None) -> float | int | None:
    """Prometheus values are floats; vLLM's counts are whole numbers."""
    return int(x) if x is not None and x.is_integer() else x


def by_model(deltas: dict[SeriesKey, Delta], seconds: float | None) -> list[ModelStats]:
    """Sum every engine's counts per model_name."""
    out: dict[str, ModelStats] = {}
    for (model, engine), d in sorted(deltas.items()):
        m = out.setdefault(model, ModelStats(model, [], seconds, Delta()))
        m.engines.append(engine)
        m.counts.add(d)
    return list(out.values())


class SlidingWindow:
    """The intervals between scrapes that end within the last ``seconds`` (at least the latest)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.intervals: collections.deque[tuple[float, float, dict[SeriesKey, Delta]]] = collections.deque()

    def add(self, t0: float, t1: float, deltas: dict[SeriesKey, Delta]) -> None:
        self.intervals.append((t0, t1, deltas))
        while len(self.intervals) > 1 and self.intervals[0][1] <= t1 - self.seconds:
            self.intervals.popleft()

    @property
    def span(self) -> float:
        return self.intervals[-1][1] - self.intervals[0][0] if self.intervals else 0.0

    def stats(self) -> list[ModelStats]:
        total: dict[SeriesKey, Delta] = {}
        for _, _, deltas in self.intervals:
            for key, d in deltas.items():
                total.setdefault(key, Delta()).add(d)
        return by_model(total, self.span)


@dataclass(frozen=True)
class Thresholds:
    min_acceptance: float = MIN_ACCEPTANCE
    max_drop: float = MAX_DROP
    min_draft_tokens: float = MIN_DRAFT_TOKENS


@dataclass
class Verdict:
    """A model's state over the window: ``ok``, ``alert`` (with one line per reason) or ``idle``."""

    stats: ModelStats
    status: str
    alerts: list[str] = field(default_factory=list)
    baseline: float | None = None  # acceptance of the first healthy window

    @property
    def costly(self) -> bool:
        mean = self.stats.mean_acceptance_length
        return mean is not None and mean < COSTLY_MEAN_LENGTH and self.status != IDLE

    def as_dict(self) -> dict:
        return {**self.stats.as_dict(), "status": self.status, "alerts": self.alerts,
                "baseline_acceptance": self.baseline, "speculation_costs": self.costly}


def _span(stats: ModelStats) -> str:
    if stats.seconds is None:
        return "since start"
    return f"over {stats.seconds:.0f} s" if stats.seconds >= 1 else f"over {stats.seconds:.2f} s"


def _numbers(stats: ModelStats) -> str:
    c = stats.counts
    mean = stats.mean_acceptance_length
    return (f"{c.accepted:,.0f}/{c.draft_tokens:,.0f} draft tokens, {c.drafts:,.0f} drafts, "
            f"mean len {mean:.2f}" if mean is not None else "no drafts")


class Judge:
    """Alerts per model: acceptance below the threshold, or a relative drop against the
    model's first healthy window (kept across engine restarts: a restart that changes
    acceptance, as the allocator did in seed 001, is what it is there to catch)."""

    def __init__(self, thresholds: Thresholds) -> None:
        self.t = thresholds
        self.baseline: dict[str, float] = {}

    def judge(self, stats: ModelStats, *, learn: bool = True) -> Verdict:
        acc = stats.acceptance
        if acc is None or stats.counts.draft_tokens < self.t.min_draft_tokens:
            return Verdict(stats, IDLE, baseline=self.baseline.get(stats.model))
        reasons: list[str] = []
        base = self.baseline.get(stats.model)
        if acc < self.t.min_acceptance:
            reasons.append(f"below {percent(self.t.min_acceptance)}: the drafter drafts noise")
            mean = stats.mean_acceptance_length
            if mean is not None and mean < COSTLY_MEAN_LENGTH:
                gen = stats.generation_tokens_per_s
                reasons.append("speculation is costing you" + (f" ({gen:.1f} tok/s generated)" if gen else ""))
        elif base is None and learn:
            self.baseline[stats.model] = base = acc
        if not reasons and base is not None and acc < base * (1 - self.t.max_drop):
            reasons.append(f"down {percent(1 - acc / base)} from {percent(base)} in the first healthy window "
                           f"(limit {percent(self.t.max_drop)})")
        alerts = [f"ALERT {stats.model}: acceptance {percent(acc)} {_span(stats)} ({_numbers(stats)}), "
                  + "; ".join(reasons)] if reasons else []
        return Verdict(stats, ALERT if alerts else OK, alerts, base)
