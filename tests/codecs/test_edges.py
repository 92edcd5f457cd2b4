"""Format edge cases: E8M0 NaN, E4M3 saturation, edge blocks, naming variants, errors."""

from __future__ import annotations

import numpy as np
import pytest

from specguard import codecs as C
from specguard.formats.scheme import (
    COMPRESSED_TENSORS,
    DEEPSEEK,
    FP8_BLOCK,
    GPT_OSS,
    GPTQ,
    INT4_GROUP,
    MODELOPT,
    MXFP4,
    NVFP4,
)
from tests.codecs.cases import weights


def test_e8m0_nan_scale_poisons_its_block_only() -> None:
    w = weights((64, 128))
    q = C.quantize(MXFP4, w, convention=DEEPSEEK)
    q["scale"] = q["scale"].copy()
    q["scale"].view(np.uint8)[5, 2] = 0xFF
    out = C.dequantize(MXFP4, q, convention=DEEPSEEK)
    nan = np.isnan(out)
    assert nan[5, 64:96].all() and nan.sum() == 32


def test_fp8_block_ue8m0_nan_scale() -> None:
    w = weights((256, 256))
    q = C.quantize(FP8_BLOCK, w, convention=DEEPSEEK, scale_name="scale", scale_dtype="U8")
    q["scale"][1, 0] = 0xFF
    out = C.dequantize(FP8_BLOCK, q, convention=DEEPSEEK)
    assert np.isnan(out[128:, :128]).all() and not np.isnan(out[:128]).any()


def test_e4m3_saturates_when_the_stored_scale_rounds_down() -> None:
    # amax / 448 = 1 + 2**-9 rounds to 1.0 in BF16, so amax / scale = 448.875 > 448.
    w = np.zeros((128, 128), np.float32)
    w[0, 0], w[0, 1] = 448 * (1 + 2**-9), -448 * (1 + 2**-9)
    q = C.quantize(FP8_BLOCK, w, convention=COMPRESSED_TENSORS, scale_dtype="BF16")
    vals = q["weight"].astype(np.float32)
    assert not np.isnan(vals).any()
    assert vals[0, 0] == 448.0 and vals[0, 1] == -448.0


def test_edge_blocks_use_the_partial_block_only() -> None:
    w = weights((192, 320))
    w[128:, 256:] *= 1000  # only the corner (partial) block holds large values
    q = C.quantize(FP8_BLOCK, w, convention=DEEPSEEK)
    s = q["weight_scale_inv"]
    assert s.shape == (2, 3)
    assert s[1, 2] == np.float32(np.abs(w[128:, 256:]).max() / np.float32(448))
    assert s[1, 1] == np.float32(np.abs(w[128:, 128:256]).max() / np.float32(448))
    back = C.dequantize(FP8_BLOCK, q, convention=DEEPSEEK)
    assert back.shape == (192, 320)


def test_partial_last_group_for_int4() -> None:
    w = weights((32, 100))
    q = C.quantize(INT4_GROUP, w, convention=COMPRESSED_TENSORS, group_size=64)
    assert q["weight_packed"].shape == (32, 13) and q["weight_scale"].shape == (32, 2)
    assert q["weight_shape"].tolist() == [32, 100]
    back = C.dequantize(INT4_GROUP, q, convention=COMPRESSED_TENSORS, group_size=64)
    assert back.shape == (32, 100) and np.abs(back - w).max() < np.abs(w).max() / 7


def test_deepseek_v3_and_v4_scale_names_both_decode() -> None:
    w = weights((128, 256))
    v3 = C.quantize(FP8_BLOCK, w, convention=DEEPSEEK)
    v4 = {"weight": v3["weight"], "scale": v3["weight_scale_inv"]}
    np.testing.assert_array_equal(C.dequantize(FP8_BLOCK, v3, convention=DEEPSEEK),
                                  C.dequantize(FP8_BLOCK, v4, convention=DEEPSEEK))


def test_gpt_oss_blocks_are_the_same_bytes_reshaped() -> None:
    w = weights((2, 64, 128))
    g = C.quantize(MXFP4, w, convention=GPT_OSS)
    d = C.quantize(MXFP4, w, convention=DEEPSEEK, weight_dtype="U8", scale_dtype="U8")
    assert g["blocks"].shape == (2, 64, 4, 16) and g["scales"].shape == (2, 64, 4)
    np.testing.assert_array_equal(g["blocks"].reshape(2, 64, 64), d["weight"])
    np.testing.assert_array_equal(g["scales"], d["scale"])
    assert C.layout(MXFP4, GPT_OSS).tensor_name("mlp.experts.down_proj", "blocks") == \
        "mlp.experts.down_proj_blocks"


def test_gptq_v1_stores_zero_minus_one() -> None:
    w = weights((64, 128))
    v1 = C.quantize(INT4_GROUP, w, convention=GPTQ, group_size=32)
    v2 = C.quantize(INT4_GROUP, w, convention=GPTQ, group_size=32, gptq_v2=True)
    assert (v1["qzeros"] == 0x77777777).all() and (v2["qzeros"].view(np.uint32) == 0x88888888).all()
    np.testing.assert_array_equal(v1["qweight"], v2["qweight"])
    a = C.dequantize(INT4_GROUP, v1, convention=GPTQ)
    b = C.dequantize(INT4_GROUP, v2, convention=GPTQ, gptq_v2=True)
    np.testing.assert_array_equal(a, b)
    wrong = C.dequantize(INT4_GROUP, v1, convention=GPTQ, gptq_v2=True)
    assert not np.allclose(wrong, a)


def test_gptq_act_order_g_idx_is_honoured() -> None:
    w = weights((64, 128))
    q = C.quantize(INT4_GROUP, w, convention=GPTQ, group_size=32)
    base = C.dequantize(INT4_GROUP, q, convention=GPTQ)
    perm = dict(q, g_idx=q["g_idx"][::-1].copy())  # columns now read the mirrored groups
    moved = C.dequantize(INT4_GROUP, perm, convention=GPTQ)
    assert not np.array_equal(base, moved)


def test_missing_tensor_and_bad_shape_are_named() -> None:
    q = C.quantize(NVFP4, weights((64, 128)), convention=MODELOPT)
    with pytest.raises(ValueError, match="weight_scale_2"):
        C.dequantize(NVFP4, {k: v for k, v in q.items() if k != "weight_scale_2"},
                     convention=MODELOPT)
    with pytest.raises(ValueError, match=r"scale shape \(64, 4\)"):
        C.dequantize(NVFP4, dict(q, weight_scale=q["weight_scale"][:, :4]), convention=MODELOPT)
    with pytest.raises(ValueError, match="even input dimension"):
        C.quantize(NVFP4, weights((4, 33)), convention=MODELOPT)
    with pytest.raises(ValueError, match="known:"):
        C.quantize(NVFP4, weights((4, 32)), convention=GPT_OSS)
