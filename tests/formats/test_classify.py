"""Classification from headers alone, on real safetensors files of every format."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from specguard.checkpoint import open_checkpoint
from specguard.checkpoint.writer import save_file
from specguard.formats import classify
from specguard.formats import scheme as s

U8, I8, I32, I64 = np.uint8, np.int8, np.int32, np.int64
F32, F16, BF16 = np.float32, np.float16, ml_dtypes.bfloat16
E4M3, E8M0 = ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e8m0fnu
OUT, IN = 256, 512


def z(shape, dtype):
    return np.zeros(shape, dtype)


# (label, tensors of module "m", expected format, convention, group_size, block, missing)
CASES = [
    ("bf16", {"weight": z((OUT, IN), BF16)}, s.BF16, s.PLAIN, None, None, ()),
    ("fp16", {"weight": z((OUT, IN), F16), "bias": z(OUT, F16)}, s.FP16, s.PLAIN, None, None, ()),
    ("fp32", {"weight": z((OUT, IN), F32)}, s.FP32, s.PLAIN, None, None, ()),
    ("fp8 per-tensor (modelopt)", {"weight": z((OUT, IN), E4M3), "weight_scale": z((), F32), "input_scale": z((), F32)},
     s.FP8_TENSOR, None, None, None, ()),
    ("fp8 per-channel", {"weight": z((OUT, IN), E4M3), "weight_scale": z((OUT, 1), F32)},
     s.FP8_CHANNEL, None, None, None, ()),
    ("fp8 block v3", {"weight": z((OUT, IN), E4M3), "weight_scale_inv": z((2, 4), F32)},
     s.FP8_BLOCK, s.DEEPSEEK, None, (128, 128), ()),
    ("fp8 block edge", {"weight": z((200, 300), E4M3), "weight_scale_inv": z((2, 3), F32)},
     s.FP8_BLOCK, s.DEEPSEEK, None, (128, 128), ()),
    ("fp8 block v4 e8m0", {"weight": z((OUT, IN), E4M3), "scale": z((2, 4), E8M0)},
     s.FP8_BLOCK, s.DEEPSEEK, None, (128, 128), ()),
    ("fp8 block compressed-tensors", {"weight": z((OUT, IN), E4M3), "weight_scale": z((2, 4), F32)},
     s.FP8_BLOCK, None, None, (128, 128), ()),
    ("fp8 block modelopt 4-D scale", {"weight": z((OUT, IN), E4M3), "weight_scale": z((2, 1, 4, 1), F32)},
     s.FP8_BLOCK, None, None, (128, 128), ()),
    # int4 g128 or int8 per channel: the width is in weight_shape (tests/formats/test_pack_width.py)
    ("int4 pack-quantized, one group per row", {"weight_packed": z((OUT, 16), I32),
                                                "weight_scale": z((OUT, 1), BF16), "weight_shape": z(2, I64)},
     s.AMBIGUOUS, s.COMPRESSED_TENSORS, None, None, ()),
    ("nvfp4 modelopt", {"weight": z((OUT, IN // 2), U8), "weight_scale": z((OUT, IN // 16), E4M3),
                        "weight_scale_2": z((), F32), "input_scale": z((), F32)},
     s.NVFP4, s.MODELOPT, 16, None, ()),
    ("nvfp4 modelopt, per-tensor scales missing (S5)",
     {"weight": z((OUT, IN // 2), U8), "weight_scale": z((OUT, IN // 16), E4M3)},
     s.NVFP4, s.MODELOPT, 16, None, ("weight_scale_2", "input_scale")),
    ("nvfp4 fused experts 3-D", {"weight": z((4, OUT, IN // 2), U8), "weight_scale": z((4, OUT, IN // 16), E4M3),
                                 "weight_scale_2": z(4, F32), "input_scale": z(4, F32)},
     s.NVFP4, s.MODELOPT, 16, None, ()),
    ("nvfp4 compressed-tensors", {"weight_packed": z((OUT, IN // 2), U8), "weight_scale": z((OUT, IN // 16), E4M3),
                                  "weight_global_scale": z(1, F32), "input_global_scale": z(1, F32)},
     s.NVFP4, s.COMPRESSED_TENSORS, 16, None, ()),
    ("mxfp4 deepseek I8 + e8m0 .scale", {"weight": z((OUT, IN // 2), I8), "scale": z((OUT, IN // 32), E8M0)},
     s.MXFP4, s.DEEPSEEK, 32, None, ()),
    ("mxfp4 with U8 scale is ambiguous", {"weight": z((OUT, IN // 2), U8), "scale": z((OUT, IN // 32), U8)},
     s.AMBIGUOUS, s.DEEPSEEK, 32, None, ()),
    ("mxfp4 compressed-tensors", {"weight_packed": z((OUT, IN // 2), U8), "weight_scale": z((OUT, IN // 32), U8)},
     s.MXFP4, s.COMPRESSED_TENSORS, 32, None, ()),
    ("mxfp8", {"weight": z((OUT, IN), E4M3), "weight_scale": z((OUT, IN // 32), E8M0)},
     s.MXFP8, None, 32, None, ()),
    ("int4 pack-quantized", {"weight_packed": z((OUT, IN // 8), I32), "weight_scale": z((OUT, IN // 128), BF16),
                             "weight_shape": z(2, I64)},
     s.AMBIGUOUS, s.COMPRESSED_TENSORS, None, None, ()),  # 4-bit g128 or 8-bit g64: weight_shape says
    ("gptq int4", {"qweight": z((IN // 8, OUT), I32), "qzeros": z((IN // 128, OUT // 8), I32),
                   "scales": z((IN // 128, OUT), F16), "g_idx": z(IN, I32)},
     s.INT4_GROUP, s.GPTQ, 128, None, ()),
    ("awq int4", {"qweight": z((IN, OUT // 8), I32), "qzeros": z((IN // 128, OUT // 8), I32),
                  "scales": z((IN // 128, OUT), F16)},
     s.INT4_GROUP, s.AWQ, 128, None, ()),
    ("modelopt int4 awq", {"weight": z((OUT // 2, IN), U8), "weight_scale": z((OUT, IN // 128), F16),
                           "pre_quant_scale": z(IN, F16)},
     s.INT4_GROUP, s.MODELOPT, 128, None, ()),
    ("int8 per-channel (W8A8)", {"weight": z((OUT, IN), I8), "weight_scale": z((OUT, 1), F32)},
     s.INT8_CHANNEL, None, None, None, ()),
    ("bf16 weight beside a scale is unknown", {"weight": z((OUT, IN), BF16), "weight_scale": z((), F32)},
     s.UNKNOWN, None, None, None, ()),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_module_classification(tmp_path, case):
    _, params, fmt, conv, group, block, missing = case
    save_file({f"model.layers.0.m.{p}": a for p, a in params.items()}, tmp_path / "model.safetensors")
    table = classify(open_checkpoint(tmp_path))
    m = table["model.layers.0.m"]
    assert set(m.params) == set(params)
    assert (m.scheme.format, m.scheme.convention) == (fmt, conv)
    if group is not None:
        assert m.scheme.group_size == group
    assert m.scheme.block == block
    assert m.missing == missing
    if fmt in (s.UNKNOWN, s.AMBIGUOUS):
        assert m.scheme.reason


def test_gpt_oss_blocks_and_scales(tmp_path):
    e, n, k = 4, 64, 128
    save_file({
        "model.layers.0.mlp.experts.gate_up_proj_blocks": z((e, n, k // 32, 16), U8),
        "model.layers.0.mlp.experts.gate_up_proj_scales": z((e, n, k // 32), U8),
        "model.layers.0.mlp.experts.gate_up_proj_bias": z((e, n), BF16),
        "model.layers.0.mlp.router.weight": z((e, k), BF16),
    }, tmp_path / "model.safetensors")
    table = classify(open_checkpoint(tmp_path))
    m = table["model.layers.0.mlp.experts.gate_up_proj"]
    assert set(m.params) == {"blocks", "scales", "bias"}
    assert (m.scheme.format, m.scheme.convention, m.scheme.group_size) == (s.MXFP4, s.GPT_OSS, 32)
    assert table["model.layers.0.mlp.router"].scheme.format == s.BF16


def test_kv_scales_and_standalone_tensors(tmp_path):
    save_file({
        "model.layers.0.self_attn.k_scale": z((), F32),
        "model.layers.0.self_attn.v_scale": z((), F32),
        "layers.0.attn.attn_sink": z(8, F32),
        "layers.0.ffn.gate.tid2eid": z((16, 2), I32),
    }, tmp_path / "model.safetensors")
    table = classify(open_checkpoint(tmp_path))
    assert table["model.layers.0.self_attn"].scheme.format == s.FP8_KV
    assert table["layers.0.attn.attn_sink"].scheme.format == s.FP32
    assert table["layers.0.ffn.gate.tid2eid"].scheme.format == s.PLAIN_TENSOR


def test_one_block_fp8_weight_has_both_readings():
    """A 128x128 FP8 weight with a [1, 1] scale is per-tensor and one 128x128 block alike."""
    from specguard.checkpoint.header import TensorInfo
    from specguard.formats.classify import classify_params

    w = TensorInfo("F8_E4M3", (128, 128), (0, 128 * 128), name="m.weight", file="f")
    sc = TensorInfo("F32", (1, 1), (0, 4), name="m.weight_scale_inv", file="f")
    got = classify_params({"weight": w, "weight_scale_inv": sc}).scheme
    assert got.format == "fp8_tensor" and got.fits("fp8_block")
    assert got.reading("fp8_block").block == (128, 128) and got.reading("fp8_block").fits("fp8_tensor")
    scalar = classify_params({"weight": w, "weight_scale_inv": TensorInfo("F32", (), (0, 4), name="s")}).scheme
    assert not scalar.fits("fp8_block")  # a scalar cannot load into a [1, 1] block-scale parameter
