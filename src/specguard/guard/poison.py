"""Per-dtype poison patterns and the bit-level tests that read them back.

Two strategies, chosen per dtype:

* ``NAN``: the dtype has NaN encodings. The guard fills the tensor with one
  specific NaN bit pattern (a negative, payload-carrying NaN that no arithmetic
  produces and no checkpoint holds). After the load, an element still holding
  exactly those bits was never written; any other NaN/Inf was *written*
  non-finite. Content alone decides, exactly, per element.
* ``TRACK``: every bit pattern is legal data (integers, bool, packed FP4 bytes).
  The guard fills with a marker byte 0xA5 and additionally records the writes
  (see ``tracking``); the marker only serves writes the recorder cannot see.

Everything works on an integer view of the same element size, so a fill or a
comparison never converts values and never allocates a copy of the tensor.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

import torch


class Strategy(StrEnum):
    NAN = "nan"
    TRACK = "track"


# Integer dtype of each element size: fills and comparisons run on this view.
_BITS: dict[int, torch.dtype] = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def _signed(value: int, itemsize: int) -> int:
    """Two's-complement reading of ``value`` for a signed view of ``itemsize`` bytes."""
    if itemsize == 1:
        return value  # uint8 view
    bits = 8 * itemsize
    return value - (1 << bits) if value >= 1 << (bits - 1) else value


@dataclass(frozen=True)
class Poison:
    strategy: Strategy
    bits_dtype: torch.dtype
    value: int  # the pattern as a value of ``bits_dtype``

    @property
    def label(self) -> str:
        size = torch.empty((), dtype=self.bits_dtype).element_size()
        return f"0x{self.value & ((1 << (8 * size)) - 1):0{2 * size}X}"


def _nan(pattern: int, itemsize: int) -> Poison:
    return Poison(Strategy.NAN, _BITS[itemsize], _signed(pattern, itemsize))


def _track(itemsize: int) -> Poison:
    return Poison(Strategy.TRACK, _BITS[itemsize], _signed(int("A5" * itemsize, 16), itemsize))


# Negative quiet NaNs with a payload: arithmetic produces the canonical positive
# NaN, so a NaN *written* by a loader (0x7FC00000 etc.) stays distinguishable.
POISONS: dict[torch.dtype, Poison] = {
    torch.float32: _nan(0xFFE5A5A5, 4),
    torch.float64: _nan(0xFFFA5A5A5A5A5A5A, 8),
    torch.float16: _nan(0xFE5A, 2),
    torch.bfloat16: _nan(0xFFE5, 2),
    torch.complex64: _nan(0xFFE5A5A5FFE5A5A5, 8),
    # E4M3FN has two NaNs, 0x7F and 0xFF; converting a float NaN yields 0x7F,
    # so the poison takes 0xFF. E5M2 NaN: exponent 11111, mantissa != 0.
    torch.float8_e4m3fn: _nan(0xFF, 1),
    torch.float8_e5m2: _nan(0xFF, 1),
    torch.float8_e4m3fnuz: _nan(0x80, 1),  # FNUZ: the only NaN is 0x80
    torch.float8_e5m2fnuz: _nan(0x80, 1),
    torch.float8_e8m0fnu: _nan(0xFF, 1),  # E8M0: 0xFF is NaN, no zero, no Inf
    torch.uint8: _track(1),
    torch.int8: _track(1),
    torch.bool: _track(1),
    torch.float4_e2m1fn_x2: _track(1),  # packed FP4: no NaN in E2M1
    torch.int16: _track(2),
    torch.uint16: _track(2),
    torch.int32: _track(4),
    torch.uint32: _track(4),
    torch.int64: _track(8),
    torch.uint64: _track(8),
}

# dtypes whose finiteness torch can test directly (and sum for a fast check).
NATIVE_FLOAT = frozenset(
    {torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.complex64}
)
# Scale dtypes whose magnitude can be implausible. E8M0 is excluded: its
# smallest code 2^-127 is what encoders legitimately write for all-zero blocks;
# E4M3 cannot hold the seed's 1e-43 or 1e31 at all.
MAGNITUDE_CHECKED = frozenset({torch.float16, torch.bfloat16, torch.float32, torch.float64})


def poison_for(dtype: torch.dtype) -> Poison | None:
    """The poison for ``dtype``, or None when the guard cannot handle it."""
    return POISONS.get(dtype)


def bits(t: torch.Tensor, p: Poison) -> torch.Tensor:
    """Integer view of ``t`` with the same element size (no copy)."""
    return t.view(p.bits_dtype)


def fill(t: torch.Tensor, p: Poison) -> None:
    """Write the poison into every element of ``t`` (a view is enough)."""
    bits(t, p).fill_(p.value)


def is_poison(t: torch.Tensor, p: Poison) -> torch.Tensor:
    """Bool mask: element still holds the poison bits."""
    return bits(t, p) == p.value


def non_finite(t: torch.Tensor) -> torch.Tensor:
    """Bool mask of NaN/Inf elements for every float dtype, fp8 included."""
    if t.dtype in NATIVE_FLOAT:
        return ~torch.isfinite(t)
    b = t.view(torch.uint8)
    if t.dtype == torch.float8_e4m3fn:
        return (b & 0x7F) == 0x7F
    if t.dtype == torch.float8_e5m2:
        return (b & 0x7C) == 0x7C
    if t.dtype in (torch.float8_e4m3fnuz, torch.float8_e5m2fnuz):
        return b == 0x80
    if t.dtype == torch.float8_e8m0fnu:
        return b == 0xFF
    raise TypeError(f"no finiteness test for {t.dtype}")


def all_finite_fast(t: torch.Tensor) -> bool:
    """One streaming reduction, no tensor-sized temporary: True proves every
    element finite (and hence no poison left). False means "look closer": a
    large legitimate sum can overflow (float16), or the dtype has no sum."""
    if t.dtype not in NATIVE_FLOAT or t.numel() == 0:
        return t.numel() == 0
    return bool(torch.isfinite(t.sum()).item())
