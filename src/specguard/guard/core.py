"""LoadGuard: poison on entry, read back on exit, name what the load never wrote."""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable, Iterator, Sequence
from fnmatch import fnmatchcase
from typing import Any, Literal, TypeVar

import torch
from torch import nn

from specguard.errors import UsageError
from specguard.guard import poison as P
from specguard.guard.check import (
    Entry,
    ScaleBounds,
    check_nan_poisoned,
    check_replaced,
    check_tracked,
)
from specguard.guard.report import GuardFinding, LoadReport
from specguard.guard.tracking import (
    AtenRecorder,
    MethodHooks,
    Recorder,
    StorageKey,
    StorageWrites,
    storage_key,
)

Policy = Literal["raise", "warn", "report"]
Tracking = Literal["methods", "aten"]
F = TypeVar("F", bound=Callable[..., Any])

_PROBLEM_ORDER = {"never_written": 0, "partly_written": 1, "non_finite": 2, "implausible_scale": 3}


class UnloadedParametersError(RuntimeError):
    """Raised by policy ``raise``; ``.report`` holds the full LoadReport."""

    def __init__(self, report: LoadReport) -> None:
        super().__init__(str(report))
        self.report = report


class LoadGuardWarning(UserWarning):
    """Emitted by policy ``warn``."""


def named_tensors(module: nn.Module, buffers: bool = True) -> Iterator[tuple[str, torch.Tensor]]:
    """Parameters, then persistent buffers, each tensor once (tied ones under
    their first name). Non-persistent buffers are excluded: no checkpoint
    writes them (they are computed at construction, e.g. rotary tables)."""
    seen: set[int] = set()
    for name, p in module.named_parameters(remove_duplicate=True):
        seen.add(id(p))
        yield name, p
    if not buffers:
        return
    for mod_name, mod in module.named_modules():
        for b_name, b in mod._buffers.items():
            if b is None or b_name in mod._non_persistent_buffers_set or id(b) in seen:
                continue
            seen.add(id(b))
            yield (f"{mod_name}.{b_name}" if mod_name else b_name), b


