"""Decoders for the stacks with their own tensor names (formats/families.py).

Each follows its producer's own dequantization step by step, in the producer's
arithmetic (which dtype each multiply rounds to), so the result is
bit-identical to it; tests/codecs/test_producer_families.py checks each against
the producer's dequantized tensors stored beside the fixtures. Producers and
versions: docs/formats.md. numpy + ml_dtypes only.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

import ml_dtypes
import numpy as np

BF16 = np.dtype(ml_dtypes.bfloat16)
F32 = np.float32
DTYPES = {"bfloat16": BF16, "float16": np.dtype(np.float16), "float32": np.dtype(F32)}
# AutoAWQ / Quark ``reorder`` packing: nibble i of an int32 holds column order[i] of its 8.
AWQ_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)


def _f32(x: np.ndarray) -> np.ndarray:
    return np.asarray(x).astype(F32)


# ---------------------------------------------------------------- bitsandbytes


def bnb_quant_state(raw: np.ndarray) -> dict:
    """The ``weight.quant_state.bitsandbytes__<type>`` tensor: JSON bytes."""
    return json.loads(np.asarray(raw, dtype=np.uint8).tobytes().decode())


def bnb_4bit(t: Mapping[str, np.ndarray]) -> np.ndarray:
    """Linear4bit (bitsandbytes ``dequantize_4bit``, default backend): codes high
    nibble first, ``quant_map[code] * absmax[block]`` in float32, cast to the
    state's dtype; double quant first rebuilds absmax as
    ``nested_quant_map[absmax] * nested_absmax[block of 256] + nested_offset``."""
    state_key = next(k for k in t if k.startswith("weight.quant_state.bitsandbytes__"))
    state = bnb_quant_state(t[state_key])
    absmax = np.asarray(t["weight.absmax"])
    if "weight.nested_absmax" in t:
        nb = int(state["nested_blocksize"])
        codes = _f32(t["weight.nested_quant_map"])[absmax.reshape(-1).astype(np.int64)]
        absmax = _blockwise(codes, _f32(t["weight.nested_absmax"]), nb)
        absmax = (absmax + F32(state["nested_offset"])).astype(F32)
    absmax = _f32(absmax).reshape(-1)
    packed = np.asarray(t["weight"]).reshape(-1).view(np.uint8)
    codes = np.empty(packed.size * 2, np.int64)
    codes[0::2] = packed >> 4
    codes[1::2] = packed & 0xF
    shape = tuple(int(x) for x in state["shape"])
    n = int(np.prod(shape))
    values = _f32(t["weight.quant_map"])[codes[:n]]
    out = _blockwise(values, absmax, int(state["blocksize"]))
    return out.reshape(shape).astype(DTYPES[state["dtype"]])


def _blockwise(values: np.ndarray, absmax: np.ndarray, block: int) -> np.ndarray:
    n = values.size
    full = n - n % block
    out = np.empty(n, F32)
    out[:full] = (values[:full].reshape(-1, block) * absmax[: full // block, None]).reshape(-1)
    if full < n:
        out[full:] = values[full:] * absmax[full // block]
    return out


def bnb_int8(weight: np.ndarray, scb: np.ndarray) -> np.ndarray:
    """Linear8bitLt (``int8_vectorwise_dequant``): ``A * SCB * (1/127)`` in float32."""
    return (_f32(weight) * _f32(scb).reshape(-1, 1)) * F32(7.874015718698502e-3)


# ---------------------------------------------------------------- optimum-quanto


def quanto_unpack(packed: np.ndarray, bits: int = 4) -> np.ndarray:
    """quanto ``PackedTensor.unpack``: row r of the result is byte row r % rows, shifted
    by (r // rows) * bits (the first rows in the low bits)."""
    packed = np.asarray(packed, np.uint8)
    per = 8 // bits
    mask = (1 << bits) - 1
    return np.concatenate([(packed >> (i * bits)) & mask for i in range(per)], axis=0)


def quanto_int4(t: Mapping[str, np.ndarray], shape: Sequence[int]) -> np.ndarray:
    """WeightQBitsTensor ``dequantize`` with a float shift: ``scale * data - shift``, each
    op rounded to the scale's dtype, groups (of the weight flattened row-major) reshaped back."""
    scale, shift = np.asarray(t["weight._scale"]), np.asarray(t["weight._shift"])
    dt = scale.dtype
    data = quanto_unpack(t["weight._data._data"]).astype(F32)
    dq = (_f32(scale) * data).astype(dt)
    dq = (_f32(dq) - _f32(shift)).astype(dt)
    return dq.reshape(tuple(shape))


def quanto_per_row(t: Mapping[str, np.ndarray]) -> np.ndarray:
    """qint8 / qfloat8 QTensor ``dequantize``: ``data * scale`` rounded to the scale's dtype."""
    scale = np.asarray(t["weight._scale"])
    data = np.asarray(t["weight._data"])
    return (_f32(data) * _f32(scale)).astype(scale.dtype)


# ---------------------------------------------------------------- torchao


def torchao_affine(t: Mapping[str, np.ndarray], dtype: np.dtype = BF16) -> np.ndarray:
    """Int8Tensor / Float8Tensor ``dequantize`` (``_dequantize_affine``): qdata in the output
    dtype, minus the zero point, times the (float32) scale, back to the output dtype."""
    q = np.asarray(t["_weight_qdata"]).astype(dtype)
    if "_weight_zero_point" in t:
        q = (_f32(q) - _f32(np.asarray(t["_weight_zero_point"]).astype(dtype))).astype(dtype)
    scale = np.asarray(t["_weight_scale"])
    return (_f32(q) * _f32(scale).reshape(_scale_shape(scale, q.shape))).astype(dtype)


def _scale_shape(scale: np.ndarray, shape: tuple[int, ...]) -> tuple[int, ...]:
    return (shape[0], 1) if scale.size == shape[0] else scale.shape


# ---------------------------------------------------------------- int4 packed along the output dim


def unpack_int4_cols(packed: np.ndarray, order: Sequence[int] = AWQ_ORDER, signed: bool = False) -> np.ndarray:
    """I32 ``[rows, cols/8]`` -> ``[rows, cols]``: nibble i of each int32 is column order[i]."""
    p = np.asarray(packed).view(np.uint32)
    out = np.empty((p.shape[0], p.shape[1] * 8), np.int32)
    for i, col in enumerate(order):
        out[:, col::8] = (p >> (4 * i)) & 0xF
    if signed:
        out = np.where(out >= 8, out - 16, out)
    return out


def quark_int4(t: Mapping[str, np.ndarray], *, signed: bool, dtype: np.dtype = BF16) -> np.ndarray:
    """Quark int4/uint4 (``Pack_4_bits``, reorder): ``weight`` [in, out/8], ``weight_scale``
    [in/g, out], ``weight_zero_point`` [in/g, out/8]; ``(q - zp) * scale`` in float32
    (``fake_quantize_per_channel_affine``), to the weight dtype, transposed to [out, in]."""
    q = unpack_int4_cols(t["weight"], signed=signed)
    scale = np.asarray(t["weight_scale"])
    zp = unpack_int4_cols(t["weight_zero_point"], signed=signed) if "weight_zero_point" in t else 0
    group = q.shape[0] // scale.shape[0]
    zp = np.repeat(zp, group, axis=0) if isinstance(zp, np.ndarray) else zp
    w = (_f32(q - zp) * np.repeat(_f32(scale), group, axis=0)).astype(dtype)
    return np.ascontiguousarray(w.T)


def awq_int4(t: Mapping[str, np.ndarray]) -> np.ndarray:
    """AutoAWQ GEMM: ``qweight`` [in, out/8], ``qzeros`` [in/g, out/8], ``scales`` [in/g, out];
    ``(q - z) * s`` -> float32 [out, in]."""
    q = unpack_int4_cols(t["qweight"])
    z = unpack_int4_cols(t["qzeros"])
    scale = _f32(t["scales"])
    group = q.shape[0] // scale.shape[0]
    w = (q - np.repeat(z, group, axis=0)).astype(F32) * np.repeat(scale, group, axis=0)
    return np.ascontiguousarray(w.T)
