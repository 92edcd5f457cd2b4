"""Quantize and dequantize, written once against ``_ops`` for both back ends.

Canonical form: a weight ``[..., R, C]`` (C = the reduction/input dim) is
``elements * expand(scale)``, where ``scale`` is float32 ``[..., ceil(R/br),
ceil(C/bc)]`` for a block of ``br x bc`` elements. Every layout is converted
to and from that form; edge blocks (R or C not a multiple of the block) use
the same scale for the partial block, as DeepSeek's ``ceil`` scale shapes do.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from specguard.codecs import _numpy_kernels as K
from specguard.codecs import packing as L
from specguard.codecs._tables import (
    E2M1_MAX,
    E2M1_THRESHOLDS,
    E4M3_MAX,
    E4M3_PAIR64,
    E4M3_TABLE,
    E8M0_TABLE,
    FP4_PAIR64,
    INT4_PAIR64,
)
from specguard.formats.scheme import (
    COMPRESSED_TENSORS,
    FP8_BLOCK,
    FP8_CHANNEL,
    FP8_TENSOR,
    INT4_GROUP,
    MXFP4,
    MXFP8,
    NVFP4,
)

Array = Any
E8M0_DTYPES = ("F8_E8M0", "U8")
FLOAT_SCALE_DTYPES = ("F32", "BF16", "F16")
NVFP4_GLOBAL = E4M3_MAX * E2M1_MAX  # 2688: per-tensor scale maps amax onto 6 * 448
MX_RULES = ("ceil", "floor", "compressed-tensors")
_EPS = {"F32": float(np.finfo(np.float32).eps), "F16": float(np.finfo(np.float16).eps),
        "BF16": 2.0 ** -7}


@dataclass(frozen=True)
class Options:
    """Choices a producer makes within a layout: the keyword options of every
    ``quantize`` / ``dequantize`` (numpy and torch); each defaults to the layout's choice.
    Decoding reads ``block``, ``group_size``, ``scale_name`` and ``gptq_v2``."""

    block: tuple[int, int] | None = None  # fp8_block block (default (128, 128))
    group_size: int | None = None  # int4 group along the input dim (default 128)
    # on-disk dtype of the block scale: F32/BF16/F16, or F8_E8M0/U8 for power-of-two
    # scales (DeepSeek-V4 ``scale_fmt: ue8m0``)
    scale_dtype: str | None = None
    # suffix of the block scale, e.g. "scale" for DeepSeek-V4 native
    # (default "weight_scale_inv" for DeepSeek FP8 block)
    scale_name: str | None = None
    weight_dtype: str | None = None  # U8 or I8 for packed FP4
    scale_rule: str | None = None  # MX shared-exponent rule, one of ``MX_RULES``
    input_amax: float | None = None  # activation amax; when given, the layout's input scale is written
    gptq_v2: bool = False  # GPTQ zero points stored exact (v2) instead of minus one (v1)


DECODE_OPTIONS = ("group_size", "block", "scale_name", "gptq_v2")  # the Options fields decoding reads


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def resolve_block(lay: L.PackLayout, opt: Options, rows: int, cols: int) -> tuple[int, int]:
    """Block size in elements; 0 in the layout means the whole dimension."""
    br, bc = lay.block
    if lay.format == FP8_BLOCK and opt.block is not None:
        br, bc = opt.block
    if lay.format == INT4_GROUP and opt.group_size is not None:
        bc = opt.group_size
    br, bc = br or rows, bc or cols
    if br <= 0 or bc <= 0:
        raise ValueError(f"block size must be positive, got {br}x{bc}")
    return br, bc


# ----------------------------------------------------------------- elements

def e2m1_codes(xp, x: Array) -> Array:
    """float32 -> E2M1 codes (uint8), round-to-nearest-even, saturating, signed zero kept."""
    mag = xp.abs(x)
    code = xp.zeros(tuple(x.shape), "U8", like=x)
    for threshold, tie_up in E2M1_THRESHOLDS:
        code = code + xp.cast((mag >= threshold) if tie_up else (mag > threshold), "U8")
    return code | (xp.cast(xp.signbit(x), "U8") << 3)


def pack_fp4(xp, codes: Array) -> Array:
    if codes.shape[-1] % 2:
        raise ValueError(f"FP4 packing needs an even input dimension, got {codes.shape[-1]}")
    return codes[..., 0::2] | (codes[..., 1::2] << 4)


def fp4_values(xp, packed: Array, out: Array | None = None) -> Array:
    """Packed FP4 bytes -> float32 values, last dim doubled (low nibble first).

    numpy: one 64-bit gather per byte (two values at once). torch: the float32
    bits are built with integer ops (no gather, no index check), which
    torch.compile fuses into one kernel with the scaling.
    """
    data = xp.view(packed, "U8")
    if xp.name == "numpy":
        return _pair_values(xp, FP4_PAIR64, data, out)
    b = xp.cast(data, "I32")
    codes = xp.stack_last(b & 0xF, b >> 4).reshape(*data.shape[:-1], data.shape[-1] * 2)
    return xp.view(e2m1_bits(xp, codes), "F32")


def e2m1_bits(xp, code: Array) -> Array:
    """E2M1 code (int32 0..15) -> float32 bit pattern (int32).

    Magnitude m >= 2 is 2**((m >> 1) - 1) * (1 + (m & 1) / 2): biased exponent
    (m >> 1) + 126, top mantissa bit m & 1; m == 1 is 0.5; m == 0 is zero.
    """
    m = code & 7
    normal = (((m >> 1) + 126) << 23) | ((m & 1) << 22)
    bits = xp.cast(xp.where(m >= 2, normal, xp.where(m == 1, 0x3F000000, 0)), "I32")
    return bits | ((code & 8) << 28)


def _pair_values(xp, table: np.ndarray, data_u8: Array, out: Array | None) -> Array:
    """One 64-bit gather per byte = two float32 values (``out``: float32, last dim 2x)."""
    words = xp.take(xp.table(table, data_u8), data_u8,
                    out=None if out is None else xp.view(out, "I64"))
    return xp.view(words, "F32")


def cast_e4m3(xp, y: Array) -> Array:
    """Saturating float32 -> E4M3 (ml_dtypes overflows to NaN, torch saturates: clip first)."""
    return xp.cast(xp.clip(y, -E4M3_MAX, E4M3_MAX), "F8_E4M3")


def e8m0_codes(xp, t: Array, rounding: str) -> Array:
    """Power-of-two exponent of positive float32 ``t`` as E8M0 codes (uint8).

    "ceil": smallest power of two >= t; "floor": largest <= t. Clamped to
    [2**-127, 2**127]; NaN -> 0xFF.
    """
    bits = xp.view(t, "I32")
    biased = (bits >> 23) & 0xFF
    mant = bits & 0x7FFFFF
    if rounding == "ceil":
        code = biased + xp.cast(mant != 0, "I32")
        tiny = xp.cast(mant > 0x400000, "I32")  # subnormal t: 2**-127 or 2**-126
    elif rounding == "floor":
        code = biased
        tiny = xp.zeros(tuple(t.shape), "I32", like=t)
    else:
        raise ValueError(f"unknown E8M0 rounding {rounding!r}")
    code = xp.where(biased == 0, tiny, xp.clip(code, 0, 254))
    return xp.cast(xp.where(xp.isnan(t), 255, code), "U8")


def decode_e8m0(xp, codes: Array) -> Array:
    return xp.take(xp.table(E8M0_TABLE, codes), xp.view(codes, "U8"))


def decode_e4m3(xp, data: Array) -> Array:
    return xp.take(xp.table(E4M3_TABLE, data), xp.view(data, "U8"))


# ------------------------------------------------------------ block helpers

def amax_blocks(xp, x: Array, br: int, bc: int) -> Array:
    """max |x| over each br x bc block of the last two dims (edge blocks partial)."""
    *lead, rows, cols = x.shape
    nr, nc = ceil_div(rows, br), ceil_div(cols, bc)
    a = xp.abs(x)
    if (nr * br, nc * bc) != (rows, cols):
        a = xp.pad2(a, nr * br, nc * bc)  # zero padding leaves a max of |x| unchanged
    return xp.amax(a.reshape(*lead, nr, br, nc, bc), (-3, -1))


def expand_blocks(xp, s: Array, br: int, bc: int, rows: int, cols: int) -> Array:
    """Block scale [..., nr, nc] -> one value per element [..., rows, cols]."""
    if br > 1:
        s = xp.repeat(s, br, -2)
    if bc > 1:
        s = xp.repeat(s, bc, -1)
    return s[..., :rows, :cols]


def _blocked(x: Array, br: int, bc: int) -> Array | None:
    *lead, rows, cols = x.shape
    if rows % br or cols % bc:
        return None
    return x.reshape(*lead, rows // br, br, cols // bc, bc)


def divide_blocks(xp, x: Array, s: Array, br: int, bc: int) -> Array:
    v = _blocked(x, br, bc)
    if v is None:
        return x / expand_blocks(xp, s, br, bc, *x.shape[-2:])
    return (v / s[..., :, None, :, None]).reshape(tuple(x.shape))


def multiply_blocks(xp, x: Array, s: Array, br: int, bc: int) -> Array:
    v = _blocked(x, br, bc)
    if v is None:
        return xp.mul_(x, expand_blocks(xp, s, br, bc, *x.shape[-2:]))
    return xp.mul_(v, s[..., :, None, :, None]).reshape(tuple(x.shape))


def div_const(xp, a: Array, c: float) -> Array:
    """a / c, correctly rounded on every device.

    CUDA torch turns ``tensor / python_number`` into a multiply by the
    reciprocal (one ulp off); a divisor tensor on the same device is divided."""
    return a / xp.scalar(c, a)


def nonzero(xp, s: Array) -> Array:
    """Scale safe to divide by: an all-zero block quantizes to zeros."""
    return xp.where(s == 0, 1.0, s)


def store_scale(s: Array, kind: str) -> Array:
    """Canonical [..., nr, nc] scale -> the shape the layout writes."""
    if kind == L.SCALAR:
        return s.reshape(())
    if kind == L.ONE:
        return s.reshape((1,))
    return s


def load_scale(s: Array, kind: str, rows: int) -> Array:
    """Stored scale -> canonical [..., nr, nc]."""
    if kind in (L.SCALAR, L.ONE):
        return s.reshape((1, 1))
    if kind == L.COLUMN:
        return s.reshape((rows, 1))
    return s


# ----------------------------------------------------------------- quantize

def quantize(xp, lay: L.PackLayout, w: Array, opt: Options) -> dict[str, Array]:
    x = xp.f32(w)
    if x.ndim < 2:
        raise ValueError(f"quantize needs a weight of 2 or more dims, got shape {tuple(x.shape)}")
    if lay.scale_shape in (L.SCALAR, L.ONE, L.COLUMN) and x.ndim != 2:
        raise ValueError(f"{lay.format} needs a 2-D weight, got shape {tuple(x.shape)}")
    br, bc = resolve_block(lay, opt, *x.shape[-2:])
    if lay.format in (FP8_TENSOR, FP8_CHANNEL, FP8_BLOCK):
        return _quantize_fp8(xp, lay, x, br, bc, opt)
    if lay.format == NVFP4:
        return _quantize_nvfp4(xp, lay, x, opt)
    if lay.format in (MXFP4, MXFP8):
        return _quantize_mx(xp, lay, x, opt)
    if lay.format == INT4_GROUP:
        return _quantize_int4(xp, lay, x, bc, opt)
    raise ValueError(f"no quantizer for format {lay.format!r}")


def _scale_name(lay: L.PackLayout, opt: Options) -> str:
    return opt.scale_name or lay.scale[0]


def _quantize_fp8(xp, lay, x, br, bc, opt) -> dict[str, Array]:
    amax = amax_blocks(xp, x, br, bc)
    sdtype = opt.scale_dtype or lay.scale_dtype
    t = div_const(xp, amax, E4M3_MAX)
    if sdtype in E8M0_DTYPES:  # DeepSeek-V4 ue8m0: power-of-two block scales
        codes = e8m0_codes(xp, t, "ceil")
        stored, s = xp.view(codes, sdtype), decode_e8m0(xp, codes)
    elif sdtype in FLOAT_SCALE_DTYPES:
        stored = xp.cast(t, sdtype)
        s = xp.f32(stored)
    else:
        raise ValueError(f"fp8 scale dtype must be one of {FLOAT_SCALE_DTYPES + E8M0_DTYPES}")
    q = cast_e4m3(xp, divide_blocks(xp, x, nonzero(xp, s), br, bc))
    out = {lay.weight: q, _scale_name(lay, opt): store_scale(stored, lay.scale_shape)}
    if lay.input_scale and opt.input_amax is not None:
        out[lay.input_scale] = _per_tensor(xp, opt.input_amax / E4M3_MAX, lay.input_shape, x)
    return out


def _per_tensor(xp, value: float | Array, kind: str, like: Array) -> Array:
    v = xp.scalar(value, like) if isinstance(value, float) else xp.f32(value)
    return store_scale(v.reshape((1, 1)), kind)


def _quantize_nvfp4(xp, lay, x, opt) -> dict[str, Array]:
    amax = xp.amax(xp.abs(x))
    block_amax = amax_blocks(xp, x, 1, 16)
    if lay.global_reciprocal:
        # compressed-tensors: global = 448*6 / amax, block = global * amax_b / 6
        # rounded to E4M3, zero blocks get E4M3's eps 0.125; W = q * (block / global).
        tiny = float(np.finfo(np.float32).tiny)
        g = xp.scalar(NVFP4_GLOBAL, x) / xp.where(amax < tiny, tiny, amax)
        g = xp.where(xp.isnan(g) | (g == float("inf")), 1.0, g)
        sb = cast_e4m3(xp, g * div_const(xp, block_amax, E2M1_MAX))
        s = xp.f32(sb)
        s = xp.where(s == 0, 0.125, s)
        sb = xp.cast(s, "F8_E4M3")
        eff = s / g
    else:
        # ModelOpt: scale_2 = amax / (6*448), block = (amax_b / 6) / scale_2 in E4M3;
        # W = q * block * scale_2.
        g = div_const(xp, amax, NVFP4_GLOBAL)
        sb = cast_e4m3(xp, nonzero(xp, div_const(xp, block_amax, E2M1_MAX) / nonzero(xp, g)))
        eff = xp.f32(sb) * g
    codes = e2m1_codes(xp, divide_blocks(xp, x, nonzero(xp, eff), 1, 16))
    out = {
        lay.weight: _as_weight_dtype(xp, pack_fp4(xp, codes), lay, opt),
        _scale_name(lay, opt): sb,
        lay.global_scale: store_scale(g.reshape((1, 1)), lay.global_shape),
    }
    if opt.input_amax is not None:
        value = (NVFP4_GLOBAL / opt.input_amax if lay.global_reciprocal
                 else opt.input_amax / NVFP4_GLOBAL)
        out[lay.input_scale] = _per_tensor(xp, float(np.float32(value)), lay.input_shape, x)
    return out


def _as_weight_dtype(xp, packed_u8: Array, lay, opt) -> Array:
    dtype = opt.weight_dtype or lay.weight_dtype
    if dtype not in ("U8", "I8"):
        raise ValueError(f"packed FP4 is stored as U8 or I8, not {dtype}")
    return xp.view(packed_u8, dtype)


def mx_scale_codes(xp, block_amax: Array, rule: str, elem_max: float, emax: int) -> Array:
    """E8M0 shared exponents for MX blocks, by each producer's rule.

    "ceil": 2**ceil(log2(amax / elem_max)) -- no element clips (DeepSeek, gpt-oss).
    "floor": 2**(floor(log2 amax) - emax) -- OCP MX v1.0; up to ~2x clipping at 6.
    "compressed-tensors": round amax up to a power of two once its mantissa is
    >= 1.75 (their round_to_power_2), then subtract emax.
    """
    if rule == "ceil":
        return e8m0_codes(xp, div_const(xp, block_amax, elem_max), "ceil")
    bits = xp.view(block_amax, "I32")
    if rule == "compressed-tensors":
        bits = (bits + (1 << 21)) & -(1 << 23)  # mask = sign + exponent bits
    elif rule != "floor":
        raise ValueError(f"unknown MX scale rule {rule!r}; one of {MX_RULES}")
    biased = (bits >> 23) & 0xFF
    return xp.cast(xp.clip(biased - emax, 0, 254), "U8")


def _quantize_mx(xp, lay, x, opt) -> dict[str, Array]:
    elem_max, emax = (E2M1_MAX, 2) if lay.format == MXFP4 else (E4M3_MAX, 8)
    rule = opt.scale_rule or ("compressed-tensors" if lay.convention == COMPRESSED_TENSORS
                              else "ceil")
    codes = mx_scale_codes(xp, amax_blocks(xp, x, 1, 32), rule, elem_max, emax)
    scaled = divide_blocks(xp, x, decode_e8m0(xp, codes), 1, 32)
    sdtype = opt.scale_dtype or lay.scale_dtype
    if sdtype not in E8M0_DTYPES:
        raise ValueError(f"MX scales are stored as {' or '.join(E8M0_DTYPES)}, not {sdtype}")
    if lay.format == MXFP8:
        weight = cast_e4m3(xp, scaled)
    else:
        weight = pack_fp4(xp, e2m1_codes(xp, scaled))
        if lay.packing == L.FP4_GPT_OSS:
            if x.shape[-1] % 32:
                raise ValueError(f"gpt-oss blocks need an input dim divisible by 32, "
                                 f"got {x.shape[-1]}")
            weight = weight.reshape(*weight.shape[:-1], weight.shape[-1] // 16, 16)
        weight = _as_weight_dtype(xp, weight, lay, opt)
    return {lay.weight: weight, _scale_name(lay, opt): xp.view(codes, sdtype)}


def _quantize_int4(xp, lay, x, g: int, opt) -> dict[str, Array]:
    """Symmetric int4 groups along the input dim: q = round(x / s), s = amax / 7.5.

    7.5 is compressed-tensors' (and GPTQ's) choice: the range [-8, 7] spans 15 steps.
    """
    if x.ndim != 2:
        raise ValueError(f"int4 group quantization needs a 2-D weight, got {tuple(x.shape)}")
    rows, cols = x.shape
    sdtype = opt.scale_dtype or lay.scale_dtype
    if sdtype not in FLOAT_SCALE_DTYPES:
        raise ValueError(f"int4 scales are stored as one of {FLOAT_SCALE_DTYPES}")
    stored = xp.cast(div_const(xp, amax_blocks(xp, x, 1, g), 7.5), sdtype)
    s = xp.f32(stored)
    s = xp.where(s == 0, _EPS[sdtype], s)  # compressed-tensors' zero-scale guard
    stored = xp.cast(s, sdtype)
    q = xp.clip(xp.rint(divide_blocks(xp, x, s, 1, g)), -8, 7)
    u = xp.cast(q + 8, "I64")  # unsigned nibble, offset 8 (= the symmetric zero point)
    scale_name = _scale_name(lay, opt)
    if lay.packing == L.INT4_ROWS:
        shape = xp.arange(2, "I64", like=x) * (cols - rows) + rows  # [rows, cols]
        return {lay.weight: pack_int4(xp, u), scale_name: stored, "weight_shape": shape}
    # GPTQ: transposed, packed along the input dim; zeros packed along the output dim.
    if cols % g or cols % 8 or rows % 8:
        raise ValueError(f"GPTQ needs in % group, in % 8 and out % 8 == 0; got [{rows}, {cols}]"
                         f" with group {g}")
    zero = 8 if opt.gptq_v2 else 7  # v1 stores zero - 1
    zeros = xp.full((cols // g, rows), zero, "I64", like=x)
    g_idx = xp.cast(xp.arange(cols, "I64", like=x) // g, "I32")
    return {lay.weight: _contiguous(xp, pack_int4(xp, u).T),
            scale_name: _contiguous(xp, stored.T), "qzeros": pack_int4(xp, zeros), "g_idx": g_idx}


def pack_int4(xp, u: Array) -> Array:
    """[..., R, C] nibbles (int64 0..15) -> int32 [..., R, ceil(C/8)], low bits first."""
    cols = u.shape[-1]
    padded = ceil_div(cols, 8) * 8
    if padded != cols:
        u = xp.pad2(u, u.shape[-2], padded)
    u = u.reshape(*u.shape[:-1], padded // 8, 8)
    word = u[..., 0]
    for i in range(1, 8):
        word = word | (u[..., i] << (4 * i))
    word = word - ((word >> 31) << 32)  # to signed 32-bit, two's complement
    return xp.cast(word, "I32")


def unpack_int4(xp, words: Array, cols: int) -> Array:
    """int32 [..., R, W] -> int32 nibbles [..., R, cols] (0..15), low bits first.

    The arithmetic shift of a negative word is masked to 4 bits, so int32 does."""
    w = xp.cast(words, "I32")
    shifts = xp.arange(8, "I32", like=w) * 4
    nibbles = (w[..., None] >> shifts) & 0xF
    return nibbles.reshape(*w.shape[:-1], w.shape[-1] * 8)[..., :cols]


# --------------------------------------------------------------- dequantize

@dataclass
class Decoded:
    """A dequantization split in two: small scale work first, then the big decode-and-scale.

    One-byte scales (E8M0, E4M3) stay bytes: ``table`` maps each byte to its
    effective float32 scale (the global scale already applied, 256 operations),
    so the large pass gathers from a 256-entry table. Float scales are cast.
    """

    elements: Array  # stored weight tensor (bytes/ints), unexpanded
    scale_src: Array  # canonical [..., nr, nc]: scale bytes (with ``table``) or float scales
    table: Array | None
    block: tuple[int, int]
    shape: tuple[int, ...]  # logical [..., R, C]

    def scale(self, xp) -> Array:
        """Effective float32 scale, canonical [..., nr, nc]."""
        if self.table is None:
            return xp.f32(self.scale_src)
        return xp.take(self.table, xp.view(self.scale_src, "U8"))


def _pick(tensors: dict[str, Array], names: tuple[str, ...], what: str, lay) -> Array:
    for n in names:
        if n in tensors:
            return tensors[n]
    raise ValueError(f"{lay.format}/{lay.convention}: no {what} tensor "
                     f"(expected {' or '.join(names)}; got {', '.join(sorted(tensors)) or 'none'})")


def logical_shape(xp, lay: L.PackLayout, tensors: dict[str, Array]) -> tuple[int, ...]:
    w = _pick(tensors, (lay.weight,), "weight", lay)
    shape = tuple(w.shape)
    if lay.packing == L.FP4:
        return (*shape[:-1], shape[-1] * 2)
    if lay.packing == L.FP4_GPT_OSS:
        return (*shape[:-2], shape[-2] * 32)
    if lay.packing == L.INT4_ROWS:
        ws = _pick(tensors, ("weight_shape",), "weight_shape", lay)
        return tuple(int(v) for v in (ws.tolist() if hasattr(ws, "tolist") else ws))
    if lay.packing == L.INT4_GPTQ:
        return (shape[1], shape[0] * 8)
    return shape


def decode_scale(xp, lay: L.PackLayout, tensors: dict[str, Array], opt: Options,
                 shape: tuple[int, ...]) -> tuple[Array, Array | None, tuple[int, int]]:
    """The scale in canonical form (bytes + per-byte table, or floats) and its block."""
    names = (opt.scale_name,) if opt.scale_name else lay.scale
    raw = _pick(tensors, names, "scale", lay)
    dtype = xp.dtype(raw)
    table = None
    if dtype == "F8_E8M0" or (dtype == "U8" and (lay.e8m0_scale or lay.format == FP8_BLOCK)):
        table = xp.table(E8M0_TABLE, raw)
    elif dtype == "F8_E4M3":
        table = xp.table(E4M3_TABLE, raw)
    elif dtype not in FLOAT_SCALE_DTYPES:
        raise ValueError(f"{lay.format}/{lay.convention}: scale dtype {dtype} is not a scale")
    rows, cols = shape[-2:]
    src = load_scale(xp.view(raw, "U8") if table is not None else raw, lay.scale_shape, rows)
    br, bc = resolve_block(lay, opt, rows, cols)
    want = (*shape[:-2], ceil_div(rows, br), ceil_div(cols, bc))
    if tuple(src.shape) != want:
        raise ValueError(f"{lay.format}/{lay.convention}: scale shape {tuple(src.shape)} does not "
                         f"match weight {shape} in {br}x{bc} blocks (expected {want})")
    if lay.global_scale:
        g = xp.f32(_pick(tensors, (lay.global_scale,), "global scale", lay)).reshape((1,))
        if table is None:
            src = xp.f32(src)
            src = src / g if lay.global_reciprocal else src * g
        else:  # same f32 operation per scale byte as per scale element
            table = table / g if lay.global_reciprocal else table * g
    return src, table, (br, bc)


def decode(xp, lay: L.PackLayout, tensors: dict[str, Array], opt: Options) -> Decoded:
    shape = logical_shape(xp, lay, tensors)
    src, table, block = decode_scale(xp, lay, tensors, opt, shape)
    return Decoded(tensors[lay.weight], src, table, block, shape)


def element_values(xp, lay: L.PackLayout, elements: Array, shape: tuple[int, ...],
                   out: Array | None = None) -> Array:
    """Stored elements -> float32 values before scaling, logical shape.

    ``out`` (numpy): a float32 array of ``shape`` to decode into.
    """
    if lay.packing in (L.FP4, L.FP4_GPT_OSS):
        packed = elements.reshape(*shape[:-1], shape[-1] // 2)
        return fp4_values(xp, packed, out).reshape(shape)
    if lay.packing == L.INT4_ROWS:  # int32 words are little-endian bytes of nibble pairs
        if xp.name != "numpy":
            return xp.f32(unpack_int4(xp, elements, shape[-1]) - 8)
        words = xp.view(elements, "U8")
        full = words.shape[-1] * 2
        values = _pair_values(xp, INT4_PAIR64, words, out if full == shape[-1] else None)
        return values[..., : shape[-1]]
    if xp.dtype(elements) == "F8_E4M3":
        if xp.name != "numpy":  # the cast is exact; cheaper than a gather on a GPU
            return xp.f32(elements)
        return xp.take(xp.table(E4M3_TABLE, elements), xp.view(elements, "U8"), out=out)
    raise ValueError(f"{lay.format}/{lay.convention}: cannot decode elements of dtype "
                     f"{xp.dtype(elements)}")


def expand_multiply(xp, lay: L.PackLayout, d: Decoded, out: Array | None = None) -> Array:
    """The bandwidth-bound part: decode every element and apply its block scale."""
    values = element_values(xp, lay, d.elements, d.shape, out)
    return multiply_blocks(xp, values, d.scale(xp), *d.block)


CHUNK_BYTES = 1024 * 1024  # float32 output per step: stays in L2 between decode and scale
FUSED_CHUNK_BYTES = 2 * 1024 * 1024  # output per step of the one-gather FP4 kernel (measured best)
FUSED_MIN_BYTES = 1 << 17  # stored FP4 bytes from which its 65536-entry table pays off (measured)
TENSOR_FOLD_MIN_BYTES = 1 << 21  # FP8 elements from which a scaled pair table beats a scalar multiply


def _out_array(shape: tuple[int, ...], out: np.ndarray | None) -> np.ndarray:
    if out is None:
        return np.empty(shape, np.float32)
    if out.shape != tuple(shape) or out.dtype != np.float32 or not out.flags.c_contiguous:
        raise ValueError(f"out must be a C-contiguous float32 array of shape {shape}")
    return out


def expand_multiply_chunked(xp, lay: L.PackLayout, d: Decoded, out: Array | None = None) -> Array:
    """numpy: ``expand_multiply`` over row chunks, each decoded and scaled while in cache.

    Per element the same float32 operations as ``expand_multiply`` (an exact
    decode, then one multiply by the block scale), so the same bits; only the
    passes differ (``_numpy_kernels``). ``out``: a float32 C-contiguous array of
    the logical shape to write into (reusing one spares the page faults of a
    fresh allocation).
    """
    *lead, rows, cols = d.shape
    br, bc = d.block
    out = _out_array(tuple(d.shape), out)
    n_lead = int(np.prod(lead)) if lead else 1
    o = out.reshape(n_lead, rows, cols)
    # the gathers view byte pairs as uint16: a strided view (a slice of a wider array) is copied
    e = np.ascontiguousarray(d.elements).reshape(n_lead, rows, -1)
    fused = _byte_scale_kernel(lay, d, e, cols)
    if fused is not None:  # one scale row per weight row (br == 1)
        kernel, step = fused
        sc = xp.view(d.scale_src, "U8").reshape(n_lead, rows, -1)
        for i in range(n_lead):
            for r0 in range(0, rows, step):
                kernel(e[i, r0:r0 + step], sc[i, r0:r0 + step], o[i, r0:r0 + step])
        return out
    scale = d.scale(xp)
    nr, nc = scale.shape[-2:]
    if scale.size == 1 and _e4m3_pairs(lay, e, cols) and e.size >= TENSOR_FOLD_MIN_BYTES:
        kernel = K.e4m3_tensor_scaled(scale.reshape(()))  # FP8 per-tensor: the scale in the table
        step = max(1, CHUNK_BYTES // (4 * cols))
        for i in range(n_lead):
            for r0 in range(0, rows, step):
                kernel(e[i, r0:r0 + step], None, o[i, r0:r0 + step])
        return out
    sc = scale.reshape(n_lead, nr, nc)
    step = max(1, CHUNK_BYTES // (4 * cols))
    if nr > 1:  # chunks hold whole block rows
        step = max(br, step // br * br)
    decode_into = _numpy_decoder(lay, e.dtype, e.shape[-1], cols)
    for i in range(n_lead):
        for r0 in range(0, rows, step):
            r1 = min(rows, r0 + step)
            oc = o[i, r0:r1]
            s = sc[i] if nr == 1 else sc[i, r0 // br: ceil_div(r1, br)]
            if decode_into is None:  # general path (partial int4 words)
                chunk = Decoded(e[i, r0:r1], s, None, (min(br, r1 - r0), bc), (r1 - r0, cols))
                oc[...] = expand_multiply(xp, lay, chunk)
                continue
            decode_into(e[i, r0:r1], oc)
            _scale_rows(xp, oc, s, min(br, r1 - r0), bc)
    return out


def _byte_scale_kernel(lay: L.PackLayout, d: Decoded, e: np.ndarray, cols: int):
    """(kernel, rows per chunk) for one-byte scales over whole single-row blocks, or None.

    Packed FP4 (NVFP4, MXFP4): one gather per byte from a (scale, byte) table;
    E4M3 (MXFP8): pair gather, then the scales expanded by a gather.
    """
    br, bc = d.block
    if d.table is None or br != 1 or cols % bc or bc % 2:
        return None
    if lay.packing in (L.FP4, L.FP4_GPT_OSS) and e.size >= FUSED_MIN_BYTES:
        step = max(1, min(e.shape[1], FUSED_CHUNK_BYTES // (4 * cols)))
        return K.fp4_byte_scaled(d.table, bc, step, cols), step
    if _e4m3_pairs(lay, e, cols):
        step = max(1, min(e.shape[1], CHUNK_BYTES // (4 * cols)))
        return K.e4m3_byte_scaled(d.table, bc, step, cols), step
    return None


def _e4m3_pairs(lay: L.PackLayout, e: np.ndarray, cols: int) -> bool:
    """One-byte elements in rows of even length: decoded two per gather."""
    return lay.packing == L.NONE and e.dtype.itemsize == 1 and cols % 2 == 0


def _numpy_decoder(lay: L.PackLayout, dtype: np.dtype, stored_cols: int, cols: int):
    """One gather that writes a chunk's float32 values straight into the output rows."""
    if lay.packing in (L.FP4, L.FP4_GPT_OSS):
        table = FP4_PAIR64
    elif lay.packing == L.INT4_ROWS and stored_cols * 8 == cols:
        table = INT4_PAIR64
    elif lay.packing == L.NONE and dtype.itemsize == 1 and cols % 2 == 0:
        # two E4M3 bytes per gather: a 65536-entry table of float32 pairs (see _e4m3_pairs)
        return lambda src, dst: np.take(E4M3_PAIR64, src.view(np.uint16), out=dst.view(np.int64),
                                        mode="wrap")
    elif lay.packing == L.NONE and dtype.itemsize == 1:
        return lambda src, dst: np.take(E4M3_TABLE, src.view(np.uint8), out=dst, mode="wrap")
    else:
        return None
    return lambda src, dst: np.take(table, src.view(np.uint8), out=dst.view(np.int64),
                                    mode="wrap")


