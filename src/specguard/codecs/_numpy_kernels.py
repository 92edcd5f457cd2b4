"""numpy-only inner passes of the chunked dequantization (one thread, cache-sized chunks).

Every kernel writes each output element with the float32 operations the
general path of ``_core`` uses (an exact decode; GPTQ: an exact subtraction of
the zero point; then one multiply by the block scale), so it writes the same
bits. Where a one-byte scale or a zero-point nibble selects among at most 256
values, those operations are done once per (selector, stored byte) in a table
and the big pass is a single gather: on one core ``np.take`` moves an 8-byte
entry in about 0.6-0.7 ns (256 or 65536 entries alike, index conversion aside),
while a broadcast multiply over 16- or 32-element blocks pays numpy's
inner-loop call once per block (measured on a shared 2-core AMD EPYC VM, numpy 2.4).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache

import numpy as np

from specguard.codecs._tables import E4M3_PAIR64, FP4_PAIR_TABLE, INT4_PAIR_TABLE

# A kernel fills ``out`` rows [n, cols] from stored rows and their scale rows;
# a table kernel has its one scale folded into its table and takes None.
Kernel = Callable[[np.ndarray, np.ndarray, np.ndarray], None]
TableKernel = Callable[[np.ndarray, None, np.ndarray], None]


@cache
def _high_bytes(k: int) -> np.ndarray:
    """[256, k] uint16: selector byte s -> ``s << 8``, k times (one block's index high bytes)."""
    return np.repeat((np.arange(256, dtype=np.uint16) << 8)[:, None], k, axis=1)


def _pairs_times(pairs: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """[256 scales, 256 bytes] -> the byte's two float32 values times the scale, as int64 words.

    The same float32 product as ``values * scale`` element by element. Entries
    for scale bytes a tensor does not use may overflow (E8M0 2**127 * 6): no warning.
    """
    with np.errstate(over="ignore", invalid="ignore"):
        prod = pairs[None, :, :] * scale.astype(np.float32, copy=False)[:, None, None]
    return prod.view(np.int64).reshape(65536)


def _indexed_gather(table: np.ndarray, k: int, rows: int, blocks: int) -> Kernel:
    """Kernel: ``out`` pairs = table[selector << 8 | byte], one selector per k stored bytes.

    The uint16 index is built in two contiguous passes (the selector's high
    bytes gathered k at a time, then OR-ed with the stored bytes) instead of a
    broadcast over k-element blocks.
    """
    high = _high_bytes(k)
    index = np.empty((rows, blocks, k), np.uint16)

    def kernel(stored: np.ndarray, selectors: np.ndarray, out: np.ndarray) -> None:
        n = stored.shape[0]
        idx = index[:n]
        np.take(high, selectors, axis=0, out=idx, mode="wrap")
        np.bitwise_or(idx, stored.view(np.uint8).reshape(n, blocks, k), out=idx)
        np.take(table, idx, out=out.view(np.int64).reshape(n, blocks, k), mode="wrap")

    return kernel


def fp4_byte_scaled(scale_table: np.ndarray, block: int, rows: int, cols: int) -> Kernel:
    """Packed FP4 with one scale byte per ``block`` values (NVFP4 E4M3, MXFP4 E8M0).

    ``scale_table``: float32 [256], scale byte -> effective scale (global scale
    applied). One gather per stored byte yields its two scaled values.
    """
    return _indexed_gather(_pairs_times(FP4_PAIR_TABLE, scale_table), block // 2, rows, cols // block)


def e4m3_byte_scaled(scale_table: np.ndarray, block: int, rows: int, cols: int) -> Kernel:
    """E4M3 elements with one scale byte per ``block`` values (MXFP8), ``block`` even.

    Two bytes per gather (65536 pairs), then the scales expanded by a gather of
    ``block``-wide table rows and one contiguous multiply: cheaper than a
    broadcast multiply over 32-element blocks.
    """
    wide = np.ascontiguousarray(np.repeat(scale_table.astype(np.float32)[:, None], block, axis=1))
    expanded = np.empty((rows, cols // block, block), np.float32)

    def kernel(stored: np.ndarray, scales: np.ndarray, out: np.ndarray) -> None:
        n = stored.shape[0]
        np.take(E4M3_PAIR64, stored.view(np.uint16), out=out.view(np.int64), mode="wrap")
        s = expanded[:n]
        np.take(wide, scales, axis=0, out=s, mode="wrap")
        np.multiply(out, s.reshape(n, cols), out=out)

    return kernel


def e4m3_tensor_scaled(scale: np.ndarray) -> TableKernel:
    """E4M3 elements under one float32 scale (FP8 per tensor): the 65536 pairs
    times the scale once, then one gather per two bytes and no multiply pass."""
    with np.errstate(over="ignore", invalid="ignore"):
        table = (E4M3_PAIR64.view(np.float32) * scale.astype(np.float32)).view(np.int64)

    def kernel(stored: np.ndarray, _scales: None, out: np.ndarray) -> None:
        np.take(table, stored.view(np.uint16), out=out.view(np.int64), mode="wrap")

    return kernel


# ---------------------------------------------------------------------- GPTQ

TILE_PAD = 16  # int32s of padding per tile row: a power-of-two row stride maps a column to one cache set


def gptq_rows(qweight: np.ndarray, zero_codes: np.ndarray, zero_offset: float, scales: np.ndarray,
              group: int, out: np.ndarray, chunk_bytes: int) -> np.ndarray:
    """W[o, i] = ((q[i, o] - 8) - (z[g(i), o] - zero_offset)) * s[g(i), o], groups in column order.

    qweight: int32 [in/8, out]; zero_codes: int [groups, out] nibbles 0..15;
    scales: float32 [groups, out]. Per chunk of output rows: the int32 words are
    transposed through a padded tile (a plain ``.T`` copy walks a 16 KiB stride
    and misses the cache on every word), then one gather per byte writes the two
    exact values ``q - z`` (a 256-entry table when every zero point is equal,
    else a 16 x 256 one indexed by zero << 8 | byte), then one multiply by the scale.
    """
    words_per_row = qweight.shape[0]
    rows, cols = qweight.shape[1], words_per_row * 8
    groups = cols // group
    step = max(1, min(rows, chunk_bytes // (4 * cols)))
    tile = np.empty((words_per_row, step + TILE_PAD), np.int32)
    words = np.empty((step, words_per_row), np.int32)
    zf = np.arange(16, dtype=np.float32) - np.float32(zero_offset)
    diff = INT4_PAIR_TABLE[None, :, :] - zf[:, None, None]  # [zero, byte, 2]: exact small integers
    st = np.ascontiguousarray(scales.T)  # [out, groups]
    z0 = int(zero_codes.flat[0]) if zero_codes.size else 0
    if (zero_codes == z0).all():
        table = diff[z0].view(np.int64).reshape(256)

        def decode(stored: np.ndarray, r0: int, dst: np.ndarray) -> None:
            np.take(table, stored, out=dst.view(np.int64), mode="wrap")
    elif group % 2 == 0:
        zt = np.ascontiguousarray(zero_codes.T).astype(np.uint8)  # [out, groups]
        gather = _indexed_gather(diff.view(np.int64).reshape(16 * 256), group // 2, step, groups)

        def decode(stored: np.ndarray, r0: int, dst: np.ndarray) -> None:
            gather(stored, zt[r0:r0 + stored.shape[0]], dst)
    else:  # odd group: a byte's two nibbles may straddle groups
        zt_f = np.ascontiguousarray(zero_codes.T).astype(np.float32) - np.float32(zero_offset)

        def decode(stored: np.ndarray, r0: int, dst: np.ndarray) -> None:
            np.take(INT4_PAIR_TABLE.view(np.int64).reshape(256), stored, out=dst.view(np.int64),
                    mode="wrap")
            v = dst.reshape(dst.shape[0], groups, group)
            np.subtract(v, zt_f[r0:r0 + dst.shape[0], :, None], out=v)

    for r0 in range(0, rows, step):
        r1 = min(rows, r0 + step)
        n = r1 - r0
        t = tile[:, :n]
        np.copyto(t, qweight[:, r0:r1])
        np.copyto(words[:n], t.T)
        o = out[r0:r1]
        decode(words[:n].view(np.uint8), r0, o)
        v = o.reshape(n, groups, group)
        np.multiply(v, st[r0:r1, :, None], out=v)
    return out
