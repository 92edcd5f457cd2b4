"""Shared test inputs: every layout with the options a producer uses."""

from __future__ import annotations

import numpy as np

from specguard.formats.scheme import (
    COMPRESSED_TENSORS,
    DEEPSEEK,
    FP8_BLOCK,
    FP8_CHANNEL,
    FP8_TENSOR,
    GPT_OSS,
    GPTQ,
    INT4_GROUP,
    MODELOPT,
    MXFP4,
    MXFP8,
    NVFP4,
)

# (format, convention, quantize options, weight shape). Shapes include edge
# blocks (192 x 320 is not a multiple of 128) and stacked experts (3-D).
CASES = [
    (FP8_TENSOR, MODELOPT, {"input_amax": 3.0}, (96, 160)),
    (FP8_TENSOR, COMPRESSED_TENSORS, {"input_amax": 3.0}, (96, 160)),
    (FP8_CHANNEL, COMPRESSED_TENSORS, {}, (96, 160)),
    (FP8_BLOCK, DEEPSEEK, {}, (192, 320)),
    (FP8_BLOCK, DEEPSEEK, {"scale_name": "scale", "scale_dtype": "F8_E8M0"}, (192, 320)),
    (FP8_BLOCK, DEEPSEEK, {"scale_name": "scale", "scale_dtype": "U8"}, (3, 256, 128)),
    (FP8_BLOCK, COMPRESSED_TENSORS, {"scale_dtype": "BF16"}, (192, 320)),
    (NVFP4, MODELOPT, {"input_amax": 5.0}, (96, 160)),
    (NVFP4, MODELOPT, {}, (4, 64, 128)),
    (NVFP4, COMPRESSED_TENSORS, {"input_amax": 5.0}, (96, 160)),
    (MXFP4, DEEPSEEK, {}, (96, 160)),
    (MXFP4, DEEPSEEK, {"weight_dtype": "U8", "scale_dtype": "U8", "scale_rule": "floor"},
     (4, 64, 128)),
    (MXFP4, COMPRESSED_TENSORS, {}, (96, 160)),
    (MXFP4, GPT_OSS, {}, (4, 64, 128)),
    (MXFP8, COMPRESSED_TENSORS, {}, (96, 160)),
    (INT4_GROUP, COMPRESSED_TENSORS, {"group_size": 32}, (96, 160)),
    (INT4_GROUP, COMPRESSED_TENSORS, {"group_size": 64, "scale_dtype": "F16"}, (96, 100)),
    (INT4_GROUP, GPTQ, {"group_size": 32}, (96, 160)),
    (INT4_GROUP, GPTQ, {"group_size": 32, "gptq_v2": True}, (96, 160)),
]

DEQUANT_KEYS = ("group_size", "block", "scale_name", "gptq_v2")


def case_id(case: tuple) -> str:
    fmt, conv, opts, shape = case
    extra = ",".join(f"{k}={v}" for k, v in opts.items() if k != "input_amax")
    return f"{fmt}-{conv}-{'x'.join(map(str, shape))}" + (f"-{extra}" if extra else "")


def dequant_opts(opts: dict) -> dict:
    return {k: v for k, v in opts.items() if k in DEQUANT_KEYS}


def weights(shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    """Gaussian rows of different magnitudes, a zero block and a denormal-sized block."""
    rng = np.random.default_rng(seed)
    w = rng.standard_normal(shape).astype(np.float32)
    w *= rng.uniform(0.01, 3.0, (*shape[:-1], 1)).astype(np.float32)
    w[..., 1, :32] = 0.0
    w[..., 2, 32:64] *= 1e-30
    return w
