"""Decide from the bytes whether an 8-bit scale tensor holds E8M0 or E4M3 codes.

The header cannot tell a U8 scale's meaning, and a label can lie. The bytes
can: an E8M0 byte is a whole power of two, so the block scales of one weight
tensor (whose block maxima differ by a factor of a few) take two or three
adjacent byte values; E4M3 spends three bits on the mantissa, so the same
spread covers a dozen or more codes, and ModelOpt's per-tensor scale pins the
largest block at 448 (0x7E). A byte with the sign bit set cannot be an E4M3
scale at all. Measured on the project's codecs over Gaussian weights from
sigma 0.002 to 2 (tests/formats/test_sniff.py): E8M0 spreads 1-2 codes
(1st-99th percentile), up to 4 on trained weights; NVFP4 E4M3 12-13.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # numpy is imported when bytes are sniffed: a header-only inspect never loads it
    import numpy as np

E8M0 = "F8_E8M0"
E4M3 = "F8_E4M3"
SAMPLE_BYTES = 4096  # per tensor: enough for the percentiles, a sliver of the file
_MIDPOINT = 8.0  # byte spread where both readings are equally likely
_SLOPE = 1.0


@dataclass(frozen=True, slots=True)
class Sniff:
    """The likelier byte format, how sure (0.5-1.0), and the evidence in words."""

    dtype: str | None
    confidence: float
    evidence: str
    bytes_read: int


def sniff_scale_bytes(raw: bytes | np.ndarray) -> Sniff:
    """E8M0 or E4M3 for the bytes of one block-scale tensor (or a sample of it)."""
    return sniff_many([raw])[0]


def sniff_many(raws: Sequence[bytes | np.ndarray]) -> list[Sniff]:
    """``sniff_scale_bytes`` of each sample. Everything a sniff reads of a sample is in its
    histogram of byte values (a lint sniffs hundreds of modules: benchmarks/lint_export.py): the
    histograms of samples of one length are counted in one call, and the percentiles read off
    them as ``np.percentile`` computes them (``_percentile_spreads``), no sample sorted."""
    import numpy as np

    codes = [np.frombuffer(r, np.uint8) if isinstance(r, bytes | bytearray) else np.asarray(r).view(np.uint8).ravel()
             for r in raws]
    out: list[Sniff | None] = [None] * len(codes)
    by_size: dict[int, list[int]] = {}
    for i, b in enumerate(codes):
        by_size.setdefault(int(b.size), []).append(i)
    for n, idx in by_size.items():
        if n == 0:
            for i in idx:
                out[i] = Sniff(None, 0.5, "no bytes", 0)
            continue
        # row j's bytes counted at j * 256 + byte: every row's histogram from one bincount
        rows = np.stack([codes[i] for i in idx]).astype(np.intp)
        rows += np.arange(0, len(idx) << 8, 256, dtype=np.intp)[:, None]
        counts = np.bincount(rows.ravel(), minlength=len(idx) << 8).reshape(len(idx), 256)
        signed = counts[:, 0x80:0xFF].sum(axis=1).tolist()  # sign bit set, 0xFF (E8M0's NaN) apart
        distinct = np.count_nonzero(counts, axis=1).tolist()
        top = (255 - np.argmax(counts[:, ::-1] > 0, axis=1)).tolist()
        spreads = _percentile_spreads(counts, n).tolist()
        for i, sign, d, t, spread in zip(idx, signed, distinct, top, spreads, strict=True):
            out[i] = _decide(n, sign, d, t, float(spread))
    return [x for x in out if x is not None]


def _percentile_spreads(counts: np.ndarray, n: int) -> np.ndarray:
    """``np.diff(np.percentile(rows, [1, 99], axis=1), axis=0)[0]`` from the rows' histograms
    (``counts``: one row of 256 per sample of ``n`` bytes), with numpy's own arithmetic
    (numpy/lib/_function_base_impl.py ``_quantile``, method "linear": the virtual index, its
    neighbours, gamma and ``_lerp``), so the figures are the same to the last bit."""
    import numpy as np

    virtual = (n - 1) * np.true_divide(np.asarray([1, 99]), 100)
    previous = np.floor(virtual)
    following = previous + 1
    above = virtual >= n - 1  # numpy takes the last value (index -1)
    previous[above], following[above] = -1, -1
    below = virtual < 0
    previous[below], following[below] = 0, 0
    previous_i, following_i = previous.astype(np.intp), following.astype(np.intp)
    gamma = np.asanyarray(virtual - previous_i, dtype=virtual.dtype).reshape(2, 1)
    cum = counts.cumsum(axis=1)

    def order_statistic(at: np.ndarray) -> np.ndarray:  # the value at each sorted position, by row
        at = np.where(at < 0, n + at, at)
        return (cum[None, :, :] <= at[:, None, None]).sum(axis=2).astype(np.uint8)

    a, b = order_statistic(previous_i), order_statistic(following_i)  # (2, rows), as numpy gathers them
    diff_b_a = b - a
    lerp = np.add(a, diff_b_a * gamma)
    np.subtract(b, diff_b_a * (1 - gamma), out=lerp, where=gamma >= 0.5, casting="unsafe", dtype=type(lerp.dtype))
    return np.diff(lerp, axis=0)[0]


def _decide(n: int, signed: int, distinct: int, top: int, spread: float) -> Sniff:
    if signed:
        return Sniff(E8M0, 0.99, f"{signed} of {n} bytes have the sign bit set: negative as E4M3 scales", n)
    p_e8m0 = 1.0 / (1.0 + math.exp((spread - _MIDPOINT) / _SLOPE))
    words = f"{distinct} distinct codes, 1st-99th percentile spread {spread:.0f} codes, max 0x{top:02X}"
    if p_e8m0 >= 0.5:
        return Sniff(E8M0, round(p_e8m0, 3), words + " (powers of two)", n)
    return Sniff(E4M3, round(1.0 - p_e8m0, 3), words + " (mantissa in use)", n)
