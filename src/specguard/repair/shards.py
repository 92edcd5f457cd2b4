"""Rewrite the shards that hold re-encoded modules: every other tensor copied byte
for byte (dtype label, shape and order kept), MXFP4 modules decoded to BF16.

Streams: the header is computed from shapes alone, then tensors are copied in
1 MiB pieces or decoded one module at a time, so a shard never sits in memory.
vLLM loads every tensor of every shard the index names
(weight_utils.filter_duplicate_safetensors_files keeps whole files), so the
replaced shard cannot stay behind as a link.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import ml_dtypes
import numpy as np

from specguard import codecs
from specguard.checkpoint.errors import CheckpointError
from specguard.checkpoint.header import TensorInfo, read_header
from specguard.checkpoint.source import Checkpoint
from specguard.checkpoint.writer import write_file
from specguard.formats import scheme as s
from specguard.formats.modules import split_name
from specguard.formats.table import Module

CHUNK = 1 << 20


class NotExact(CheckpointError):
    """A value the target format cannot hold exactly (fix never rounds), or bytes that do not decode."""


@dataclass(frozen=True)
class Entry:
    """One tensor of the new shard: copied from ``source`` or decoded from ``module``."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    source: TensorInfo | None = None
    module: Module | None = None

    @property
    def nbytes(self) -> int:
        if self.source is not None:
            return self.source.nbytes
        return int(np.prod(self.shape)) * 2  # BF16


def plan_shard(checkpoint: Checkpoint, shard: str, modules: Mapping[str, Module],
               rename: Mapping[str, str] | None = None) -> list[Entry]:
    """The new shard's tensors in the old one's order: a re-encoded module's weight
    becomes BF16, its scale disappears, anything else it holds is copied (under
    ``rename``'s name where it has one)."""
    rename = rename or {}
    tensors = sorted((t for t in checkpoint.tensors.values() if t.file == shard), key=lambda t: t.offsets[0])
    out: list[Entry] = []
    for t in tensors:
        module, suffix = split_name(t.name)
        mod = modules.get(module)
        if mod is None or suffix not in ("weight", "scale", "weight_scale"):
            out.append(Entry(rename.get(t.name, t.name), t.dtype, t.shape, source=t))
        elif suffix == "weight":
            out.append(Entry(t.name, "BF16", (*t.shape[:-1], t.shape[-1] * 2), module=mod))
    return out


def decode_bf16(checkpoint: Checkpoint, module: Module) -> np.ndarray:
    """An MXFP4 (DeepSeek names) module as BF16, exact: every E2M1 value times a
    power of two within BF16's range is a BF16 value; anything else raises."""
    parts = {p: checkpoint.read(t.name) for p, t in module.params.items() if p in ("weight", "scale")}
    try:
        w = codecs.dequantize(s.MXFP4, parts, convention=s.DEEPSEEK)
    except ValueError as e:
        raise NotExact(module.name, f"does not decode as MXFP4: {e}; nothing written") from e
    b = w.astype(ml_dtypes.bfloat16)
    if not np.isfinite(w).all() or not np.array_equal(b.astype(np.float32), w):
        raise NotExact(module.name, "MXFP4 values outside BF16's exact range (NaN scale byte?); nothing written")
    return b


def write_shard(checkpoint: Checkpoint, shard: str, entries: list[Entry], dest: Path) -> int:
    """Write the shard (its ``__metadata__`` kept); returns its size in bytes."""
    source = local_root(checkpoint) / shard
    with open(source, "rb") as src:
        pieces = (piece for e in entries for piece in _bytes(checkpoint, src, e))
        return write_file(dest, entries, pieces, read_header(source).metadata)


def _bytes(checkpoint: Checkpoint, src, e: Entry) -> Iterator[bytes]:
    if e.module is not None:
        b = decode_bf16(checkpoint, e.module)
        if b.shape != e.shape:  # the header written first promised this shape
            raise NotExact(e.name, f"decoded shape {b.shape}, expected {e.shape}; nothing written")
        yield b.tobytes()
        return
    if e.source is None:
        raise NotExact(e.name, "neither a module to decode nor stored bytes to copy; nothing written")
    begin, end = e.source.offsets
    src.seek(begin)
    while begin < end:
        piece = src.read(min(CHUNK, end - begin))
        if not piece:
            raise OSError(f"{e.source.file}: truncated at {e.name}")
        begin += len(piece)
        yield piece


def local_root(checkpoint: Checkpoint) -> Path:
    """The checkpoint's directory; a repair links and copies local files only."""
    if checkpoint.root is None:
        raise CheckpointError(checkpoint.name, "a remote checkpoint cannot be repaired into a directory (use --diff)")
    return checkpoint.root
