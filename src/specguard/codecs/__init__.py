"""Quantize and dequantize every format specguard meets, as each producer stores it.

numpy + ml_dtypes back end (this module; never imports torch) and a torch
back end (:mod:`specguard.codecs.torch_backend`) with bit-identical results.

``quantize`` returns ``{suffix: array}`` with arrays already in their on-disk
dtype (``weight`` U8, ``weight_scale`` F8_E4M3, ``scale`` F8_E8M0, ...); the
tensor name is ``layout(fmt, convention).tensor_name(module, suffix)``.
``dequantize`` takes the same mapping (extra keys are ignored) and returns
float32 ``[out, in]`` (``[..., out, in]`` for stacked experts).

Round-trip error bounds (x = input, x' = dequantize(quantize(x)), s = the
effective scale of x's block, y = x / s; tested in tests/codecs/test_bounds.py):

============  ==================================================================
fp8_*, mxfp8  |x - x'| <= 2**-4 |x| + 2**-10 s (E4M3: 3 mantissa bits, nearest
              even; the second term covers subnormals). F32 scales s = amax/448,
              E8M0 scales 2**ceil(log2(amax/448)): nothing clips. Gaussian
              N(0,1) relative Frobenius error ~0.026 (tested < 0.03).
nvfp4         |x - x'| <= s * (half E2M1 step at |y|: 0.25 below 2, 0.5 below 4,
              1 up to 6) + s * (|y| - 6 where the E4M3 block scale rounded down:
              |y| <= 6.375 for normal E4M3 scales). Gaussian ~0.095 (< 0.105).
mxfp4         "ceil" rule (DeepSeek, gpt-oss): half-step bound, nothing clips;
              "floor" (OCP) may clip up to 2x. Gaussian ~0.116 (< 0.125).
int4_group    |x - x'| <= 0.53 s, s = amax/7.5 (y = 7.5 clips to 7; BF16 scale
              rounding adds < 1%). Gaussian ~0.095 g32, ~0.11 g128.
============  ==================================================================
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from specguard.codecs import _core
from specguard.codecs._core import Options
from specguard.codecs._ops import NUMPY_OPS
from specguard.codecs.elements import (
    E2M1_MAX,
    E2M1_VALUES,
    E4M3_MAX,
    E8M0_BIAS,
    E8M0_NAN,
    cast_e4m3,
    e2m1_codes,
    e4m3_to_float,
    e8m0_to_float,
    float_to_e8m0,
    fp4_to_float,
    pack_fp4,
    unpack_fp4,
)
from specguard.codecs.packing import LAYOUTS, PackLayout, conventions, layout

__all__ = [
    "E2M1_MAX", "E2M1_VALUES", "E4M3_MAX", "E8M0_BIAS", "E8M0_NAN", "LAYOUTS", "MX_RULES",
    "Options", "PackLayout", "cast_e4m3", "conventions", "dequantize", "e2m1_codes", "e4m3_to_float",
    "e8m0_to_float", "float_to_e8m0", "fp4_to_float", "layout", "pack_fp4", "quantize",
    "unpack_fp4",
]

MX_RULES = _core.MX_RULES


def quantize(fmt: str, w: np.ndarray, *, convention: str, **options: Any) -> dict[str, np.ndarray]:
    """Quantize a float weight ``[..., out, in]`` the way ``convention`` stores ``fmt``.

    fmt / convention: scheme constants (``specguard.formats.scheme``); see
    ``LAYOUTS`` for the pairs. ``options``: the fields of ``Options`` (group_size,
    block, scale_dtype, scale_name, weight_dtype, scale_rule, input_amax, gptq_v2).
    """
    return _core.quantize(NUMPY_OPS, layout(fmt, convention), np.asarray(w), Options(**options))


def dequantize(fmt: str, tensors: Mapping[str, np.ndarray], *, convention: str, out: np.ndarray | None = None,
               **options: Any) -> np.ndarray:
    """Decode ``{suffix: array}`` (as ``quantize`` returns or a file holds) to float32.

    The scale's meaning follows its dtype: F8_E8M0 (or U8 where the layout
    holds E8M0) is a power of two, F8_E4M3 an E4M3 value, floats as is.
    ``out``: optional float32 C-contiguous array of the weight's shape to fill
    (bulk loaders reuse one buffer). ValueError names a missing tensor or a
    shape that does not fit. ``options``: the fields of ``Options`` that decoding reads.
    """
    arrays = {k: np.asarray(v) for k, v in tensors.items()}
    return _core.dequantize(NUMPY_OPS, layout(fmt, convention), arrays, Options(**options), out)
