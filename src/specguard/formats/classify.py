"""Classify each module from names, dtypes and shapes alone (no config, no bytes).

Each rule reads the shapes the producers write (docs/formats.md): the group size is
the reduction dim divided by the scale's last dim, the FP8 block the smallest
power of two that tiles the weight into the scale's grid. Where the header
cannot decide (a U8 scale may hold E8M0 or E4M3 bytes) the answer is
``ambiguous`` and the content sniffer settles it later.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from specguard.checkpoint.dtypes import FLOAT8, FLOAT_HIGH
from specguard.checkpoint.header import TensorInfo
from specguard.formats import families as fam
from specguard.formats import scheme as s
from specguard.formats.families import ratio as _ratio
from specguard.formats.modules import QUANT_PARAMS, STACKED_EXPERT_PARAMS
from specguard.formats.scheme import Scheme
from specguard.formats.specs import FormatSpec, identify

Params = Mapping[str, TensorInfo]
PLAIN_DTYPES = {"BF16": s.BF16, "F16": s.FP16, "F32": s.FP32, "F64": s.FP32}


@dataclass(frozen=True, slots=True)
class Classified:
    """A module's stored scheme and the tensors that scheme needs but the disk lacks."""

    scheme: Scheme
    missing: tuple[str, ...] = ()


def classify_params(params: Params) -> Classified:
    """The stored scheme of one module, given its tensors keyed by parameter suffix."""
    if "blocks" in params:
        return _gpt_oss(params)
    if "weight_packed" in params:
        return _compressed_packed(params)
    if "qweight" in params:
        return _gptq_or_awq(params)
    wrapped = _wrapped(params)
    if wrapped is not None:
        return Classified(wrapped)
    w = params.get("weight")
    if w is None:
        return _weightless(params)
    if w.dtype == "I32":
        return Classified(fam.quark_int(w, params))
    if w.dtype in FLOAT_HIGH:
        extra = sorted(set(params) & QUANT_PARAMS)
        if extra:
            return _unknown(f"{w.dtype} weight next to scale tensors {', '.join(extra)}")
        return Classified(Scheme(PLAIN_DTYPES[w.dtype], s.PLAIN, weight_dtype=w.dtype))
    if w.dtype in FLOAT8:
        return _fp8(w, params)
    if w.dtype in ("U8", "I8", "F4"):
        return _byte_weight(w, params)
    return _unknown(f"no rule for a {w.dtype} weight")


def _wrapped(params: Params) -> Scheme | None:
    """Stacks with their own tensor names around the weight (formats/families.py)."""
    if fam.is_bnb4(params):
        return fam.bnb4(params)
    if fam.is_quanto(params):
        return fam.quanto(params)
    if "_weight_qdata" in params:
        return fam.torchao(params)
    if "SCB" in params and "weight" in params:
        return fam.bnb_int8(params["weight"], params["SCB"])
    return None


def _unknown(reason: str) -> Classified:
    return Classified(fam.unknown(reason))


def _inner(t: TensorInfo) -> int:
    """The last (reduction) dimension; a 0-d tensor, which safetensors accepts, holds one element."""
    return t.shape[-1] if t.shape else 1


def _scale_of(params: Params) -> tuple[str, TensorInfo | None]:
    """The scale tensor's parameter name and info ("", None: no scale tensor)."""
    for key in ("weight_scale_inv", "weight_scale", "scale"):
        if key in params:
            return key, params[key]
    return "", None


def _weightless(params: Params) -> Classified:
    if params.keys() <= {"k_scale", "v_scale", "q_scale"}:
        return Classified(Scheme(s.FP8_KV, reason="attention cache scales"))
    if params.keys() <= STACKED_EXPERT_PARAMS:  # transformers 5 fused experts: plain 3-D parameters
        dtypes = {p.dtype for p in params.values()}
        if len(dtypes) == 1 and next(iter(dtypes)) in PLAIN_DTYPES:
            dtype = next(iter(dtypes))
            return Classified(Scheme(PLAIN_DTYPES[dtype], s.PLAIN, weight_dtype=dtype))
        return _unknown(f"fused expert parameters stored as {', '.join(sorted(dtypes))}")
    t = params.get("")
    if t is not None and t.dtype in PLAIN_DTYPES:
        return Classified(Scheme(PLAIN_DTYPES[t.dtype], s.PLAIN, weight_dtype=t.dtype))
    if t is not None:
        return Classified(Scheme(s.PLAIN_TENSOR, s.PLAIN, weight_dtype=t.dtype))
    return _unknown(f"no weight tensor (has {', '.join(sorted(params))})")


