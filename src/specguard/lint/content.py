"""Scale bytes for the content rules: read once per lint run, shared by the rules.

Per-tensor scales (a handful of bytes) are read whole; block scales only a
prefix (formats/sniff.py's sample size), so a lint reads a sliver of the
checkpoint however large it is.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specguard.checkpoint.dtypes import NUMPY
from specguard.checkpoint.header import TensorInfo
from specguard.formats.sniff import SAMPLE_BYTES
from specguard.resolve import Resolver

SCALE_PARAMS = ("weight_scale", "weight_scale_inv", "scale", "scales", "weight_scale_2", "input_scale",
                "weight_global_scale", "input_global_scale")
PER_TENSOR_MAX = 64  # elements: per-tensor / per-expert scales are read whole
BLOCK_SAMPLE = 1024  # bytes of each block scale checked for impossible values


@dataclass(frozen=True)
class ScaleSample:
    module: str
    param: str
    tensor: TensorInfo
    values: np.ndarray  # decoded float64 (U8 left as raw codes)
    raw: bytes
    whole: bool  # the whole tensor was read


def is_per_tensor(t: TensorInfo) -> bool:
    return t.numel <= PER_TENSOR_MAX


def read_scales(r: Resolver, first_per_prefix: int = SAMPLE_BYTES) -> list[ScaleSample]:
    """Every scale tensor's bytes (whole for per-tensor scales, a prefix for block scales)."""
    if r.checkpoint.root is None:
        return []
    wanted: dict[str, int] = {}
    owner: dict[str, tuple[str, str]] = {}
    for m in r.table:
        for p in SCALE_PARAMS:
            t = m.params.get(p)
            if t is None or t.dtype not in NUMPY:
                continue
            wanted[t.name] = t.nbytes if is_per_tensor(t) else BLOCK_SAMPLE
            owner[t.name] = (m.name, p)
    raw = r.checkpoint.read_many(wanted)
    out = []
    for name, data in raw.items():
        t = r.checkpoint.tensors[name]
        dt = NUMPY[t.dtype]
        usable = len(data) - len(data) % dt.itemsize
        values = np.frombuffer(data[:usable], dt).astype(np.float64) if t.dtype != "U8" else np.frombuffer(
            data, np.uint8).astype(np.float64)
        out.append(ScaleSample(*owner[name], t, values, data, len(data) == t.nbytes))
    return out
