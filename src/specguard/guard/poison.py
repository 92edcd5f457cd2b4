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

from collections.abc import Iterator
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
# By dtype name, so an older torch without some of them still imports (a
# dtype torch lacks cannot occur in its modules).
_POISONS_BY_NAME: dict[str, Poison] = {
    "float32": _nan(0xFFE5A5A5, 4),
    "float64": _nan(0xFFFA5A5A5A5A5A5A, 8),
    "float16": _nan(0xFE5A, 2),
    "bfloat16": _nan(0xFFE5, 2),
    "complex64": _nan(0xFFE5A5A5FFE5A5A5, 8),
    # E4M3FN has two NaNs, 0x7F and 0xFF; converting a float NaN yields 0x7F,
    # so the poison takes 0xFF. E5M2 NaN: exponent 11111, mantissa != 0.
    "float8_e4m3fn": _nan(0xFF, 1),
    "float8_e5m2": _nan(0xFF, 1),
    "float8_e4m3fnuz": _nan(0x80, 1),  # FNUZ: the only NaN is 0x80
    "float8_e5m2fnuz": _nan(0x80, 1),
    "float8_e8m0fnu": _nan(0xFF, 1),  # E8M0: 0xFF is NaN, no zero, no Inf
    "uint8": _track(1),
    "int8": _track(1),
    "bool": _track(1),
    "float4_e2m1fn_x2": _track(1),  # packed FP4: no NaN in E2M1
    "int16": _track(2),
    "uint16": _track(2),
    "int32": _track(4),
    "uint32": _track(4),
    "int64": _track(8),
    "uint64": _track(8),
}
POISONS: dict[torch.dtype, Poison] = {
    getattr(torch, n): p for n, p in _POISONS_BY_NAME.items() if hasattr(torch, n)
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


# A byte b of a 1-byte float is NaN/Inf iff (b & mask) == code.
NON_FINITE_BITS: dict[torch.dtype, tuple[int, int]] = {
    getattr(torch, n): bits_
    for n, bits_ in {
        "float8_e4m3fn": (0x7F, 0x7F),  # 0x7F, 0xFF
        "float8_e5m2": (0x7C, 0x7C),  # exponent 11111
        "float8_e4m3fnuz": (0xFF, 0x80),
        "float8_e5m2fnuz": (0xFF, 0x80),
        "float8_e8m0fnu": (0xFF, 0xFF),
    }.items()
    if hasattr(torch, n)
}


def non_finite(t: torch.Tensor) -> torch.Tensor:
    """Bool mask of NaN/Inf elements for every float dtype, fp8 included."""
    if t.dtype in NATIVE_FLOAT:
        return ~torch.isfinite(t)
    bits_ = NON_FINITE_BITS.get(t.dtype)
    if bits_ is None:
        raise TypeError(f"no finiteness test for {t.dtype}")
    mask, code = bits_
    b = t.view(torch.uint8)
    return (b == code) if mask == 0xFF else ((b & mask) == code)


def all_finite_fast(t: torch.Tensor, chunk_bytes: int | None = 1 << 22) -> bool:
    """True proves every element finite (and hence no poison left): one
    streaming reduction in the common case, no tensor-sized temporary.

    Native floats: ``sum`` (a NaN/Inf anywhere makes it non-finite); a float16
    sum can overflow, so a non-finite sum is re-tested with ``aminmax`` (NaN
    and Inf show in the extremes) before answering False.

    1-byte floats, where a byte b is NaN/Inf iff ``b & mask == code``: with
    mask 0xFF that is the single value ``code``, an extreme of one integer view
    (0xFF: ``max`` of the u8 view; 0x80: ``min`` of the i8 view). With mask ==
    code (E4M3FN 0x7F, E5M2 0x7C) it means ``(b & 0x7F) >= code``: positive
    bytes show it in ``max(i8)``, negative ones in ``max(u8) >= 0x80 | code``.
    ``max(u8) < code`` alone settles all-positive data (scales); a piece with
    negative values (FP8 weights) takes the second max while still in cache.
    Off the CPU (or with ``chunk_bytes=None``) both maxima run over the whole
    tensor and are combined on the device: one synchronisation.
    """
    if t.numel() == 0:
        return True
    if t.dtype in NATIVE_FLOAT:
        if bool(torch.isfinite(t.sum()).item()):
            return True
        if t.is_complex():
            return False
        lo, hi = torch.aminmax(t)
        return bool((torch.isfinite(lo) & torch.isfinite(hi)).item())
    mask, code = NON_FINITE_BITS[t.dtype]
    u8 = t.view(torch.uint8)
    if mask == 0xFF:
        if code == 0xFF:
            return int(torch.amax(u8).item()) < code
        return int(torch.amin(u8.view(torch.int8)).item()) > code - 256  # 0x80 = -128
    if chunk_bytes is None or t.device.type != "cpu":
        hi_u = torch.amax(u8)
        ok = (hi_u < code) | ((hi_u < (0x80 | code)) & (torch.amax(u8.view(torch.int8)) < code))
        return bool(ok.item())
    for part in _byte_parts(u8, chunk_bytes):
        top = int(torch.amax(part).item())
        if top < code:
            continue
        if top >= 0x80 | code or int(torch.amax(part.view(torch.int8)).item()) >= code:
            return False
    return True


def _byte_parts(b: torch.Tensor, chunk_elements: int) -> Iterator[torch.Tensor]:
    """1-D pieces of ``b`` of bounded size; only a strided view's piece is copied."""
    if b.is_contiguous():
        flat = b.reshape(-1)
        for i in range(0, flat.numel(), chunk_elements):
            yield flat[i:i + chunk_elements]
        return
    rows = max(1, chunk_elements // max(1, b[0].numel()))
    for a in range(0, b.shape[0], rows):
        yield b.narrow(0, a, min(rows, b.shape[0] - a)).reshape(-1)
