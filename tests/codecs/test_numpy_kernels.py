"""The numpy back end's fast kernels write the same bits as its general path and as torch.

The kernels (``codecs._numpy_kernels``) are picked by size and by data: the
one-gather FP4 kernel from ``FUSED_MIN_BYTES`` stored bytes, the scaled FP8
pair table from ``TENSOR_FOLD_MIN_BYTES``, GPTQ's by whether all zero points
are equal and whether the group is even. The test inputs here
take each branch, with chunk sizes small enough that the last chunk is partial.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from specguard import codecs as C
from specguard.codecs import _core
from specguard.codecs import torch_backend as T
from specguard.formats.scheme import (
    COMPRESSED_TENSORS,
    DEEPSEEK,
    FP8_TENSOR,
    GPT_OSS,
    GPTQ,
    INT4_GROUP,
    MODELOPT,
    MXFP4,
    MXFP8,
    NVFP4,
)
from tests.codecs.cases import CASES, case_id, dequant_opts, weights

FAST = [c for c in CASES if c[0] in (NVFP4, MXFP4, MXFP8, FP8_TENSOR)]


def _torch(q: dict[str, np.ndarray]) -> dict[str, torch.Tensor]:
    """numpy arrays (ml_dtypes float8 included) -> torch tensors of the same bytes."""
    out = {}
    for k, v in q.items():
        name = str(v.dtype)
        if name in ("float8_e4m3fn", "float8_e8m0fnu"):
            out[k] = torch.from_numpy(v.view(np.uint8).copy()).view(getattr(torch, name))
        else:
            out[k] = torch.from_numpy(np.array(v))
    return out


def _general(monkeypatch: pytest.MonkeyPatch, fmt: str, q: dict, conv: str, **kw) -> np.ndarray:
    """The numpy result without the byte-scale kernels (decode, then broadcast multiply)."""
    with monkeypatch.context() as m:
        m.setattr(_core, "_byte_scale_kernel", lambda *a: None)
        return C.dequantize(fmt, q, convention=conv, **kw)


@pytest.mark.parametrize("case", FAST, ids=case_id)
def test_fast_kernels_match_general_path_and_torch(case, monkeypatch) -> None:
    fmt, conv, opts, shape = case
    q = C.quantize(fmt, weights(shape), convention=conv, **opts)
    kw = dequant_opts(opts)
    general = _general(monkeypatch, fmt, q, conv, **kw)
    monkeypatch.setattr(_core, "FUSED_MIN_BYTES", 0)  # the FP4 kernel at test sizes too
    monkeypatch.setattr(_core, "TENSOR_FOLD_MIN_BYTES", 0)  # and the scaled FP8 pair table
    monkeypatch.setattr(_core, "FUSED_CHUNK_BYTES", 4 * shape[-1] * 5)  # 5 rows: a partial chunk
    monkeypatch.setattr(_core, "CHUNK_BYTES", 4 * shape[-1] * 7)
    fast = C.dequantize(fmt, q, convention=conv, **kw)
    assert fast.tobytes() == general.tobytes()
    ref = T.dequantize(fmt, _torch(q), convention=conv, **kw)
    assert fast.tobytes() == ref.numpy().tobytes()


@pytest.mark.parametrize("fmt,conv,scale", [(MXFP4, DEEPSEEK, "scale"), (MXFP4, GPT_OSS, "scales"),
                                            (NVFP4, COMPRESSED_TENSORS, "weight_scale"),
                                            (MXFP8, COMPRESSED_TENSORS, "weight_scale")])
def test_special_scale_bytes_at_full_size(fmt, conv, scale, monkeypatch) -> None:
    """Above FUSED_MIN_BYTES with the default chunks; every scale byte value occurs,
    E8M0 NaN (0xFF), 2**127 (overflow to inf) and E4M3 NaN (0x7F) included."""
    shape = (4, 256, 256) if conv == GPT_OSS else (1024, 256)
    q = C.quantize(fmt, weights(shape), convention=conv)
    s = q[scale].copy()
    flat = s.view(np.uint8).reshape(-1)
    flat[: 256 * 3] = np.tile(np.arange(256, dtype=np.uint8), 3)
    q[scale] = s
    assert q[C.layout(fmt, conv).weight].size >= _core.FUSED_MIN_BYTES or fmt == MXFP8
    fast = C.dequantize(fmt, q, convention=conv)
    assert np.isnan(fast).any() and np.isinf(fast).any() == (fmt != NVFP4)
    assert fast.tobytes() == _general(monkeypatch, fmt, q, conv).tobytes()
    assert fast.tobytes() == T.dequantize(fmt, _torch(q), convention=conv).numpy().tobytes()


@pytest.mark.parametrize("conv", [MODELOPT, COMPRESSED_TENSORS])
def test_fp8_tensor_scaled_pairs_with_every_byte(conv, monkeypatch) -> None:
    """Every E4M3 byte (NaN 0x7F/0xFF, subnormals, -0) in both pair positions."""
    q = C.quantize(FP8_TENSOR, weights((256, 512)), convention=conv)
    w = q["weight"].copy()
    w.view(np.uint8)[:2, :256] = np.arange(256, dtype=np.uint8)
    w.view(np.uint8)[2, 1:257] = np.arange(256, dtype=np.uint8)
    q["weight"] = w
    general = C.dequantize(FP8_TENSOR, q, convention=conv)
    monkeypatch.setattr(_core, "TENSOR_FOLD_MIN_BYTES", 0)
    fast = C.dequantize(FP8_TENSOR, q, convention=conv)
    assert np.isnan(fast).sum() == 6 and fast.tobytes() == general.tobytes()
    # torch casts E4M3 natively: its NaN keeps the mantissa bits (0x7FF00000), the
    # ml_dtypes table's is 0x7FC00000. Same NaNs, every other bit the same.
    ref = T.dequantize(FP8_TENSOR, _torch(q), convention=conv).numpy()
    nan = np.isnan(fast)
    assert (nan == np.isnan(ref)).all() and fast[~nan].tobytes() == ref[~nan].tobytes()


def _gptq(shape: tuple[int, int], group: int, zeros: str, v2: bool) -> dict[str, np.ndarray]:
    q = C.quantize(INT4_GROUP, weights(shape), convention=GPTQ, group_size=group, gptq_v2=v2)
    if zeros == "random":  # asymmetric GPTQ: a zero point per group and output channel
        rng = np.random.default_rng(1)
        q["qzeros"] = rng.integers(-2**31, 2**31, q["qzeros"].shape, dtype=np.int64).astype(np.int32)
    elif zeros == "uniform-other":
        q["qzeros"] = np.full_like(q["qzeros"], 0x33333333)
    return q


@pytest.mark.parametrize("group,shape", [(32, (40, 128)), (3, (16, 24))], ids=["g32", "g3-odd"])
@pytest.mark.parametrize("zeros", ["stored", "uniform-other", "random"])
@pytest.mark.parametrize("v2", [False, True], ids=["v1", "v2"])
def test_gptq_kernel_matches_torch(group, shape, zeros, v2, monkeypatch) -> None:
    q = _gptq(shape, group, zeros, v2)
    monkeypatch.setattr(_core, "CHUNK_BYTES", 4 * shape[1] * 3)  # 3 rows per chunk, last one partial
    ours = C.dequantize(INT4_GROUP, q, convention=GPTQ, gptq_v2=v2)
    ref = T.dequantize(INT4_GROUP, _torch(q), convention=GPTQ, gptq_v2=v2)
    assert ours.tobytes() == ref.numpy().tobytes()


@pytest.mark.parametrize("case", [c for c in CASES if c[3] == (96, 160)], ids=case_id)
def test_strided_weight_view_decodes_like_a_contiguous_one(case) -> None:
    fmt, conv, opts, shape = case
    q = C.quantize(fmt, weights(shape), convention=conv, **opts)
    name = C.layout(fmt, conv).weight
    wide = np.zeros((q[name].shape[0], q[name].shape[1] * 2), q[name].dtype)
    wide[:, ::2] = q[name]
    kw = dequant_opts(opts)
    got = C.dequantize(fmt, dict(q, **{name: wide[:, ::2]}), convention=conv, **kw)
    assert got.tobytes() == C.dequantize(fmt, q, convention=conv, **kw).tobytes()


def test_out_buffer_is_filled_and_returned() -> None:
    q = C.quantize(NVFP4, weights((256, 256)), convention=MODELOPT)
    buf = np.full((256, 256), np.nan, np.float32)
    got = C.dequantize(NVFP4, q, convention=MODELOPT, out=buf)
    assert got is buf
    assert buf.tobytes() == C.dequantize(NVFP4, q, convention=MODELOPT).tobytes()
    with pytest.raises(ValueError, match="C-contiguous float32"):
        C.dequantize(NVFP4, q, convention=MODELOPT, out=np.empty((256, 256), np.float64))
