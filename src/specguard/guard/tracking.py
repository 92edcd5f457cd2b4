"""Write tracking for tensors whose every bit pattern is legal data.

A write into a guarded storage is turned into byte intervals of that storage
(from the destination view's storage offset, sizes and strides) and kept,
merged. After the load, a guarded tensor whose own byte intervals are covered
by recorded writes was fully written, without reading its contents. This is
exact even for writes of the very bytes the tensor already held.

Two ways to see the writes (``LoadGuard(track_writes=...)``):

* ``"methods"`` (default): while any guard is active, ``torch.Tensor.copy_``,
  ``fill_``, ``zero_`` and ``__setitem__`` are wrapped process-wide. These are
  the calls loaders use (``param.data[e].narrow(...).copy_(w)``,
  ``param.data[e][shard] = w``, ``load_state_dict``'s ``copy_``). Costs a
  dictionary lookup per such call and nothing for any other op; sees writes
  from every thread. Misses writes made through other entry points (``out=``,
  ``index_copy_``/``scatter_``/``masked_fill_``, ``torch.ops.aten.*`` called
  directly, C++/CUDA code, numpy views); ``__setitem__`` with tensor indices is
  counted but not located.
* ``"aten"``: a ``TorchDispatchMode`` sees every ATen op of the guarding
  thread and records each argument the op's schema marks as written (so also
  ``out=``, ``add_``, C++-internal copies). Index-driven writes are counted but
  not located. Thread-local, and every op of the load pays Python dispatch
  (~20-30 us): several times slower than ``"methods"`` on loads of many small
  tensors.

Whatever neither sees is decided by the 0xA5 marker the guard also writes
(see ``check``).
"""

from __future__ import annotations

