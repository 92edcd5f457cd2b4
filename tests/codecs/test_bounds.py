"""Round-trip error bounds per format (the bounds stated in specguard.codecs' docstring)."""

from __future__ import annotations

import numpy as np
import pytest

from specguard import codecs as C
from specguard.formats.scheme import (
    COMPRESSED_TENSORS,
    DEEPSEEK,
    FP8_BLOCK,
    FP8_CHANNEL,
    FP8_TENSOR,
    GPTQ,
    INT4_GROUP,
    MODELOPT,
    MXFP4,
    MXFP8,
    NVFP4,
)


def gaussian(shape=(256, 512), seed=0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def roundtrip(fmt: str, conv: str, w: np.ndarray, **opts) -> tuple[dict, np.ndarray]:
    q = C.quantize(fmt, w, convention=conv, **opts)
    dq = {k: v for k, v in opts.items() if k in ("group_size", "scale_name")}
    return q, C.dequantize(fmt, q, convention=conv, **dq)


# Relative Frobenius error on N(0, 1) weights: measured ~0.026 (FP8), ~0.095
# (NVFP4), ~0.112-0.116 (MXFP4), ~0.095 / ~0.103 / ~0.11 (int4, groups 32/64/128).
GAUSSIAN_BOUNDS = [
    (FP8_TENSOR, MODELOPT, {}, 0.03),
    (FP8_CHANNEL, COMPRESSED_TENSORS, {}, 0.03),
    (FP8_BLOCK, DEEPSEEK, {}, 0.03),
    (FP8_BLOCK, DEEPSEEK, {"scale_name": "scale", "scale_dtype": "F8_E8M0"}, 0.03),
    (MXFP8, COMPRESSED_TENSORS, {}, 0.03),
    (NVFP4, MODELOPT, {}, 0.105),
    (NVFP4, COMPRESSED_TENSORS, {}, 0.105),
    (MXFP4, DEEPSEEK, {}, 0.125),
    (MXFP4, COMPRESSED_TENSORS, {}, 0.125),
    (INT4_GROUP, COMPRESSED_TENSORS, {"group_size": 32}, 0.105),
    (INT4_GROUP, GPTQ, {"group_size": 128}, 0.12),
]


@pytest.mark.parametrize("fmt,conv,opts,bound", GAUSSIAN_BOUNDS,
                         ids=[f"{f}-{c}-{b}" for f, c, _, b in GAUSSIAN_BOUNDS])
def test_relative_error_on_gaussian_weights(fmt, conv, opts, bound) -> None:
    w = gaussian()
    _, back = roundtrip(fmt, conv, w, **opts)
    rel = np.linalg.norm(back - w) / np.linalg.norm(w)
    assert rel < bound
    assert rel > bound / 4  # the format really quantizes: not an identity round trip


def test_nvfp4_beats_mxfp4_on_gaussian_weights() -> None:
    w = gaussian(seed=1)
    err = {f: np.linalg.norm(roundtrip(f, c, w)[1] - w)
           for f, c in ((NVFP4, MODELOPT), (MXFP4, DEEPSEEK))}
    assert err[NVFP4] < err[MXFP4]


def _expand(s: np.ndarray, br: int, bc: int, shape: tuple[int, int]) -> np.ndarray:
    return np.repeat(np.repeat(s, br, -2), bc, -1)[..., : shape[-2], : shape[-1]]


def _half_step(y: np.ndarray) -> np.ndarray:
    """Half the E2M1 spacing around |y| (0.5 below 2, 1 below 4, 2 up to 6)."""
    a = np.abs(y)
    return np.where(a < 2, 0.25, np.where(a < 4, 0.5, 1.0))


def _scaled_weights(seed: int = 2) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((192, 320)) * rng.lognormal(0, 2, (192, 1))).astype(np.float32)


@pytest.mark.parametrize("opts", [{}, {"scale_name": "scale", "scale_dtype": "F8_E8M0"}])
def test_fp8_block_elementwise_bound(opts) -> None:
    w = _scaled_weights()
    q, back = roundtrip(FP8_BLOCK, DEEPSEEK, w, **opts)
    raw = q[opts.get("scale_name", "weight_scale_inv")]
    s = C.e8m0_to_float(raw) if raw.dtype.itemsize == 1 else raw
    s = _expand(s, 128, 128, w.shape)
    assert np.all(np.abs(w - back) <= 2.0**-4 * np.abs(w) + 2.0**-10 * s)


@pytest.mark.parametrize("fmt,conv", [(NVFP4, MODELOPT), (NVFP4, COMPRESSED_TENSORS),
                                      (MXFP4, DEEPSEEK)])
def test_fp4_elementwise_bound(fmt, conv) -> None:
    w = _scaled_weights(3)
    q, back = roundtrip(fmt, conv, w)
    if fmt == NVFP4 and conv == MODELOPT:
        s = C.e4m3_to_float(q["weight_scale"]) * q["weight_scale_2"]
    elif fmt == NVFP4:
        s = C.e4m3_to_float(q["weight_scale"]) / q["weight_global_scale"]
    else:
        s = C.e8m0_to_float(q["scale"])
    s = _expand(s, 1, 16 if fmt == NVFP4 else 32, w.shape)
    y = w / s
    clipped = np.maximum(np.abs(y) - 6.0, 0.0)
    assert np.all(np.abs(w - back) <= s * (_half_step(np.minimum(np.abs(y), 6)) + clipped))
    if fmt == MXFP4:  # the ceil rule never clips
        assert np.all(np.abs(y) <= 6.0)
    else:  # rounding a normal (>= 2**-6) E4M3 block scale clips at most 1/16 above 6
        normal = _expand(C.e4m3_to_float(q["weight_scale"]) >= 2.0**-6, 1, 16, w.shape)
        assert np.all(np.abs(y[normal]) <= 6.0 * (1 + 2.0**-4))
        assert not normal.all()  # the lognormal rows do reach subnormal block scales


def test_int4_elementwise_bound() -> None:
    w = _scaled_weights(4)
    q, back = roundtrip(INT4_GROUP, COMPRESSED_TENSORS, w, group_size=64)
    s = _expand(q["weight_scale"].astype(np.float32), 1, 64, w.shape)
    assert np.all(np.abs(w - back) <= 0.53 * s)
