"""Read a guarded tensor back after the load and turn what it holds into findings.

Scans run in chunks of at most ``CHUNK_ELEMENTS`` elements along dim 0, so the
scratch memory is bounded (a few bool masks of one chunk, plus int64 byte
offsets for a partly-tracked chunk) whatever the tensor's size. The common
case reads nothing at all (integer tensor fully covered by recorded writes) or
runs one streaming reduction per float tensor (``sum``: a finite sum proves no
poison and no NaN/Inf remains; a byte ``max`` for fp8; ``aminmax`` for a scale,
which also proves its magnitudes plausible). Per-element detail (masks, rows,
experts) is computed only for a tensor that fails that reduction.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch

from specguard.guard import poison as P
from specguard.guard.report import (
    IMPLAUSIBLE_SCALE,
    NEVER_WRITTEN,
    NON_FINITE,
    PARTLY_WRITTEN,
    GuardFinding,
    ranges_from_flags,
)
from specguard.guard.tracking import StorageKey, StorageWrites, covered, fully_covered, view_runs

CHUNK_ELEMENTS = 1 << 20
MARKER_WORD = int.from_bytes(b"\xa5" * 8, "little", signed=True)  # 8 marker bytes


@dataclass
class Entry:
    """A tensor the guard poisoned on entry."""

    name: str
    tensor: torch.Tensor
    poison: P.Poison
    key: StorageKey
    is_scale: bool


@dataclass(frozen=True)
class ScaleBounds:
    """Nonzero per-tensor scale magnitudes outside [low, high] are implausible
    (the seed's torch.empty residue: ~1e-43 denormals, ~1e31)."""

    low: float = 1e-30
    high: float = 1e20


class _Mask:
    """Accumulates one kind of affected-element mask over chunks."""

    def __init__(self, t: torch.Tensor) -> None:
        self.shape: tuple[int, ...] = tuple(t.shape)
        self.dtype = str(t.dtype).removeprefix("torch.")
        self.count = 0
        self._dims: list[torch.Tensor] | None = None  # made on the first hit only

    @property
    def dims(self) -> list[torch.Tensor]:
        if self._dims is None:
            self._dims = [torch.zeros(s, dtype=torch.bool) for s in self.shape]
        return self._dims

    def add(self, start: int, m: torch.Tensor) -> None:
        n = int(m.count_nonzero().item())  # (bool .sum() widens to int64: slow)
        if n == 0:
            return
        self.count += n
        if not self.shape:
            return
        for d in range(len(self.shape)):
            others = tuple(i for i in range(m.ndim) if i != d)
            flags = (m.any(dim=others) if others else m).cpu()
            if d == 0:
                self.dims[0][start:start + flags.numel()] |= flags
            else:
                self.dims[d] |= flags

    def finding(self, e: Entry, problem: str, total: int, detail: str = "") -> GuardFinding:
        where = tuple(ranges_from_flags(d.tolist()) for d in self.dims)
        return GuardFinding(
            name=e.name, problem=problem, dtype=self.dtype,
            shape=self.shape, count=self.count, total=total, where=where, detail=detail,
        )


def _chunks(t: torch.Tensor) -> Iterator[tuple[int, torch.Tensor]]:
    if t.ndim == 0:
        yield 0, t.reshape(1)
        return
    per_row = max(1, t[0].numel()) if t.shape[0] else 1
    step = max(1, CHUNK_ELEMENTS // per_row)
    for a in range(0, t.shape[0], step):
        yield a, t.narrow(0, a, min(step, t.shape[0] - a))


def _element_offsets(c: torch.Tensor) -> np.ndarray:
    """Storage byte offset of every element of the view ``c`` (chunk-sized)."""
    isz = c.element_size()
    off = np.full((1,) * c.ndim, c.storage_offset() * isz, dtype=np.int64)
    for d, (sz, st) in enumerate(zip(c.shape, c.stride(), strict=True)):
        shape = [1] * c.ndim
        shape[d] = sz
        off = off + (np.arange(sz, dtype=np.int64) * (st * isz)).reshape(shape)
    return np.broadcast_to(off, tuple(c.shape))


def _fix_scalar(m: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    return m.reshape(()) if t.ndim == 0 else m


def _unwritten_finding(e: Entry, mask: _Mask, total: int, detail: str = "") -> list[GuardFinding]:
    if mask.count == 0:
        return []
    problem = NEVER_WRITTEN if mask.count == total else PARTLY_WRITTEN
    return [mask.finding(e, problem, total, detail or f"still holds poison {e.poison.label}")]


def plausible_scale_fast(t: torch.Tensor, bounds: ScaleBounds) -> bool:
    """True proves every element of a scale tensor finite (so no poison left)
    and inside [low, high]: one ``aminmax`` pass (NaN propagates to both
    extremes and fails the comparison). False means: look closer (zeros, which
    are plausible, also land here)."""
    if t.dtype not in P.MAGNITUDE_CHECKED or t.numel() == 0:
        return False
    lo, hi = torch.aminmax(t.reshape(-1) if t.ndim == 0 else t)
    return bool(((lo >= bounds.low) & (hi <= bounds.high)).item())


def check_nan_poisoned(e: Entry, t: torch.Tensor, bounds: ScaleBounds) -> list[GuardFinding]:
    """Float tensor: poison bits = never written; other NaN/Inf = written non-finite."""
    if e.is_scale and plausible_scale_fast(t, bounds):
        return []
    total = t.numel()
    unwritten, nonfinite = _Mask(t), _Mask(t)
    if not P.all_finite_fast(t):
        for a, c in _chunks(t):
            pois = P.is_poison(c, e.poison)
            unwritten.add(a, _fix_scalar(pois, t))
            nonfinite.add(a, _fix_scalar(P.non_finite(c) & ~pois, t))
    out = _unwritten_finding(e, unwritten, total)
    if nonfinite.count:
        out.append(nonfinite.finding(e, NON_FINITE, total, "NaN/Inf written by the load"))
    if e.is_scale and t.dtype in P.MAGNITUDE_CHECKED:
        out += check_scale(e, t, bounds)
    return out


def check_scale(e: Entry, t: torch.Tensor, bounds: ScaleBounds) -> list[GuardFinding]:
    mask = _Mask(t)
    lo, hi = float("inf"), 0.0
    for a, c in _chunks(t):
        v = c.float()
        mag = v.abs()
        bad = torch.isfinite(v) & ((v < 0) | ((mag < bounds.low) & (mag != 0)) | (mag > bounds.high))
        if bool(bad.any()):
            sel = mag[bad]
            lo, hi = min(lo, float(sel.min())), max(hi, float(sel.max()))
            mask.add(a, _fix_scalar(bad, t))
    if not mask.count:
        return []
    detail = f"|x| {lo:.1e}..{hi:.1e} outside [{bounds.low:.0e}, {bounds.high:.0e}] or negative"
    return [mask.finding(e, IMPLAUSIBLE_SCALE, t.numel(), detail)]


def check_tracked(
    e: Entry, t: torch.Tensor, writes: StorageWrites | None, marker: bool = True
) -> list[GuardFinding]:
    """Integer-like tensor: recorded writes first; the 0xA5 marker only where
    nothing was recorded (an untracked write shows as a changed byte). Without
    the marker, whatever no recorded write covered counts as unwritten."""
    starts, ends = writes.intervals() if writes is not None else (np.empty(0), np.empty(0))
    runs = view_runs(t)
    if runs is not None and fully_covered(starts, ends, runs):
        return []
    total = t.numel()
    unwritten = _Mask(t)
    if not marker:
        blind = writes.untracked_writes if writes is not None else 0
        detail = "no recorded write" + (
            f"; {blind} write(s) into its storage could not be located" if blind else "")
        for a, c in _chunks(t):
            if starts.size == 0:
                unwritten.add(a, _fix_scalar(torch.ones_like(c, dtype=torch.bool), t))
            else:
                cov = torch.from_numpy(covered(starts, ends, _element_offsets(c))).to(c.device)
                unwritten.add(a, _fix_scalar(~cov, t))
        return _unwritten_finding(e, unwritten, total, detail)
    for a, c in _chunks(t):
        if starts.size == 0:  # nothing recorded here: the marker decides, per row
            rows = _rows_all_marker(c, e.poison)
            if bool(rows.any()):
                unwritten.add(a, _fix_scalar(rows.unsqueeze(-1).expand(c.shape), t))
            continue
        eq = P.is_poison(c, e.poison)
        cov = torch.from_numpy(covered(starts, ends, _element_offsets(c))).to(c.device)
        # A row with a changed, unrecorded byte was written by a path the
        # recorder cannot see: trust the whole row rather than guess per byte.
        stray = (~cov & ~eq).any(dim=-1, keepdim=True)
        unwritten.add(a, _fix_scalar(~cov & eq & ~stray, t))
    return _unwritten_finding(e, unwritten, total)


def _rows_all_marker(c: torch.Tensor, p: P.Poison) -> torch.Tensor:
    """Bool per row (last dim) of ``c``: every byte still the marker. Compares
    8-byte words where the layout allows it (8x fewer elements)."""
    row_bytes = c.shape[-1] * c.element_size()
    if c.is_contiguous() and row_bytes % 8 == 0 and (c.data_ptr() % 8) == 0:
        words = c.view(torch.uint8).view(torch.int64)
        return (words == MARKER_WORD).all(dim=-1)
    return P.is_poison(c, p).all(dim=-1)


def check_replaced(e: Entry, t: torch.Tensor, bounds: ScaleBounds) -> list[GuardFinding]:
    """The load swapped in new storage (``param.data = x``, ``assign=True``):
    it was written; only its values can still be wrong."""
    poison = P.poison_for(t.dtype)
    if poison is None or poison.strategy is not P.Strategy.NAN:
        return []
    if e.is_scale and plausible_scale_fast(t, bounds):
        return []
    out: list[GuardFinding] = []
    mask = _Mask(t)
    if not P.all_finite_fast(t):
        for a, c in _chunks(t):
            mask.add(a, _fix_scalar(P.non_finite(c), t))
    if mask.count:
        out.append(mask.finding(e, NON_FINITE, t.numel(), "NaN/Inf in replaced storage"))
    if e.is_scale and t.dtype in P.MAGNITUDE_CHECKED:
        out += check_scale(e, t, bounds)
    return out