import threading
from array import array
from collections.abc import Callable, Iterable, Sequence
from typing import Any

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
    return region_runs(int(t.storage_offset()), t.shape, t.stride(), t.element_size())


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
    """Byte intervals written into one storage during the load.

    A contiguous write arrives as one run (``add_run``, plain ints, no numpy)
    and is merged with the previous run when it continues it, so a loader
    copying shard after shard in order leaves a single interval; strided writes
    arrive as numpy arrays of runs (``add``). Both are merged on demand."""

    __slots__ = ("_ends", "_lock", "_pending", "_pending_n", "_run_ends", "_run_starts",
                 "_starts", "untracked_writes")

    def __init__(self) -> None:
        self._lock = threading.Lock()  # method hooks record from any thread
        self._starts = np.empty(0, dtype=np.int64)
        self._ends = np.empty(0, dtype=np.int64)
        self._pending: list[tuple[np.ndarray, np.ndarray]] = []
        self._pending_n = 0
        self._run_starts = array("q")  # single runs, 8 bytes per bound
        self._run_ends = array("q")
        self.untracked_writes = 0  # writes seen but not recordable (indexed / too fine)

    def add(self, starts: np.ndarray, run: int) -> None:
        with self._lock:
            self._pending.append((starts, starts + run))
            self._pending_n += starts.size
            if self._pending_n > COMPACT_AT:
                self._compact()

    def add_run(self, start: int, end: int) -> None:
        """One contiguous byte run ``[start, end)``; continues the last one if adjacent."""
        with self._lock:
            ends = self._run_ends
            if ends and ends[-1] == start:
                ends[-1] = end
                return
            self._run_starts.append(start)
            ends.append(end)
            if len(ends) > COMPACT_AT:
                self._compact()

    def _compact(self) -> None:
        if self._run_ends:
            runs = (np.frombuffer(self._run_starts, dtype=np.int64),
                    np.frombuffer(self._run_ends, dtype=np.int64))
            self._pending.append((runs[0].copy(), runs[1].copy()))
            self._run_starts, self._run_ends = array("q"), array("q")
        if not self._pending:
            return
        s = np.concatenate([self._starts, *(p[0] for p in self._pending)])
        e = np.concatenate([self._ends, *(p[1] for p in self._pending)])
        self._starts, self._ends = merge_runs(s, e)
        self._pending, self._pending_n = [], 0

    def intervals(self) -> tuple[np.ndarray, np.ndarray]:
        with self._lock:
            self._compact()
            return self._starts, self._ends

    @property
    def nbytes(self) -> int:
        single = (len(self._run_starts) + len(self._run_ends)) * 8
        return single + self._starts.nbytes + self._ends.nbytes + sum(
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


def _storage_base(t: torch.Tensor) -> int:
    """The storage's base address, as ``storage_key`` has it, without building
    a storage object (data_ptr = base + storage_offset * element_size)."""
    return t.data_ptr() - int(t.storage_offset()) * t.element_size()


class Recorder:
    """Turns observed writes into intervals of the guarded storages.

    ``writes`` must be complete when the recorder is made (it is indexed by
    base address once, so a write into an unguarded tensor costs one lookup)."""

    def __init__(self, writes: dict[StorageKey, StorageWrites]) -> None:
        self.writes = writes
        self._by_base: dict[int, dict[tuple[str, int], StorageWrites]] = {}
        for (dev, index, base), sw in writes.items():
            self._by_base.setdefault(base, {})[(dev, index)] = sw

    def lookup(self, t: torch.Tensor) -> StorageWrites | None:
        """The guarded storage ``t`` views, if any (one dict lookup when none)."""
        if not self._by_base or t.is_meta:
            return None
        try:
            by_device = self._by_base.get(_storage_base(t))
        except (RuntimeError, NotImplementedError, TypeError):  # sparse etc.: not guarded
            return None
        if by_device is None:
            return None
        device = t.device
        return by_device.get((device.type, device.index or 0))

    def record(self, t: torch.Tensor, locatable: bool = True) -> None:
        sw = self.lookup(t)
        if sw is not None:
            record_into(sw, t, locatable)


def record_into(sw: StorageWrites, t: torch.Tensor, locatable: bool = True) -> None:
    """Add the bytes of the written view ``t`` (of ``sw``'s storage) to ``sw``."""
    if not locatable:
        sw.untracked_writes += 1
    elif t.is_contiguous():  # the loader's usual narrow/select of a slot
        start = int(t.storage_offset()) * t.element_size()
        if t.numel():
            sw.add_run(start, start + t.numel() * t.element_size())
    else:
        runs = view_runs(t)
        if runs is None:
            sw.untracked_writes += 1
        elif runs[0].size:
            sw.add(*runs)


# ---------------------------------------------------------------- "methods"
_WRAPPED = ("copy_", "fill_", "zero_", "__setitem__")
_hooks_lock = threading.Lock()
_active: list[Recorder] = []
_active_now: tuple[Recorder, ...] = ()  # snapshot the hooks iterate without locking
_saved: dict[str, Any] = {}


def _basic_index(index: object) -> bool:
    """Indexing that yields a view (ints, slices, None, Ellipsis)."""
    items = index if isinstance(index, tuple) else (index,)
    return all(i is None or i is Ellipsis or (isinstance(i, (int, slice)) and not isinstance(i, bool))
               for i in items)


def _notify(t: torch.Tensor, locatable: bool = True) -> None:
    for rec in _active_now:
        rec.record(t, locatable)


def _wrap_inplace(orig: Callable[..., Any]) -> Callable[..., Any]:
    def wrapper(self: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        out = orig(self, *args, **kwargs)
        _notify(self)
        return out

    wrapper.__wrapped__ = orig  # type: ignore[attr-defined]
    return wrapper


def _wrap_setitem(orig: Callable[..., Any]) -> Callable[..., Any]:
    def wrapper(self: torch.Tensor, index: Any, value: Any) -> None:
        orig(self, index, value)
        hits = [sw for rec in _active_now if (sw := rec.lookup(self)) is not None]
        if not hits:  # not a guarded storage: no need to locate the write
            return
        view = None
        if _basic_index(index):
            try:
                with torch.no_grad():
                    view = self[index]  # the view that was written
            except (IndexError, RuntimeError, TypeError):
                view = None
        for sw in hits:
            record_into(sw, self if view is None else view, locatable=view is not None)

    wrapper.__wrapped__ = orig  # type: ignore[attr-defined]
    return wrapper


class MethodHooks:
    """Context manager: while any is active, torch.Tensor's write methods report
    to every active recorder (process-wide, reference-counted, restored after)."""

    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder

    def __enter__(self) -> MethodHooks:
        global _active_now
        with _hooks_lock:
            if not _active:
                for name in _WRAPPED:
                    _saved[name] = torch.Tensor.__dict__.get(name)
                    orig = getattr(torch.Tensor, name)
                    wrap = _wrap_setitem if name == "__setitem__" else _wrap_inplace
                    setattr(torch.Tensor, name, wrap(orig))
            _active.append(self.recorder)
            _active_now = tuple(_active)
        return self

    def __exit__(self, *exc: object) -> None:
        global _active_now
        with _hooks_lock:
            _active.remove(self.recorder)
            _active_now = tuple(_active)
            if not _active:
                for name in _WRAPPED:
                    if _saved[name] is None:
                        delattr(torch.Tensor, name)
                    else:
                        setattr(torch.Tensor, name, _saved[name])
                _saved.clear()


# ---------------------------------------------------------------- "aten"
def _flatten_tensors(x: object) -> Iterable[torch.Tensor]:
    if isinstance(x, torch.Tensor):
        yield x
    elif isinstance(x, (list, tuple)):
        for y in x:
            if isinstance(y, torch.Tensor):
                yield y


class AtenRecorder(TorchDispatchMode):
    """Records every ATen write of this thread into the guarded storages."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # torch wraps __torch_dispatch__ in _disable_dynamo by default: the
        # first call imports torch._dynamo (~1.5 s) and every op pays a frame
        # hook. A loader does not compile, so the plain method is used.
        return False

    def __init__(self, recorder: Recorder) -> None:
        super().__init__()
        self.recorder = recorder
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

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        where, indexed = self._schema_writes(func)
        for i, name in where:
            arg = args[i] if i < len(args) else kwargs.get(name)
            for t in _flatten_tensors(arg):
                self.recorder.record(t, locatable=not indexed)
        return out
