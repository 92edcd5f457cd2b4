"""One opened checkpoint: every tensor's header entry, which shard holds it, and
the configs. Nothing here reads tensor data except the ``read*`` methods, which
content rules call for scale samples only.
"""

from __future__ import annotations

import functools
import mmap
from collections.abc import Mapping
from dataclasses import dataclass, field
from operator import attrgetter
from pathlib import Path
from typing import TYPE_CHECKING

from specguard.checkpoint import dtypes
from specguard.checkpoint.errors import CheckpointError
from specguard.checkpoint.header import TensorInfo

if TYPE_CHECKING:
    import numpy as np

PAGE = 4096  # bytes the OS reads per touched page of a memory map
_DATA_OFFSETS = attrgetter("data_offsets")


@dataclass(frozen=True)
class Checkpoint:
    """Headers and configs of one checkpoint; tensor bytes stay on disk."""

    name: str  # what the user asked for (path or repo id)
    root: Path | None  # local directory holding the files (None when remote)
    files: tuple[str, ...]  # shard names relative to root, in read order
    tensors: Mapping[str, TensorInfo]
    config: Mapping[str, object] | None = None
    hf_quant_config: Mapping[str, object] | None = None
    remote: bool = False
    commit: str | None = None  # the revision's resolved commit, when read remotely
    index: Mapping[str, object] | None = None  # the index's "metadata" (total_size), when indexed
    unindexed: tuple[str, ...] = ()  # tensors a shard stores but the index omits (loaders skip them)
    unreferenced: tuple[str, ...] = ()  # *.safetensors in the directory the index never names
    bytes_read: list[int] = field(default_factory=lambda: [0], compare=False, repr=False)

    @functools.cached_property
    def total_bytes(self) -> int:
        return sum(end - begin for begin, end in map(_DATA_OFFSETS, self.tensors.values()))

    def read(self, name: str) -> np.ndarray:
        """The bytes of one tensor as a numpy array of its dtype (sub-byte types as U8)."""
        import numpy as np

        raw = self.read_bytes(name)
        t = self.tensors[name]
        dtype = dtypes.NUMPY.get(t.dtype)
        if dtype is None:  # F4 / F6: packed, no numpy element type
            return np.frombuffer(raw, np.uint8)
        return np.frombuffer(raw, dtype).reshape(t.shape)

    def read_ranges(self, files: list[str], begin: np.ndarray, length: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Bytes ``[begin[i], begin[i] + length[i])`` of ``files[i]`` for many i, as one
        uint8 buffer and each range's position in it.

        Each shard is memory-mapped and the ranges gathered with one numpy index,
        so 100,000 small ranges cost no Python loop; only the pages holding them
        are touched, and those pages (4 KiB each) are what ``bytes_read`` counts.
        """
        import numpy as np  # here: header-only commands never import numpy

        if self.root is None:
            raise CheckpointError(self.name, "tensor bytes are not read from a remote checkpoint")
        length = length.astype(np.int64)
        pos = np.concatenate([[0], np.cumsum(length)[:-1]]).astype(np.int64)
        out = np.empty(int(length.sum()), dtype=np.uint8)
        shard_names, shard_of = np.unique(np.array(files, dtype=object), return_inverse=True)
        order = np.argsort(shard_of, kind="stable")
        bounds = np.searchsorted(shard_of[order], np.arange(len(shard_names) + 1))
        for k, file in enumerate(shard_names.tolist()):
            idx = order[bounds[k] : bounds[k + 1]]
            counts = length[idx]
            within = np.arange(int(counts.sum()), dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts)
            src = np.repeat(begin[idx], counts) + within
            dst = np.repeat(pos[idx], counts) + within
            try:
                with open(self.root / file, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
                    mm.madvise(mmap.MADV_RANDOM)  # no readahead: each sample is a few bytes far apart
                    view = np.frombuffer(mm, dtype=np.uint8)
                    if src.size and int(src.max()) >= view.size:
                        raise CheckpointError(file, f"truncated: {view.size} bytes, a scale lies past the end")
                    out[dst] = view[src]
                    del view
            except (OSError, ValueError) as err:
                raise CheckpointError(file, f"cannot read: {err}") from err
            self.bytes_read[0] += PAGE * len(np.unique(src // PAGE))
        return out, pos

    def read_bytes(self, name: str) -> bytes:
        return self.read_bytes_range(name, self.tensors[name].nbytes)

    def read_bytes_range(self, name: str, length: int) -> bytes:
        """The first ``length`` bytes of a tensor (content rules sample scales)."""
        t = self.tensors[name]
        if self.root is None:
            raise CheckpointError(f"{self.name} [{name}]", "tensor bytes are not read from a remote checkpoint")
        length = min(length, t.nbytes)
        try:
            with open(self.root / t.file, "rb") as f:
                f.seek(t.offsets[0])
                raw = f.read(length)
        except OSError as e:
            raise CheckpointError(f"{t.file} [{name}]", f"cannot read: {e.strerror or e}") from e
        if len(raw) != length:
            raise CheckpointError(f"{t.file} [{name}]", f"truncated: {len(raw)} of {length} bytes")
        self.bytes_read[0] += len(raw)
        return raw
