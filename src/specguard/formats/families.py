"""Header rules for the stacks that wrap a weight in their own tensor names.

bitsandbytes (transformers' Params4bit / Int8Params serialization),
optimum-quanto (flattened qtensors), torchao (transformers 5's flattened
tensor subclasses) and AMD Quark's packed int4. Layouts and the producer
versions they were checked against: docs/formats.md.
"""

from __future__ import annotations

from collections.abc import Mapping

from specguard.checkpoint.header import TensorInfo
from specguard.formats import scheme as s
from specguard.formats.scheme import Scheme

Params = Mapping[str, TensorInfo]
BNB_STATE = "weight.quant_state.bitsandbytes__"


def is_bnb4(params: Params) -> bool:
    return "weight.absmax" in params or any(k.startswith(BNB_STATE) for k in params)


def is_quanto(params: Params) -> bool:
    return "weight._data" in params or "weight._data._data" in params


def ratio(num: int, den: int) -> int | None:
    """``num / den`` where it divides exactly (a group size, a block), else None."""
    return num // den if den and num % den == 0 else None


def unknown(reason: str) -> Scheme:
    """A scheme no header rule settles, with the reason."""
    return Scheme(s.UNKNOWN, reason=reason)


def bnb4(params: Params) -> Scheme:
    """Linear4bit: ``weight`` holds two 4-bit codes per byte (any storage dtype),
    ``weight.absmax`` one scale per block; double quant stores absmax as U8 codes
    with ``nested_absmax`` / ``nested_quant_map``. The quant type is the
    ``quant_state.bitsandbytes__<type>`` tensor's name."""
    w, absmax = params.get("weight"), params.get("weight.absmax")
    state = next((k for k in params if k.startswith(BNB_STATE)), None)
    if w is None or absmax is None or state is None:
        return unknown("bitsandbytes 4-bit needs weight, weight.absmax and weight.quant_state.*")
    kind = state.removeprefix(BNB_STATE)
    fmt = {"nf4": s.NF4, "fp4": s.FP4}.get(kind)
    if fmt is None:
        return unknown(f"bitsandbytes quant type {kind!r}")
    nested = "weight.nested_absmax" in params
    return Scheme(
        fmt, s.BITSANDBYTES, group_size=ratio(w.nbytes * 2, absmax.numel), scale_dtype=absmax.dtype,
        weight_dtype=w.dtype, reason="double quant (absmax stored as 8-bit codes)" if nested else None,
    )


def bnb_int8(w: TensorInfo, scb: TensorInfo) -> Scheme:
    """Linear8bitLt: I8 ``weight`` [out, in] and ``SCB`` [out] (absmax per row, /127)."""
    if w.dtype != "I8" or len(w.shape) != 2 or scb.numel != w.shape[0]:
        return unknown(f"SCB {list(scb.shape)} beside a {w.dtype} weight {list(w.shape)}")
    return Scheme(s.INT8_CHANNEL, s.BITSANDBYTES, scale_dtype=scb.dtype, weight_dtype=w.dtype)


def quanto(params: Params) -> Scheme:
    """QBitsTensor (qint4/qint2): the weight grouped along the output axis into
    ``[n_groups, group]`` and packed 8/bits rows per byte row (``_data._data``),
    ``_scale`` and ``_shift`` one per group; QTensor (qint8/qfloat8): ``_data``
    [out, in] with ``_scale`` per output row (or one per tensor)."""
    sc = params.get("weight._scale")
    if sc is None or not sc.shape:
        return unknown("quanto weight without a weight._scale")
    packed = params.get("weight._data._data")
    if packed is not None:
        if len(packed.shape) != 2:
            return unknown(f"quanto packed data {list(packed.shape)}")
        bits = ratio(8 * packed.shape[0], sc.shape[0])
        fmt = {4: s.INT4_GROUP}.get(bits or 0)
        if fmt is None:
            return unknown(f"quanto {bits}-bit weights have no format name")
        return Scheme(fmt, s.QUANTO, group_size=packed.shape[1], scale_dtype=sc.dtype, weight_dtype=packed.dtype,
                      pack_axis=0, zero_points="weight._shift" in params)
    data = params["weight._data"]
    fmts = _PER_ROW.get(data.dtype)
    if fmts is None or len(data.shape) != 2:
        return unknown(f"quanto {data.dtype} data {list(data.shape)}")
    return _per_row(fmts, s.QUANTO, data, sc, zero_points="weight._shift" in params)


