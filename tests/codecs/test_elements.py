"""Element types against outside ground truth: ml_dtypes' and torch's own dtypes."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import torch

from specguard import codecs as C


def _all_f32_probe(n: int = 200_000, seed: int = 0) -> np.ndarray:
    """Random float32 bit patterns across the whole exponent range, plus specials."""
    rng = np.random.default_rng(seed)
    bits = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    x = bits.view(np.float32)
    x = x[np.isfinite(x)]
    return np.concatenate([x, np.float32([0.0, -0.0, 448.0, 464.0, -480.0, 2**-9, 2**-10])])


def test_e2m1_table_matches_ml_dtypes() -> None:
    codes = np.arange(16, dtype=np.uint8)
    want = codes.view(ml_dtypes.float4_e2m1fn).astype(np.float32)
    np.testing.assert_array_equal(C.E2M1_VALUES, want)
    assert np.array_equal(np.signbit(C.E2M1_VALUES), np.signbit(want))


def test_e2m1_rounding_matches_ml_dtypes_including_ties() -> None:
    ties = np.float32([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0])
    grid = np.arange(-8, 8, 1 / 64, dtype=np.float32)
    rng = np.random.default_rng(1)
    x = np.concatenate([ties, -ties, grid, rng.normal(0, 3, 10_000).astype(np.float32),
                        np.float32([6.0, 6.5, 100.0, -1e9, 1e-30, -1e-30])])
    # ml_dtypes rounds to nearest-even but does not saturate; clip as every encoder does.
    want = np.clip(x, -6, 6).astype(ml_dtypes.float4_e2m1fn).view(np.uint8)
    np.testing.assert_array_equal(C.e2m1_codes(x), want)


def test_fp4_nibble_order_low_first() -> None:
    # [0.5, -6] -> codes 1, 15 -> byte 0xF1 (even element in the low nibble).
    assert C.pack_fp4(C.e2m1_codes(np.float32([[0.5, -6.0]])))[0, 0] == 0xF1
    codes = np.random.default_rng(2).integers(0, 16, (7, 64), dtype=np.uint8)
    np.testing.assert_array_equal(C.unpack_fp4(C.pack_fp4(codes)), codes)
    np.testing.assert_array_equal(C.fp4_to_float(C.pack_fp4(codes)), C.E2M1_VALUES[codes])


def test_fp4_nibble_order_matches_compressed_tensors() -> None:
    pytest.importorskip("compressed_tensors")
    from compressed_tensors.compressors.nvfp4.helpers import pack_fp4_to_uint8

    rng = np.random.default_rng(3)
    values = C.E2M1_VALUES[rng.integers(0, 16, (16, 32))]
    theirs = pack_fp4_to_uint8(torch.from_numpy(values)).numpy()
    np.testing.assert_array_equal(C.pack_fp4(C.e2m1_codes(values)), theirs)


def test_fp4_nibble_order_matches_torch_float4_where_supported() -> None:
    packed = np.arange(256, dtype=np.uint8)
    t = torch.from_numpy(packed).view(torch.float4_e2m1fn_x2)
    try:
        values = t.to(torch.float32)
    except (NotImplementedError, RuntimeError):
        pytest.skip("this torch build cannot convert float4_e2m1fn_x2 to float32")
    np.testing.assert_array_equal(C.fp4_to_float(packed), values.reshape(-1).numpy())


def test_e8m0_table_matches_ml_dtypes_and_torch() -> None:
    codes = np.arange(256, dtype=np.uint8)
    ours = C.e8m0_to_float(codes)
    ml = codes.view(ml_dtypes.float8_e8m0fnu).astype(np.float32)
    th = torch.from_numpy(codes).view(torch.float8_e8m0fnu).to(torch.float32).numpy()
    np.testing.assert_array_equal(ours, ml)
    np.testing.assert_array_equal(ours, th)
    assert np.isnan(ours[0xFF]) and ours[127] == 1.0 and ours[0] == 2.0**-127


def test_float_to_e8m0_ceil_and_floor() -> None:
    x = np.float32([1.0, 1.5, 0.75, 2.0**-127, 2.0**-126, 8e-39, 2.0**127, np.nan, 0.0])
    ceil = C.float_to_e8m0(x, "ceil")
    floor = C.float_to_e8m0(x, "floor")
    assert list(ceil[:7]) == [127, 128, 127, 0, 1, 1, 254]
    assert list(floor[:7]) == [127, 127, 126, 0, 1, 0, 254]
    assert ceil[7] == 0xFF and ceil[8] == 0
    # Against math on normal values: ceil gives the smallest power of two >= x.
    v = np.random.default_rng(4).lognormal(0, 20, 10_000).astype(np.float32)
    v = v[(v > 2.0**-126) & (v < 2.0**126)]
    p = C.e8m0_to_float(C.float_to_e8m0(v, "ceil"))
    assert np.all(p >= v) and np.all(p / 2 < v)


def test_e4m3_table_matches_ml_dtypes_and_torch() -> None:
    codes = np.arange(256, dtype=np.uint8)
    ours = C.e4m3_to_float(codes)
    th = torch.from_numpy(codes).view(torch.float8_e4m3fn).to(torch.float32).numpy()
    np.testing.assert_array_equal(ours, th)
    assert np.isnan(ours[0x7F]) and np.isnan(ours[0xFF]) and ours[0x7E] == 448.0


def test_cast_e4m3_saturates_and_matches_torch() -> None:
    x = _all_f32_probe()
    ours = C.cast_e4m3(x).view(np.uint8)
    th = torch.from_numpy(np.clip(x, -448, 448)).to(torch.float8_e4m3fn).view(torch.uint8)
    np.testing.assert_array_equal(ours, th.numpy())
    assert C.cast_e4m3(np.float32([1e9, -1e9, 449.0])).astype(np.float32).tolist() == [
        448.0, -448.0, 448.0]


def test_whole_byte_dtypes_are_those_numpy_reads() -> None:
    """The scale sampler's pick (formats/table.py) reads only dtypes with a numpy element type, and
    each one's width is the bit width the header pass uses."""
    from specguard.checkpoint import dtypes

    assert set(dtypes.NUMPY) == dtypes.WHOLE_BYTES
    assert all(dtypes.NUMPY[d].itemsize * 8 == dtypes.BITS[d] for d in dtypes.WHOLE_BYTES)
