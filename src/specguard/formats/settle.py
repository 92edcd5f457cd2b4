"""Settle an ``ambiguous`` stored scheme by sniffing its scale bytes.

Only the block-scale tensor's first bytes are read (formats/sniff.py); a
remote checkpoint has no bytes to read and stays ambiguous.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from specguard.checkpoint.errors import CheckpointError
from specguard.checkpoint.source import Checkpoint
from specguard.formats import scheme as s
from specguard.formats.modules import BLOCK_SCALE_PARAMS
from specguard.formats.scheme import Scheme
from specguard.formats.sniff import E8M0, SAMPLE_BYTES, Sniff, sniff_scale_bytes
from specguard.formats.table import Module


def scale_tensor(module: Module) -> str | None:
    """Name of the module's block/group scale tensor."""
    for p in BLOCK_SCALE_PARAMS:
        if p in module.params:
            return module.params[p].name
    return None


def sniff_module(checkpoint: Checkpoint, module: Module) -> Sniff | None:
    name = scale_tensor(module)
    if name is None or checkpoint.root is None:
        return None
    return sniff_scale_bytes(checkpoint.read_bytes_range(name, SAMPLE_BYTES))


# Conventions two stacks share on disk (FP8 ``weight``/``weight_scale``): the config's
# quant method says whose they are.
_SHARED_FORMATS = frozenset({s.FP8_TENSOR, s.FP8_CHANNEL, s.FP8_BLOCK})
_CONVENTION_OF_STACK = {"modelopt": s.MODELOPT, "compressed-tensors": s.COMPRESSED_TENSORS, "quark": s.QUARK}


def name_convention(scheme: Scheme, stack: str | None) -> Scheme:
    """Name the convention of a shared layout by the stack the config declares."""
    conv = _CONVENTION_OF_STACK.get(stack or "")
    if conv is None or scheme.convention is not None or scheme.format not in _SHARED_FORMATS:
        return scheme
    return replace(scheme, convention=conv, readings=tuple(replace(r, convention=conv) for r in scheme.readings))


def stored_scheme(checkpoint: Checkpoint, module: Module, stack: str | None = None,
                  claim: Scheme | None = None) -> Scheme:
    """What a module is stored as, as inspect and route both show it: an ambiguous U8
    scale settled by its first 4 KiB, a pack-quantized width by ``weight_shape`` (else
    the claim, when given), a shared convention named by the config."""
    return name_convention(settle(checkpoint, module, claim)[0], stack)


def stored_schemes(checkpoint: Checkpoint, modules: Iterable[Module], stack: str | None = None) -> dict[str, Scheme]:
    """``stored_scheme`` of every module, by name. A scheme with nothing to settle is named
    once for all the modules that share it (a DeepSeek's 10,000 modules hold a handful)."""
    named: dict[int, Scheme] = {}  # id of a module's scheme (alive with it) -> as named
    out: dict[str, Scheme] = {}
    for m in modules:
        sc = m.scheme
        if sc.format == s.AMBIGUOUS:
            out[m.name] = stored_scheme(checkpoint, m, stack)
            continue
        shown = named.get(id(sc))
        if shown is None:
            shown = named[id(sc)] = name_convention(sc, stack)
        out[m.name] = shown
    return out


def settle(checkpoint: Checkpoint, module: Module, claim: Scheme | None = None) -> tuple[Scheme, Sniff | None]:
    """The module's scheme with ambiguity resolved by its bytes where possible
    (``claim``: what the config declares, which wins where the bytes cannot be
    read and it is among the schemes the header fits)."""
    sc = module.scheme
    if sc.format != s.AMBIGUOUS:
        return sc, None
    if sc.candidates:
        return _pick(checkpoint, module, claim), None
    try:
        sn = sniff_module(checkpoint, module)
    except CheckpointError:
        sn = None
    if sn is None or sn.dtype is None:
        return sc, sn
    why = f"U8 scale bytes read as {sn.dtype} ({sn.evidence}; confidence {sn.confidence:.2f})"
    if sn.dtype == E8M0 and sc.group_size == 32:
        return replace(sc, format=s.MXFP4, reason=why), sn
    if sn.dtype != E8M0 and sc.group_size == 16:
        return replace(sc, format=s.NVFP4, convention=s.MODELOPT, reason=why), sn
    return replace(sc, reason=f"{sc.reason}; {why}, which fits neither mxfp4 (g32) nor nvfp4 (g16)"), sn


_BITS = {s.INT4_GROUP: 4, s.INT8_GROUP: 8, s.INT8_CHANNEL: 8}
_SHAPE_DTYPES = {"I64": "<i8", "I32": "<i4"}


def _pick(checkpoint: Checkpoint, module: Module, claim: Scheme | None) -> Scheme:
    """compressed-tensors pack-quantized: the width ``weight_shape`` gives, else the claim's."""
    sc = module.scheme
    fits, why = list(sc.candidates), "the config's claim, one of the schemes the header fits"
    shape = _weight_shape(checkpoint, module)
    packed = module.params.get("weight_packed")
    if shape is not None and packed is not None and shape[-1] > 0:
        bits = packed.shape[-1] * 32 // shape[-1]
        fits = [c for c in fits if _BITS.get(c.format) == bits]
        why = f"weight_shape {list(shape)}: {bits}-bit ints"
        if len(fits) == 1:
            return replace(fits[0], reason=why)
    if claim is not None:
        hit = next((c for c in fits if c.format == claim.format and claim.group_size in (None, c.group_size)), None)
        if hit is not None:
            return replace(hit, reason=why)
    return replace(fits[0], reason=why) if fits and shape is not None else sc


def _weight_shape(checkpoint: Checkpoint, module: Module) -> tuple[int, ...] | None:
    t = module.params.get("weight_shape")
    if t is None or t.dtype not in _SHAPE_DTYPES or checkpoint.root is None or t.nbytes > 64:
        return None
    try:
        raw = checkpoint.read_bytes_range(t.name, t.nbytes)
    except CheckpointError:
        return None
    import numpy as np  # here: a header-only inspect never loads numpy

    return tuple(int(x) for x in np.frombuffer(raw, dtype=_SHAPE_DTYPES[t.dtype]))
