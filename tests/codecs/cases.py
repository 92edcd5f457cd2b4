"""Every layout with the options its producers use: the one table the codec tests
(tests/codecs) and the throughput benchmark (benchmarks/codecs.py) share.

``shape`` is the small test weight (edge blocks: 192 x 320 is not a multiple of
128; stacked experts: 3-D). ``experts`` > 0 puts the case in the benchmark,
stacked that many experts deep, under ``label``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from specguard.codecs._core import DECODE_OPTIONS
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
    Convention,
    Format,
)


@dataclass(frozen=True)
class Case:
    format: Format
    convention: Convention
    options: Mapping[str, Any] = field(default_factory=dict)  # ``quantize`` options
    shape: tuple[int, ...] = (96, 160)
    label: str = ""
    experts: int = 0  # benchmark: 0 = not benchmarked, 1 = one weight, > 1 = stacked experts


def decode_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """The ``quantize`` options ``dequantize`` takes too (the rest only shape what is written)."""
    return {k: v for k, v in options.items() if k in DECODE_OPTIONS}


TABLE = (
    Case(NVFP4, MODELOPT, {}, (4, 64, 128), "nvfp4 modelopt", 1),
    Case(NVFP4, MODELOPT, {"input_amax": 5.0}),
    Case(NVFP4, COMPRESSED_TENSORS, {}, label="nvfp4 compressed-tensors", experts=1),
    Case(NVFP4, COMPRESSED_TENSORS, {"input_amax": 5.0}),
    Case(MXFP4, DEEPSEEK, {}, label="mxfp4 deepseek (I8 + E8M0)", experts=1),
    Case(MXFP4, DEEPSEEK, {"weight_dtype": "U8", "scale_dtype": "U8", "scale_rule": "floor"}, (4, 64, 128)),
    Case(MXFP4, GPT_OSS, {}, (4, 64, 128), "mxfp4 gpt-oss blocks (8 experts)", 8),
    Case(MXFP4, COMPRESSED_TENSORS),
    Case(MXFP8, COMPRESSED_TENSORS, {}, label="mxfp8 compressed-tensors", experts=1),
    Case(FP8_BLOCK, DEEPSEEK, {}, (192, 320), "fp8_block deepseek-v3 (F32 scale_inv)", 1),
    Case(FP8_BLOCK, DEEPSEEK, {"scale_name": "scale", "scale_dtype": "F8_E8M0"}, (192, 320),
         "fp8_block deepseek-v4 (E8M0 .scale)", 1),
    Case(FP8_BLOCK, DEEPSEEK, {"scale_name": "scale", "scale_dtype": "U8"}, (3, 256, 128)),
    Case(FP8_BLOCK, COMPRESSED_TENSORS, {"scale_dtype": "BF16"}, (192, 320)),
    Case(FP8_TENSOR, MODELOPT, {}, label="fp8_tensor modelopt", experts=1),
    Case(FP8_TENSOR, MODELOPT, {"input_amax": 3.0}),
    Case(FP8_TENSOR, COMPRESSED_TENSORS, {"input_amax": 3.0}),
    Case(FP8_CHANNEL, COMPRESSED_TENSORS, {}, label="fp8_channel compressed-tensors", experts=1),
    Case(INT4_GROUP, COMPRESSED_TENSORS, {}, (96, 256), "int4_group compressed-tensors g128", 1),
    Case(INT4_GROUP, COMPRESSED_TENSORS, {"group_size": 32}),
    Case(INT4_GROUP, COMPRESSED_TENSORS, {"group_size": 64, "scale_dtype": "F16"}, (96, 100)),
    Case(INT4_GROUP, GPTQ, {}, (96, 256), "int4_group gptq g128", 1),
    Case(INT4_GROUP, GPTQ, {"group_size": 32}),
    Case(INT4_GROUP, GPTQ, {"group_size": 32, "gptq_v2": True}),
)



dequant_opts = decode_options  # (the tests' name)
# (format, convention, quantize options, weight shape), as the tests parametrize them
CASES = [(c.format, c.convention, dict(c.options), c.shape) for c in TABLE]


def case_id(case: tuple) -> str:
    fmt, conv, opts, shape = case
    extra = ",".join(f"{k}={v}" for k, v in opts.items() if k != "input_amax")
    return f"{fmt}-{conv}-{'x'.join(map(str, shape))}" + (f"-{extra}" if extra else "")


def weights(shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    """Gaussian rows of different magnitudes, a zero block and a denormal-sized block."""
    rng = np.random.default_rng(seed)
    w = rng.standard_normal(shape).astype(np.float32)
    w *= rng.uniform(0.01, 3.0, (*shape[:-1], 1)).astype(np.float32)
    w[..., 1, :32] = 0.0
    w[..., 2, 32:64] *= 1e-30
    return w
