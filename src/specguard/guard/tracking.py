"""Write tracking for tensors whose every bit pattern is legal data.

A ``TorchDispatchMode`` sees every ATen op the loading thread runs. For each op
that writes into one of its tensor arguments (schema ``alias_info.is_write``:
``copy_``, ``fill_``, ``zero_``, ``out=`` variants, ...) whose storage belongs to
a guarded tensor, the written region — storage offset, sizes and strides of the
destination view — is turned into byte intervals of that storage and kept.
After the load, a guarded tensor whose own byte intervals are covered by the
recorded writes was fully written, with no need to read its contents.

This is exact for the paths loaders use (``param.data[e].narrow(...).copy_``,
``load_state_dict``'s ``copy_``, ``__setitem__``), including writes of the very
bytes the tensor already held. Limits (documented in the package docstring):
writes the dispatcher never sees (numpy views, ctypes, custom CUDA kernels
launched outside ATen, other threads: dispatch modes are thread-local) and
index-driven writes (``index_put_``, ``scatter_``, ``masked_fill_``: which
elements they hit depends on data) are not recorded; for those the marker
pattern in the tensor decides (see ``check``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
import torch
from torch.utils._python_dispatch import TorchDispatchMode

# A view whose write decomposes into more contiguous runs than this is recorded
# as "untracked" rather than stored run by run (bounds the recorder's memory).
MAX_RUNS_PER_WRITE = 1 << 20
# Pending runs of one storage are merged once they exceed this many.
COMPACT_AT = 1 << 16

# Ops whose destination is written only where data-dependent indices say.
_INDEXED = ("index_put", "index_copy", "index_fill", "index_add", "index_reduce",
            "scatter", "masked_fill", "masked_scatter", "put")

StorageKey = tuple[str, int, int]  # (device type, device index, storage base address)


def storage_key(t: torch.Tensor) -> StorageKey:
    return (t.device.type, t.device.index or 0, t.untyped_storage().data_ptr())


def region_runs(
    offset: int, sizes: Sequence[int], strides: Sequence[int], itemsize: int
) -> tuple[np.ndarray, int] | None:
    """Byte runs ``[start, start + run)`` covering a strided view of a storage.

    Returns (starts, run) with one shared run length, or None when the view
    splits into more than ``MAX_RUNS_PER_WRITE`` runs. Dimensions are ordered
    by stride, so a transposed view of a contiguous block is still one run.
    """
    if any(s == 0 for s in sizes):
        return np.empty(0, dtype=np.int64), 0
    pairs = zip(sizes, strides, strict=True)
    dims = sorted(((sz, st) for sz, st in pairs if sz != 1 and st != 0),
                  key=lambda d: d[1], reverse=True)
    merged: list[tuple[int, int]] = []
    for sz, st in dims:
        if merged and merged[-1][1] == sz * st:
            merged[-1] = (merged[-1][0] * sz, st)
        else:
            merged.append((sz, st))
    run = itemsize
    if merged and merged[-1][1] == 1:
        run = merged.pop()[0] * itemsize
    count = int(np.prod([sz for sz, _ in merged], dtype=np.int64)) if merged else 1
    if count > MAX_RUNS_PER_WRITE:
        return None
    starts = np.array([offset * itemsize], dtype=np.int64)
    for sz, st in merged:
        starts = (starts[:, None] + np.arange(sz, dtype=np.int64)[None, :] * (st * itemsize))
        starts = starts.reshape(-1)
    return starts, run


def view_runs(t: torch.Tensor) -> tuple[np.ndarray, int] | None:
    return region_runs(t.storage_offset(), t.shape, t.stride(), t.element_size())


def merge_runs(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Union of intervals as sorted, disjoint (starts, ends)."""
    if starts.size == 0:
        return starts, ends
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], ends[order]
    reach = np.maximum.accumulate(e)
    new = s[1:] > reach[:-1]
    keep_start = np.concatenate(([True], new))
    keep_end = np.concatenate((new, [True]))
    return s[keep_start], reach[keep_end]