class LoadGuard:
    """Context manager / decorator around any load of an ``nn.Module``.

    On entry every selected parameter and persistent buffer is poisoned in
    place (NaN bit patterns for float dtypes; a marker plus write tracking for
    dtypes where every byte is legal). On exit each is read back and the
    report names tensors never written, partly written (which experts / rows /
    cols), left non-finite, and scales with implausible magnitudes.

    Args:
        module: the module to guard; None when used as a decorator, which then
            guards the first ``nn.Module`` among the call's arguments.
        policy: ``"raise"`` (UnloadedParametersError), ``"warn"``
            (LoadGuardWarning), or ``"report"`` (only set ``.report``).
        include / exclude: fnmatch patterns on qualified tensor names.
        buffers: also guard persistent buffers.
        track_writes: how writes into integer-like tensors are recorded:
            ``"methods"`` (wrap Tensor.copy_/fill_/zero_/__setitem__, cheap, all
            threads), ``"aten"`` (a TorchDispatchMode: every ATen write of this
            thread, slower) or None (the 0xA5 marker alone, per row).
        marker: also fill integer-like tensors with 0xA5 on entry, so writes
            the recorder cannot see (numpy views, custom kernels, and under
            ``"methods"`` also ``out=`` and index ops) are still recognised by
            their changed bytes. Off (default), integer tensors are tracked
            instead of poisoned, as the loaders guarded here write through
            copy_/__setitem__, and the load saves a write pass over them;
            anything no recorded write covered is then reported unwritten.
            Always on when ``track_writes`` is None.
        scale_patterns: fnmatch patterns on a tensor's last name component that
            mark it as a scale for the magnitude check.
        scale_bounds: the plausible nonzero magnitude range for those scales.

    A body that raises is not checked (its exception propagates untouched).
    After a guarded load, tensors it did not write hold the poison: the module
    fails loudly instead of running on whatever memory held before.
    """

    def __init__(
        self,
        module: nn.Module | None = None,
        *,
        policy: Policy = "raise",
        include: Sequence[str] | None = None,
        exclude: Sequence[str] = (),
        buffers: bool = True,
        track_writes: Tracking | None = "methods",
        marker: bool = False,
        scale_patterns: Sequence[str] = ("*scale*",),
        scale_bounds: tuple[float, float] = (1e-30, 1e20),
    ) -> None:
        if policy not in ("raise", "warn", "report"):
            raise ValueError(f"policy must be 'raise', 'warn' or 'report', not {policy!r}")
        if track_writes not in ("methods", "aten", None):
            raise ValueError(f"track_writes must be 'methods', 'aten' or None, not {track_writes!r}")
        self.module = module
        self.policy: Policy = policy
        self.include = tuple(include) if include is not None else None
        self.exclude = tuple(exclude)
        self.buffers = buffers
        self.track_writes = track_writes
        self.marker = marker or track_writes is None
        self.scale_patterns = tuple(scale_patterns)
        self.bounds = ScaleBounds(*scale_bounds)
        self.report: LoadReport | None = None
        self._entries: list[Entry] = []
        self._skipped: list[tuple[str, str]] = []
        self._writes: dict[StorageKey, StorageWrites] = {}
        self._recorder: AtenRecorder | MethodHooks | None = None

    # -- options -----------------------------------------------------------
    def _options(self) -> dict[str, Any]:
        return {
            "policy": self.policy, "include": self.include, "exclude": self.exclude,
            "buffers": self.buffers, "track_writes": self.track_writes, "marker": self.marker,
            "scale_patterns": self.scale_patterns,
            "scale_bounds": (self.bounds.low, self.bounds.high),
        }

    def _selected(self, name: str) -> bool:
        if self.include is not None and not any(fnmatchcase(name, p) for p in self.include):
            return False
        return not any(fnmatchcase(name, p) for p in self.exclude)

    def _is_scale(self, name: str) -> bool:
        leaf = name.rsplit(".", 1)[-1]
        return any(fnmatchcase(leaf, p) for p in self.scale_patterns)

    # -- context manager ---------------------------------------------------
    def __enter__(self) -> LoadGuard:
        if self.module is None:
            raise TypeError("LoadGuard(module) is needed as a context manager")
        if self._recorder is not None:
            raise RuntimeError("LoadGuard is not reentrant; make one per load")
        self.report = None
        self._entries, self._skipped, self._writes = [], [], {}
        with torch.no_grad():
            for name, t in named_tensors(self.module, self.buffers):
                if self._selected(name):
                    self._arm(name, t)
        if self._writes:
            recorder = Recorder(self._writes)
            hook = AtenRecorder(recorder) if self.track_writes == "aten" else MethodHooks(recorder)
            hook.__enter__()
            self._recorder = hook
        return self

    def _arm(self, name: str, t: torch.Tensor) -> None:
        poison = P.poison_for(t.dtype)
        if poison is None:
            self._skipped.append((name, f"dtype {t.dtype} has no poison"))
            return
        if t.device.type == "meta" or t.numel() == 0:
            self._skipped.append((name, "meta tensor" if t.device.type == "meta" else "empty"))
            return
        tracked = poison.strategy is P.Strategy.TRACK and self.track_writes is not None
        if self.marker or not tracked:  # one fill_ over an integer view: memset speed
            if t.is_inference():
                with torch.inference_mode():
                    P.fill(t.detach(), poison)
            else:
                P.fill(t.detach(), poison)
        key = storage_key(t)
        self._entries.append(Entry(name, t, poison, key, self._is_scale(name)))
        if tracked:
            self._writes.setdefault(key, StorageWrites())

    def __exit__(self, exc_type: object, exc: object, tb: object) -> Literal[False]:
        if self._recorder is not None:
            self._recorder.__exit__(None, None, None)
            self._recorder = None
        if exc_type is not None:
            self._entries, self._writes = [], {}
            return False
        self.report = self.check()
        self._entries, self._writes = [], {}
        self._apply_policy(self.report)
        return False

    # -- checking ----------------------------------------------------------
    def check(self) -> LoadReport:
        """Read every guarded tensor back (called by ``__exit__``)."""
        if self.module is None:
            raise UsageError("LoadGuard.check() needs the module: use LoadGuard(module)")
        current = dict(named_tensors(self.module, self.buffers))
        findings: list[GuardFinding] = []
        with torch.no_grad():
            for e in self._entries:
                t = current.get(e.name)
                if t is None:
                    continue  # removed by the load: nothing left to be wrong
                findings += self._check_entry(e, t)
        findings.sort(key=lambda f: (f.name, _PROBLEM_ORDER[f.problem]))
        notes: tuple[str, ...] = ()
        if any(w.untracked_writes for w in self._writes.values()):
            notes = ("some writes into integer tensors were index-driven or too fine-grained "
                     "to record; the 0xA5 marker decided for those",)
        return LoadReport(tuple(findings), len(self._entries), tuple(self._skipped), notes)

    def _check_entry(self, e: Entry, t: torch.Tensor) -> list[GuardFinding]:
        replaced = t is not e.tensor or storage_key(t) != e.key or t.dtype != e.tensor.dtype
        if replaced:
            return check_replaced(e, t, self.bounds)
        if e.poison.strategy is P.Strategy.NAN:
            return check_nan_poisoned(e, t, self.bounds)
        return check_tracked(e, t, self._writes.get(e.key), self.marker)

    def _apply_policy(self, report: LoadReport) -> None:
        if report.ok or self.policy == "report":
            return
        if self.policy == "raise":
            raise UnloadedParametersError(report)
        warnings.warn(str(report), LoadGuardWarning, stacklevel=3)

    @property
    def recorder_bytes(self) -> int:
        """Memory the write recorder holds right now (intervals)."""
        return sum(w.nbytes for w in self._writes.values())

    # -- decorator ---------------------------------------------------------
    def __call__(self, fn: F) -> F:
        """Guard every call of ``fn``; the module is ``self.module`` or the
        first ``nn.Module`` argument (``self`` for a method such as
        ``load_weights``). The last report is ``wrapper.last_report``."""

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            module = self.module or next(
                (a for a in (*args, *kwargs.values()) if isinstance(a, nn.Module)), None
            )
            if module is None:
                raise TypeError(f"{fn.__qualname__}: no nn.Module argument to guard")
            guard = LoadGuard(module, **self._options())
            try:
                with guard:
                    return fn(*args, **kwargs)
            finally:
                wrapper.last_report = guard.report  # type: ignore[attr-defined]

        wrapper.last_report = None  # type: ignore[attr-defined]
        return wrapper  # type: ignore[return-value]