def _scale_rows(xp, o: Array, s: Array, br: int, bc: int) -> None:
    """o *= expand(s) in place, in the cheapest broadcast form that fits."""
    rows, cols = o.shape
    if s.size == 1:
        np.multiply(o, s.reshape(()), out=o)
    elif br == 1 and cols % bc == 0:
        v = o.reshape(rows, cols // bc, bc)
        np.multiply(v, s[..., None], out=v)
    elif rows % br == 0 and cols % bc == 0:
        v = o.reshape(rows // br, br, cols // bc, bc)
        np.multiply(v, s[:, None, :, None], out=v)
    else:
        np.multiply(o, expand_blocks(xp, s, br, bc, rows, cols), out=o)


def dequantize(xp, lay: L.PackLayout, tensors: dict[str, Array], opt: Options,
               out: Array | None = None) -> Array:
    if lay.packing == L.INT4_GPTQ:
        return _dequantize_gptq(xp, lay, tensors, opt, out)
    if lay.format == INT4_GROUP and "weight_zero_point" in tensors:
        raise ValueError("asymmetric int4 (weight_zero_point) is not supported")
    d = decode(xp, lay, tensors, opt)
    if xp.name == "numpy":
        with np.errstate(over="ignore"):  # E8M0 2**127 times 2 or more is inf: the format's value
            return expand_multiply_chunked(xp, lay, d, out)
    return expand_multiply(xp, lay, d)


def _dequantize_gptq(xp, lay: L.PackLayout, tensors: dict[str, Array], opt: Options,
                     out: Array | None = None) -> Array:
    """W[o, i] = (q[i, o] - z[g(i), o]) * s[g(i), o]; v1 checkpoints store z - 1."""
    qweight = _pick(tensors, (lay.weight,), "qweight", lay)
    rows = qweight.shape[1]
    cols = qweight.shape[0] * 8
    scales = xp.f32(_pick(tensors, (opt.scale_name,) if opt.scale_name else lay.scale,
                          "scales", lay))
    codes = unpack_int4(xp, _pick(tensors, ("qzeros",), "qzeros", lay), rows)
    zeros = xp.f32(codes) - (8.0 if opt.gptq_v2 else 7.0)  # (z - 8); v1 stores z - 1
    n_groups = scales.shape[0]
    g = cols // n_groups
    if "g_idx" in tensors:
        g_idx = xp.cast(tensors["g_idx"], "I64")
    else:
        g_idx = xp.arange(cols, "I64", like=qweight) // (opt.group_size or g)
    if (xp.name == "numpy" and g * n_groups == cols
            and np.array_equal(g_idx, np.arange(cols) // g)):
        return K.gptq_rows(qweight, codes, 8.0 if opt.gptq_v2 else 7.0, scales, g,
                           _out_array((rows, cols), out), CHUNK_BYTES)
    # int32 words along the input dim are little-endian bytes of nibble pairs (q - 8).
    q = _pair_values(xp, INT4_PAIR64, xp.view(qweight, "U8"), None)  # [in/8, out * 8]
    q = q.reshape(cols // 8, rows, 8).swapaxes(1, 2).reshape(cols, rows)  # [in, out]
    wt = (q - zeros[g_idx]) * scales[g_idx]
    result = _contiguous(xp, wt.T)
    if out is not None:
        out[...] = result
        return out
    return result


def _contiguous(xp, a: Array) -> Array:
    return np.ascontiguousarray(a) if xp.name == "numpy" else a.contiguous()