def _fp8(w: TensorInfo, params: Params) -> Classified:
    key, sc = _scale_of(params)
    if sc is None:
        return _unknown(f"{w.dtype} weight without a scale tensor")
    conv = {"weight_scale_inv": s.DEEPSEEK, "scale": s.DEEPSEEK}.get(key)
    out, inp = w.shape[-2:] if len(w.shape) >= 2 else (w.numel, 1)
    lead = len(w.shape) - 2
    if sc.numel == 1 or (lead > 0 and sc.shape in (w.shape[:lead], (*w.shape[:lead], 1))):
        readings: tuple[Scheme, ...] = ()
        bo, bi = _block(out, 1), _block(inp, 1)
        if len(sc.shape) - lead == 2 and bo and bi:  # [.., 1, 1]: also one block covering the whole weight
            readings = (Scheme(s.FP8_BLOCK, conv, block=(bo, bi), scale_dtype=sc.dtype, weight_dtype=w.dtype),)
        return Classified(Scheme(s.FP8_TENSOR, conv, scale_dtype=sc.dtype, weight_dtype=w.dtype,
                                 readings=readings))
    tail = sc.shape[lead:]
    if len(tail) == 4 and tail[1] == 1 and tail[3] == 1:  # ModelOpt FP8_2D_BLOCKWISE: [rows, 1, cols, 1]
        tail = (tail[0], tail[2])
    if tail in ((out,), (out, 1)):
        return Classified(Scheme(s.FP8_CHANNEL, conv, scale_dtype=sc.dtype, weight_dtype=w.dtype))
    if len(tail) == 2 and tail[0] == out:
        group = _ratio(inp, tail[1])
        spec, _ = identify(_dtypes(params), key, group)
        if spec is not None:
            return Classified(Scheme(spec.format, conv, group_size=group, scale_dtype=sc.dtype, weight_dtype=w.dtype))
    if len(tail) == 2:
        block = (_block(out, tail[0]), _block(inp, tail[1]))
        if None not in block:
            return Classified(Scheme(
                s.FP8_BLOCK, conv, block=block, scale_dtype=sc.dtype, weight_dtype=w.dtype  # type: ignore[arg-type]
            ))
    return _unknown(f"{w.dtype} weight {list(w.shape)} with {key} {list(sc.shape)} fits no FP8 layout")