class StorageWrites:
    """Byte intervals written into one storage during the load."""

    __slots__ = ("_ends", "_pending", "_pending_n", "_starts", "untracked_writes")

    def __init__(self) -> None:
        self._starts = np.empty(0, dtype=np.int64)
        self._ends = np.empty(0, dtype=np.int64)
        self._pending: list[tuple[np.ndarray, np.ndarray]] = []
        self._pending_n = 0
        self.untracked_writes = 0  # writes seen but not recordable (indexed / too fine)

    def add(self, starts: np.ndarray, run: int) -> None:
        self._pending.append((starts, starts + run))
        self._pending_n += starts.size
        if self._pending_n > COMPACT_AT:
            self._compact()

    def _compact(self) -> None:
        if not self._pending:
            return
        s = np.concatenate([self._starts, *(p[0] for p in self._pending)])
        e = np.concatenate([self._ends, *(p[1] for p in self._pending)])
        self._starts, self._ends = merge_runs(s, e)
        self._pending, self._pending_n = [], 0

    def intervals(self) -> tuple[np.ndarray, np.ndarray]:
        self._compact()
        return self._starts, self._ends

    @property
    def nbytes(self) -> int:
        return self._starts.nbytes + self._ends.nbytes + sum(
            a.nbytes + b.nbytes for a, b in self._pending
        )


def covered(starts: np.ndarray, ends: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Bool per byte offset: inside one of the merged intervals."""
    if starts.size == 0:
        return np.zeros(offsets.shape, dtype=bool)
    i = np.searchsorted(starts, offsets, side="right") - 1
    ok = i >= 0
    return ok & (ends[np.where(ok, i, 0)] > offsets)


def fully_covered(starts: np.ndarray, ends: np.ndarray, runs: tuple[np.ndarray, int]) -> bool:
    """True when every byte of the runs lies inside the merged intervals."""
    rs, run = runs
    if rs.size == 0:
        return True
    if starts.size == 0:
        return False
    i = np.searchsorted(starts, rs, side="right") - 1
    ok = i >= 0
    return bool(np.all(ok & (ends[np.where(ok, i, 0)] >= rs + run)))


def _flatten_tensors(x: object) -> Iterable[torch.Tensor]:
    if isinstance(x, torch.Tensor):
        yield x
    elif isinstance(x, (list, tuple)):
        for y in x:
            if isinstance(y, torch.Tensor):
                yield y


class WriteRecorder(TorchDispatchMode):
    """Records writes into the storages in ``writes`` (keyed by ``storage_key``)."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # torch wraps __torch_dispatch__ in _disable_dynamo by default: the
        # first call imports torch._dynamo (~1.5 s) and every op pays a frame
        # hook. A loader does not compile, so the plain method is used.
        return False

    def __init__(self, writes: dict[StorageKey, StorageWrites]) -> None:
        super().__init__()
        self.writes = writes
        self._written_args: dict[object, tuple[tuple[tuple[int, str], ...], bool]] = {}

    def _schema_writes(
        self, func: torch._ops.OpOverload
    ) -> tuple[tuple[tuple[int, str], ...], bool]:
        cached = self._written_args.get(func)
        if cached is None:
            where: list[tuple[int, str]] = []
            for i, arg in enumerate(func._schema.arguments):
                if arg.alias_info is not None and arg.alias_info.is_write:
                    where.append((i, arg.name))
            indexed = any(k in func._schema.name for k in _INDEXED)
            cached = (tuple(where), indexed)
            self._written_args[func] = cached
        return cached

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[override]
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        where, indexed = self._schema_writes(func)
        for i, name in where:
            arg = args[i] if i < len(args) else kwargs.get(name)
            for t in _flatten_tensors(arg):
                self._record(t, indexed)
        return out

    def _record(self, t: torch.Tensor, indexed: bool) -> None:
        if t.device.type == "meta":
            return
        sw = self.writes.get(storage_key(t))
        if sw is None:
            return
        runs = None if indexed else view_runs(t)
        if runs is None:
            sw.untracked_writes += 1
        elif runs[0].size:
            sw.add(*runs)