# Element dtype -> (per-tensor, per-row, per-group) format.
_PER_ROW: dict[str, tuple[s.Format, s.Format, s.Format | None]] = {
    "I8": (s.INT8_TENSOR, s.INT8_CHANNEL, s.INT8_GROUP),
    "F8_E4M3": (s.FP8_TENSOR, s.FP8_CHANNEL, None),
    "F8_E5M2": (s.FP8_TENSOR, s.FP8_CHANNEL, None),
}


def torchao(params: Params) -> Scheme:
    """Int8Tensor / Float8Tensor flattened by transformers 5: ``_weight_qdata``
    [out, in], ``_weight_scale`` [out, 1] (PerRow) or [out, in/g] (PerGroup),
    ``_weight_zero_point`` beside int8."""
    q, sc = params["_weight_qdata"], params.get("_weight_scale")
    if sc is None or len(q.shape) != 2:
        return unknown(f"torchao qdata {q.dtype} {list(q.shape)} without a usable _weight_scale")
    fmts = _PER_ROW.get(q.dtype)
    if fmts is not None:
        return _per_row(fmts, s.TORCHAO, q, sc, zero_points="_weight_zero_point" in params)
    return unknown(f"torchao {q.dtype} qdata {list(q.shape)}: packing not read by specguard")


def _per_row(fmts: tuple[s.Format, s.Format, s.Format | None], conv: s.Convention, w: TensorInfo,
             sc: TensorInfo, zero_points: bool) -> Scheme:
    """Per-tensor (one scale), per-channel (one per output row) or per-group, from the scale's shape."""
    tensor, channel, group = fmts
    out, inp = w.shape
    kw = dict(scale_dtype=sc.dtype, weight_dtype=w.dtype, zero_points=zero_points or None)
    if sc.numel == 1:
        return Scheme(tensor, conv, **kw)  # type: ignore[arg-type]
    if sc.shape in ((out,), (out, 1)):
        return Scheme(channel, conv, **kw)  # type: ignore[arg-type]
    g = ratio(inp, sc.shape[-1]) if len(sc.shape) == 2 and sc.shape[0] == out else None
    if group is not None and g:
        return Scheme(group, conv, group_size=g, **kw)  # type: ignore[arg-type]
    return unknown(f"{w.dtype} weight {list(w.shape)} with scale {list(sc.shape)} fits no per-row layout")


def quark_int(w: TensorInfo, params: Params) -> Scheme:
    """Quark int4/uint4 (export ``pack_method`` reorder or order): I32 ``weight``
    [in, out*bits/32] packed along the output dim like AWQ, ``weight_scale``
    [in/g, out], ``weight_zero_point`` [in/g, out*bits/32] (stored for int4 too)."""
    sc = params.get("weight_scale")
    if sc is None or len(w.shape) != 2 or len(sc.shape) != 2:
        return unknown(f"I32 weight {list(w.shape)} without a 2-D weight_scale")
    bits = ratio(32 * w.shape[1], sc.shape[1])
    fmt = {4: s.INT4_GROUP, 8: s.INT8_GROUP}.get(bits or 0)
    group = ratio(w.shape[0], sc.shape[0])
    if fmt is None or group is None:
        return unknown(f"I32 weight {list(w.shape)} with weight_scale {list(sc.shape)} fits no packing")
    return Scheme(fmt, s.QUARK, group_size=group, scale_dtype=sc.dtype, weight_dtype=w.dtype, pack_axis=1,
                  zero_points="weight_zero_point" in params)