def _block(dim: int, cells: int) -> int | None:
    """Smallest power of two b with ceil(dim / b) == cells (edge blocks allowed)."""
    b = 1
    while b <= max(dim, 1) * 2:
        if -(-dim // b) == cells:
            return b
        b *= 2
    return None


def _byte_weight(w: TensorInfo, params: Params) -> Classified:
    """U8/I8 (packed FP4 or int8) and F4 weights: the FP4 formats their specs identify."""
    key, sc = _scale_of(params)
    if sc is None:
        return _unknown(f"{w.dtype} weight without a scale tensor")
    if sc.dtype in FLOAT_HIGH:
        return _int_with_float_scale(w, sc, params)
    inp = _inner(w) * (1 if w.dtype == "F4" else 2)
    group = _ratio(inp, sc.shape[-1]) if sc.shape else None
    spec, settled = identify(_dtypes(params), key, group)
    if spec is None:
        return _unknown(f"{w.dtype} weight {list(w.shape)} with {sc.dtype} {key} {list(sc.shape)} fits no FP4 layout")
    if not settled:
        return Classified(Scheme(
            s.AMBIGUOUS, s.DEEPSEEK if key == "scale" else None, group_size=group,
            scale_dtype=sc.dtype, weight_dtype=w.dtype,
            reason=f"U8 {key} may hold E8M0 (mxfp4) or E4M3 (nvfp4) bytes; group {group} suggests {spec.format}",
        ))
    return _of_spec(spec, w, sc, params, group)


def _dtypes(params: Params) -> dict[str, str]:
    return {k: t.dtype for k, t in params.items()}


def _of_spec(spec: FormatSpec, w: TensorInfo, sc: TensorInfo, params: Params, group: int | None) -> Classified:
    """The scheme a spec names, with the companions its convention stores that the module lacks."""
    assert spec.identity is not None
    missing = tuple(p for p in spec.identity.companions if p not in params)
    return Classified(Scheme(spec.format, spec.convention, group_size=group, scale_dtype=sc.dtype,
                             weight_dtype=w.dtype), missing)


def _int_with_float_scale(w: TensorInfo, sc: TensorInfo, params: Params) -> Classified:
    """I8 weight = int8 (channel or group); U8 weight = ModelOpt INT4 (AWQ) packed pairs."""
    if w.dtype == "I8":
        inp = _inner(w)
        zp = "weight_zero_point" in params or None
        if sc.numel == 1:  # one scale: per-tensor (Quark int8 writes a 0-D weight_scale)
            return Classified(Scheme(s.INT8_TENSOR, scale_dtype=sc.dtype, weight_dtype=w.dtype, zero_points=zp))
        cols = sc.shape[-1] if len(sc.shape) >= 2 else 1
        if cols == 1:
            return Classified(Scheme(s.INT8_CHANNEL, scale_dtype=sc.dtype, weight_dtype=w.dtype, zero_points=zp))
        return Classified(Scheme(
            s.INT8_GROUP, group_size=_ratio(inp, cols), scale_dtype=sc.dtype, weight_dtype=w.dtype
        ))
    if w.dtype == "U8" and len(w.shape) == 2 and len(sc.shape) == 2:
        conv = s.MODELOPT if "pre_quant_scale" in params else None
        if sc.shape[0] == 2 * w.shape[0]:  # ModelOpt packs INT4 along the output dim
            return Classified(Scheme(
                s.INT4_GROUP, conv, group_size=_ratio(w.shape[1], sc.shape[1]),
                scale_dtype=sc.dtype, weight_dtype=w.dtype, pack_axis=0,
            ))
        if sc.shape[0] == w.shape[0]:
            return Classified(Scheme(
                s.INT4_GROUP, conv, group_size=_ratio(2 * w.shape[1], sc.shape[1]),
                scale_dtype=sc.dtype, weight_dtype=w.dtype, pack_axis=1,
            ))
    return _unknown(f"{w.dtype} weight {list(w.shape)} with {sc.dtype} scale {list(sc.shape)}")


def _compressed_packed(params: Params) -> Classified:
    """compressed-tensors `weight_packed`: nvfp4 / mxfp4 (U8) or pack-quantized ints (I32)."""
    wp = params["weight_packed"]
    sc = params.get("weight_scale")
    if sc is None:
        return _unknown("weight_packed without weight_scale")
    if wp.dtype == "U8":
        group = _ratio(_inner(wp) * 2, sc.shape[-1]) if sc.shape else None
        spec, _ = identify(_dtypes(params), "weight_scale", group)
        if spec is not None:
            return _of_spec(spec, wp, sc, params, group)
    if wp.dtype == "I32":
        return _pack_quantized(wp, sc)
    return _unknown(f"weight_packed {wp.dtype} with weight_scale {sc.dtype} fits no compressed-tensors format")


def _pack_quantized(wp: TensorInfo, sc: TensorInfo) -> Classified:
    """Ints packed 32/bits per I32 along the input dim. The bit width lives in the
    config and in ``weight_shape``'s bytes, not in the header: every width whose
    group size comes out a power of two is a candidate, and more than one makes
    the module ``ambiguous`` until settle.py reads ``weight_shape`` (or the claim)."""
    cols = sc.shape[-1] if len(sc.shape) >= 2 else 1
    found: list[Scheme] = []
    for bits, fmt in ((4, s.INT4_GROUP), (8, s.INT8_GROUP)):
        inp = _inner(wp) * 32 // bits
        group = _ratio(inp, cols)
        if group and group & (group - 1) == 0:
            kw = dict(scale_dtype=sc.dtype, weight_dtype=wp.dtype, pack_axis=1)
            if bits == 8 and cols == 1:  # one scale per row: per channel, or one group spanning the row
                found.append(Scheme(s.INT8_CHANNEL, s.COMPRESSED_TENSORS, **kw))  # type: ignore[arg-type]
            found.append(Scheme(fmt, s.COMPRESSED_TENSORS, group_size=group, **kw))  # type: ignore[arg-type]
    if not found:
        return _unknown(f"weight_packed {list(wp.shape)} and weight_scale {list(sc.shape)} give no group size")
    if len(found) == 1 or {c.format for c in found} == {s.INT8_CHANNEL, s.INT8_GROUP}:
        return Classified(found[0])
    fits = " or ".join(c.short() for c in found)
    return Classified(Scheme(
        s.AMBIGUOUS, s.COMPRESSED_TENSORS, scale_dtype=sc.dtype, weight_dtype=wp.dtype, pack_axis=1,
        candidates=tuple(found), reason=f"the bit width is in weight_shape's bytes: {fits}",
    ))


def _gptq_or_awq(params: Params) -> Classified:
    q = params["qweight"]
    sc = params.get("scales")
    if sc is None or len(q.shape) != 2 or len(sc.shape) != 2:
        return _unknown("qweight needs 2-D scales")
    out = sc.shape[1]
    if q.shape[1] == out:  # GPTQ: packed along the input dim
        qz = params.get("qzeros")
        bits = _ratio(qz.shape[1] * 32, out) if qz is not None and len(qz.shape) == 2 else 4
        bits = bits or 4
        inp = q.shape[0] * 32 // bits
        conv, axis = s.GPTQ, 0
    else:  # AWQ GEMM: packed along the output dim
        bits = _ratio(q.shape[1] * 32, out) or 4
        inp = q.shape[0]
        conv, axis = s.AWQ, 1
    fmt = {4: s.INT4_GROUP, 8: s.INT8_GROUP}.get(bits)
    if fmt is None:
        return _unknown(f"{bits}-bit {conv} has no format name")
    return Classified(Scheme(
        fmt, conv, group_size=_ratio(inp, sc.shape[0]), scale_dtype=sc.dtype,
        weight_dtype=q.dtype, pack_axis=axis,
    ))


def _gpt_oss(params: Params) -> Classified:
    b = params["blocks"]
    sc = params.get("scales")
    if sc is None:
        return _unknown("*_blocks without *_scales")
    group = b.shape[-1] * 2 if b.shape and sc.shape == b.shape[:-1] else None
    spec, _ = identify(_dtypes(params), "scales", group)
    if spec is None:
        return _unknown(f"blocks {list(b.shape)} and scales {list(sc.shape)} are not MXFP4 block-32")
    return _of_spec(spec, b, sc, params, group)
