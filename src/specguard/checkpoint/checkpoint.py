"""One opened checkpoint: every tensor's header entry, which shard holds it, and
the configs. Nothing here reads tensor data except the ``read*`` methods, which
content rules call for scale samples only.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from itertools import chain, repeat
from operator import attrgetter
from pathlib import Path
from typing import TYPE_CHECKING

from specguard.checkpoint import dtypes
from specguard.checkpoint.errors import CheckpointError, named
from specguard.checkpoint.header import TensorInfo

if TYPE_CHECKING:
    import numpy as np

PAGE = 4096  # bytes the OS reads per touched page of a memory map
_DATA_OFFSETS, _DATA_START, _FILE = attrgetter("data_offsets"), attrgetter("data_start"), attrgetter("file")


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
    # tensors read from those files (names the indexed shards do not already hold):
    # stored, but an engine that follows the index never opens their file
    outside_index: tuple[str, ...] = ()
    # per shard where its tensors' bytes begin and end (absolute), when the reader knows it from the
    # headers (a validated header's tensors tile its data section); None: found from the tensors
    sections: Mapping[str, tuple[int, int]] | None = field(default=None, compare=False, repr=False)
    bytes_read: list[int] = field(default_factory=lambda: [0], compare=False, repr=False)
    pages_read: set[int] = field(default_factory=set, compare=False, repr=False)  # _page_keys already counted

    @functools.cached_property
    def _sections(self) -> tuple[dict[str, int], np.ndarray, np.ndarray]:
        """Each shard's number and where its tensors' bytes begin and end (absolute), from
        the reader's ``sections`` or else the tensors: column reads and a ufunc reduction,
        not a Python step per tensor (180,000 in a DeepSeek export)."""
        import numpy as np

        if self.sections is not None:
            ids = {f: i for i, f in enumerate(self.sections)}
            lo, hi = np.array(list(self.sections.values()), dtype=np.int64).reshape(-1, 2).T
            return ids, lo, hi
        infos = self.tensors.values()
        n = len(infos)
        files = list(map(_FILE, infos))
        ids = {f: i for i, f in enumerate(dict.fromkeys(files))}
        shard = np.fromiter(map(ids.__getitem__, files), np.int64, n)
        start = np.fromiter(map(_DATA_START, infos), np.int64, n)
        span = np.fromiter(chain.from_iterable(map(_DATA_OFFSETS, infos)), np.int64, 2 * n).reshape(n, 2)
        lo = np.full(len(ids), np.iinfo(np.int64).max, dtype=np.int64)
        hi = np.zeros(len(ids), dtype=np.int64)
        np.minimum.at(lo, shard, start + span[:, 0])
        np.maximum.at(hi, shard, start + span[:, 1])
        return ids, lo, hi

    @functools.cached_property
    def total_bytes(self) -> int:
        if self.sections is not None:  # each shard's tensors tile its section
            return sum(end - begin for begin, end in self.sections.values())
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

    def read_ranges(self, names: list[str], shard_of: np.ndarray, begin: np.ndarray,
                    length: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Bytes ``[begin[i], begin[i] + length[i])`` of shard ``names[shard_of[i]]`` for many i,
        as one uint8 buffer and each range's position in it.

        One ``pread`` per run of ranges that touch (the per-tensor scales of a module lie
        side by side: a third fewer calls on benchmarks/lint_export.py), each shard opened
        once, in file and offset order: 75,000 samples of a few bytes each cost about half
        of what gathering them through memory maps did (page faults, benchmarks/lint.py).
        The pages (4 KiB) holding the ranges are what ``bytes_read`` counts.
        """
        import numpy as np  # here: header-only commands never import numpy

        if self.root is None:
            raise CheckpointError(self.name, "tensor bytes are not read from a remote checkpoint")
        begin, length, shard_of = begin.astype(np.int64), length.astype(np.int64), shard_of.astype(np.int64)
        order = in_file_order(shard_of, begin)[1]
        shard, start, end = shard_of[order], begin[order], begin[order] + length[order]
        # a run starts where the shard changes or a range begins past every earlier end
        reach = np.maximum.accumulate(shard * (1 << 44) + end)  # shard in the high bits: never spans two
        new = np.ones(len(order), dtype=bool)
        new[1:] = (shard[1:] != shard[:-1]) | (shard[1:] * (1 << 44) + start[1:] > reach[:-1])
        heads = np.flatnonzero(new)
        run_of = np.cumsum(new) - 1
        run_begin = start[heads]
        run_len = (np.maximum.reduceat(end, heads) - run_begin) if len(heads) else run_begin
        run_pos = np.cumsum(run_len) - run_len
        pos = np.empty(len(order), dtype=np.int64)
        pos[order] = run_pos[run_of] + start - run_begin[run_of]
        chunks: list[bytes] = []
        run_shard = shard[heads]
        firsts = np.r_[0, np.flatnonzero(np.diff(run_shard)) + 1] if len(heads) else heads  # runs in shard order
        for k, lo, hi in zip(run_shard[firsts].tolist(), firsts.tolist(), [*firsts[1:].tolist(), len(heads)],
                             strict=True):
            chunks += self._pread_runs(names[k], run_begin[lo:hi].tolist(), run_len[lo:hi].tolist())
        ids = self._sections[0]
        # the runs cover the pages the ranges do (each run is its ranges' union): fewer to count
        self._charge(np.array([ids[n] for n in names], dtype=np.int64)[run_shard], run_begin, run_len)
        return np.frombuffer(b"".join(chunks), dtype=np.uint8), pos

    def _pread_runs(self, name: str, begins: list[int], lengths: list[int]) -> list[bytes]:
        """Each run's bytes from one shard: the calls are mapped at C level (75,000 small
        reads: no Python step between them), a short read is found afterwards."""
        assert self.root is not None
        try:
            fd = os.open(self.root / name, os.O_RDONLY)
            try:
                chunks = list(map(os.pread, repeat(fd), lengths, begins))
            finally:
                os.close(fd)
        except OSError as err:
            raise CheckpointError(name, f"cannot read: {err.strerror or err}") from err
        if sum(map(len, chunks)) != sum(lengths):
            b = next(b for b, n, c in zip(begins, lengths, chunks, strict=True) if len(c) != n)
            raise CheckpointError(name, f"truncated: a scale at byte {b} lies past the end")
        return chunks

    def read_bytes(self, name: str) -> bytes:
        return self.read_bytes_range(name, self.tensors[name].nbytes)

    def read_bytes_range(self, name: str, length: int) -> bytes:
        """The first ``length`` bytes of a tensor (content rules sample scales)."""

        t = self.tensors[name]
        if self.root is None:
            raise CheckpointError(named(self.name, name), "tensor bytes are not read from a remote checkpoint")
        length = min(length, t.nbytes)
        try:  # a raw descriptor and one pread: SG402 reads a few hundred prefixes, no buffered file each
            fd = os.open(self.root / t.file, os.O_RDONLY)
            try:
                raw = os.pread(fd, length, t.offsets[0])
            finally:
                os.close(fd)
        except OSError as e:
            raise CheckpointError(named(t.file, name), f"cannot read: {e.strerror or e}") from e
        if len(raw) != length:
            raise CheckpointError(named(t.file, name), f"truncated: {len(raw)} of {length} bytes")
        self._charge_one(self._sections[0][t.file], t.offsets[0], length)
        return raw

    def _charge_one(self, shard: int, begin: int, length: int) -> None:
        """``_charge`` of one range, in Python ints: SG402 and the sniffs read a few hundred
        small prefixes, where building arrays for each cost more than the read."""
        if length <= 0:
            return
        _, lo, hi = self._sections
        seen, low, high = self.pages_read, int(lo[shard]), int(hi[shard])
        for page in range(begin // PAGE, (begin + length - 1) // PAGE + 1):
            key = (shard << 44) + page
            if key not in seen:
                seen.add(key)
                start = page * PAGE
                self.bytes_read[0] += max(min(start + PAGE, high) - max(start, low), 0)

    def _charge(self, shard: np.ndarray, begin: np.ndarray, length: np.ndarray) -> None:
        """Count in ``bytes_read`` the tensor data of the 4 KiB pages these ranges touch that no
        earlier read touched: the part of each page inside its shard's data section, so
        ``bytes_read`` never exceeds ``total_bytes`` (a page read twice counts once)."""
        import numpy as np

        seen = self.pages_read
        keys = _page_keys(shard, begin, length)
        fresh = keys.tolist()
        if seen:  # (a lint run's first read, the scale sampling, finds none counted yet)
            fresh = [k for k in fresh if k not in seen]
            if not fresh:
                return
            keys = np.array(fresh, dtype=np.int64)
        seen.update(fresh)
        _, lo, hi = self._sections
        page, start = keys >> 44, (keys & ((1 << 44) - 1)) * PAGE
        self.bytes_read[0] += int(np.maximum(np.minimum(start + PAGE, hi[page]) - np.maximum(start, lo[page]), 0).sum())


def in_file_order(shard_of: np.ndarray, begin: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each range's (shard, offset) as one int, the shard in the high bits (ranges of two shards
    never touch), and the ranges' stable order by it: no sort where they were asked in file
    order (a shard's tensors in header order)."""
    import numpy as np

    at = shard_of * (1 << 44) + begin
    return at, (np.arange(len(at)) if (at[1:] >= at[:-1]).all() else np.argsort(at, kind="stable"))


def _page_keys(shard_of: np.ndarray, begin: np.ndarray, length: np.ndarray) -> np.ndarray:
    """The distinct 4 KiB pages the ranges touch, as ``shard << 44 | page``."""
    import numpy as np

    live = length > 0
    shard_of, first = shard_of[live], begin[live] // PAGE
    span = (begin[live] + length[live] - 1) // PAGE - first + 1
    within = np.arange(int(span.sum()), dtype=np.int64) - np.repeat(np.cumsum(span) - span, span)
    keys = np.sort(np.repeat(shard_of, span) * (1 << 44) + np.repeat(first, span) + within)
    # distinct by a mask over the sorted keys: np.unique (numpy 2) hashes first, 15x slower here
    return keys[np.r_[True, keys[1:] != keys[:-1]]] if len(keys) else keys
