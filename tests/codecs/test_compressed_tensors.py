"""Bit-for-bit agreement with compressed-tensors' own compressors (test-only dependency).

Scales are computed the way llm-compressor's observers do (min/max per group
through ``calculate_qparams``, ``generate_gparam`` for the NVFP4 global scale),
then compressed-tensors compresses; specguard must produce the same bytes from
the same float32 weights, and decompress to the same values.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import torch

from specguard import codecs as C
from specguard.formats.scheme import COMPRESSED_TENSORS, FP8_BLOCK, INT4_GROUP, MXFP4, MXFP8, NVFP4
from tests.codecs.cases import weights

ct = pytest.importorskip("compressed_tensors")
from compressed_tensors.quantization import preset_name_to_scheme  # noqa: E402
from compressed_tensors.quantization.utils import calculate_qparams, generate_gparam  # noqa: E402


@pytest.fixture(autouse=True, scope="module")
def _eager_fp4_cast():
    # compressed-tensors wraps its FP4 rounding in torch.compile; eager gives the same
    # values without a ~30 s compile on CI.
    import torch._dynamo

    old = torch._dynamo.config.disable
    torch._dynamo.config.disable = True
    yield
    torch._dynamo.config.disable = old


def _u8(t: torch.Tensor) -> np.ndarray:
    return t.contiguous().view(torch.uint8).numpy() if t.element_size() == 1 else t.numpy()


def _np_u8(a: np.ndarray) -> np.ndarray:
    return a.view(np.uint8) if a.dtype.itemsize == 1 else a


def _group_qparams(w: torch.Tensor, group: int, args, **kw):
    g = w.reshape(w.shape[0], -1, group)
    return calculate_qparams(g.amin(-1), g.amax(-1), args, **kw)


def _assert_same(theirs: dict, ours: dict) -> None:
    assert set(theirs) == set(ours)
    for k in theirs:
        np.testing.assert_array_equal(_u8(theirs[k]), _np_u8(np.asarray(ours[k])), err_msg=k)


def _bf16(a: np.ndarray) -> np.ndarray:
    return a.astype(ml_dtypes.bfloat16).astype(np.float32)


def test_nvfp4_pack_quantized() -> None:
    from compressed_tensors.compressors.nvfp4.base import NVFP4PackedCompressor

    w = weights((128, 256), seed=11)
    tw = torch.from_numpy(w)
    scheme = preset_name_to_scheme("NVFP4", ["Linear"])
    gs = generate_gparam(tw.min(), tw.max())
    scale, _ = _group_qparams(tw, 16, scheme.weights, global_scale=gs)
    theirs = NVFP4PackedCompressor.compress(
        {"weight": tw, "weight_scale": scale, "weight_global_scale": gs}, scheme)
    ours = C.quantize(NVFP4, w, convention=COMPRESSED_TENSORS)
    _assert_same(theirs, ours)
    back = NVFP4PackedCompressor.decompress(dict(theirs), scheme)["weight"]
    np.testing.assert_array_equal(
        back.float().numpy(), _bf16(C.dequantize(NVFP4, ours, convention=COMPRESSED_TENSORS)))


@pytest.mark.parametrize("preset,fmt", [("MXFP4", MXFP4), ("MXFP8", MXFP8)])
def test_mx_formats(preset: str, fmt: str) -> None:
    from compressed_tensors.compressors.mxfp4.base import MXFP4PackedCompressor
    from compressed_tensors.compressors.mxfp8.base import MXFP8QuantizationCompressor

    compressor = MXFP4PackedCompressor if fmt == MXFP4 else MXFP8QuantizationCompressor
    w = weights((128, 256), seed=12)
    tw = torch.from_numpy(w)
    scheme = preset_name_to_scheme(preset, ["Linear"])
    scale, _ = _group_qparams(tw, 32, scheme.weights)
    theirs = compressor.compress({"weight": tw, "weight_scale": scale}, scheme)
    ours = C.quantize(fmt, w, convention=COMPRESSED_TENSORS)
    _assert_same(theirs, ours)
    back = compressor.decompress(dict(theirs), scheme)["weight"]
    np.testing.assert_array_equal(
        back.float().numpy(), _bf16(C.dequantize(fmt, ours, convention=COMPRESSED_TENSORS)))


def test_fp8_block() -> None:
    from compressed_tensors.compressors.naive_quantized.base import NaiveQuantizationCompressor

    w = weights((256, 384), seed=13)
    tw = torch.from_numpy(w)
    scheme = preset_name_to_scheme("FP8_BLOCK", ["Linear"])
    blocks = tw.reshape(2, 128, 3, 128).transpose(1, 2)
    scale, _ = calculate_qparams(blocks.amin((-1, -2)), blocks.amax((-1, -2)), scheme.weights)
    theirs = NaiveQuantizationCompressor.compress({"weight": tw, "weight_scale": scale}, scheme)
    ours = C.quantize(FP8_BLOCK, w, convention=COMPRESSED_TENSORS)
    _assert_same(theirs, ours)


def test_int4_pack_quantized() -> None:
    from compressed_tensors.compressors.pack_quantized.base import PackedQuantizationCompressor

    w = weights((128, 384), seed=14)
    tw = torch.from_numpy(w)
    scheme = preset_name_to_scheme("W4A16", ["Linear"])
    scale, zp = _group_qparams(tw, 128, scheme.weights)
    theirs = PackedQuantizationCompressor.compress(
        {"weight": tw, "weight_scale": scale, "weight_zero_point": zp}, scheme)
    ours = C.quantize(INT4_GROUP, w, convention=COMPRESSED_TENSORS, scale_dtype="F32")
    _assert_same(theirs, ours)
    back = PackedQuantizationCompressor.decompress(dict(theirs), scheme)["weight"]
    np.testing.assert_array_equal(
        back.numpy(), C.dequantize(INT4_GROUP, ours, convention=COMPRESSED_TENSORS))
