"""Settle an ``ambiguous`` stored scheme by sniffing its scale bytes.

Only the block-scale tensor's first bytes are read (formats/sniff.py); a
remote checkpoint has no bytes to read and stays ambiguous.
"""

from __future__ import annotations

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


def settle(checkpoint: Checkpoint, module: Module) -> tuple[Scheme, Sniff | None]:
    """The module's scheme with ambiguity resolved by its bytes where possible."""
    sc = module.scheme
    if sc.format != s.AMBIGUOUS:
        return sc, None
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
