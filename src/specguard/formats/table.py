"""ModuleTable: every module of a checkpoint with its stored scheme."""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import msgspec

from specguard.checkpoint.dtypes import WHOLE_BYTES, nbytes
from specguard.checkpoint.header import TensorInfo
from specguard.checkpoint.source import Checkpoint, gc_paused
from specguard.formats.classify import Classified, classify_params
from specguard.formats.modules import SCALE_PARAMS, group_params
from specguard.formats.scheme import Scheme


class ScalePlan(msgspec.Struct, frozen=True, gc=False):
    """The scale tensors numpy reads in the modules of one signature (lint/content.py samples
    them): each one's parameter suffix, dtype and size in bytes, from the signature's shapes
    (a validated header's entry spans exactly that). One object for all modules of a
    signature: the sampler works out what depends on it once per signature, not per tensor."""

    params: tuple[str, ...]
    dtypes: tuple[str, ...]
    nbytes: tuple[int, ...]


class Module(msgspec.Struct, frozen=True, gc=False):
    """One checkpoint module: its name, tensors by parameter suffix, stored scheme.

    A struct, not a dataclass: a DeepSeek's 10,000s of modules are built in C, ~10x
    faster than a frozen dataclass's __init__ (benchmarks/remote.py). Not tracked by
    the cyclic collector (``gc=False``): nothing it holds refers back to it."""

    name: str
    params: Mapping[str, TensorInfo]
    scheme: Scheme
    missing: tuple[str, ...] = ()  # tensors the stored scheme needs but the disk lacks
    scales: ScalePlan | None = None  # its scale tensors numpy can read (lint/content.py samples them)

    @property
    def nbytes(self) -> int:
        n = 0
        for t in self.params.values():  # TensorInfo.nbytes inlined: inspect sums 10,000s of modules
            begin, end = t.data_offsets
            n += end - begin
        return n

    def tensor_names(self) -> list[str]:
        return [t.name for t in self.params.values()]


@dataclass(frozen=True)
class ModuleTable:
    """All modules of one checkpoint, in the order the headers list them."""

    checkpoint: Checkpoint
    modules: Mapping[str, Module]

    def __iter__(self) -> Iterator[Module]:
        return iter(self.modules.values())

    def __len__(self) -> int:
        return len(self.modules)

    def __getitem__(self, name: str) -> Module:
        return self.modules[name]


def classify(checkpoint: Checkpoint) -> ModuleTable:
    """Group the checkpoint's tensors into modules and classify each from its header."""
    with gc_paused():  # builds one record per module, all kept (see checkpoint.source)
        return _classify(checkpoint)


def _classify(checkpoint: Checkpoint) -> ModuleTable:
    modules: dict[str, Module] = {}
    seen: dict[tuple, tuple[Classified, ScalePlan | None]] = {}
    for name, params in group_params(checkpoint.tensors.values()).items():
        # Classification reads only suffixes, dtypes and shapes: the 256 experts of
        # a layer share one answer, so classify each distinct signature once (and
        # plan its scale tensors once: the lint's sampler reads no other, and what it needs of each
        # scale besides where it lies comes from the plan).
        key = tuple([(p, t.dtype, t.shape) for p, t in params.items()])
        known = seen.get(key)
        if known is None:
            known = seen[key] = (classify_params(params), _scales(key))
        c, scales = known
        modules[name] = Module(name, params, c.scheme, c.missing, scales)
    return ModuleTable(checkpoint, modules)


def _scales(signature: tuple) -> ScalePlan | None:
    """The scale tensors of a module with this signature that numpy reads (not sub-byte)."""
    picked = [(p, dtype, nbytes(dtype, math.prod(shape))) for p, dtype, shape in signature
              if p in SCALE_PARAMS and dtype in WHOLE_BYTES]
    if not picked:
        return None
    params, dtypes, sizes = zip(*picked, strict=True)
    return ScalePlan(params, dtypes, sizes)
