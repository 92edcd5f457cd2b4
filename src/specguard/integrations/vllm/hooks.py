"""Patch a module's attributes when (or if) it is imported, and undo it.

vLLM loads general plugins in every process, usually long before it knows
which model it serves. Importing the DeepSeek-V4 quant-config modules there
would pull in the whole model package of the platform (kernels included) for
every model. So the plugin registers a post-import hook instead: the patch is
applied the moment vLLM itself imports the module, or at once when it already
has been.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import threading
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

Callback = Callable[[ModuleType], None]
ORIGINAL = "__specguard_original__"  # on each wrapper: the function it replaced
SOURCE_ATTR = "_specguard_source"  # on quant configs: the checkpoint they were built from


class _Loader(importlib.abc.Loader):
    """Delegates to the real loader, then runs the callbacks on the new module."""

    def __init__(self, inner: importlib.abc.Loader, callbacks: Sequence[Callback]) -> None:
        self.inner = inner
        self.callbacks = callbacks

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self.inner.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self.inner.exec_module(module)
        for callback in self.callbacks:
            callback(module)


class _Finder(importlib.abc.MetaPathFinder):
    def __init__(self) -> None:
        self.pending: dict[str, list[Callback]] = {}

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        callbacks = self.pending.get(fullname)
        if not callbacks:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    self.pending.pop(fullname, None)
                    spec.loader = _Loader(spec.loader, list(callbacks))
                return spec
        return None


_finder = _Finder()
_lock = threading.RLock()


def when_imported(name: str, callback: Callback) -> None:
    """Run ``callback(module)`` now if ``name`` is imported, else right after its import."""
    with _lock:
        module = sys.modules.get(name)
        if module is None:
            _finder.pending.setdefault(name, []).append(callback)
            if _finder not in sys.meta_path:
                sys.meta_path.insert(0, _finder)
            return
    callback(module)


def cancel_pending() -> None:
    """Forget callbacks for modules not imported yet (used by uninstall)."""
    with _lock:
        _finder.pending.clear()
        if _finder in sys.meta_path:
            sys.meta_path.remove(_finder)


class Patches:
    """The attributes replaced so far, so that ``undo`` restores vLLM exactly."""

    def __init__(self) -> None:
        self._done: list[tuple[Any, str, Any]] = []
        self._lock = threading.Lock()

    def replace(self, owner: Any, attr: str, make: Callable[[Any], Any]) -> bool:
        """Set ``owner.attr = make(original)`` once; False when already patched."""
        with self._lock:
            original = owner.__dict__.get(attr) if isinstance(owner, type) else getattr(owner, attr)
            if original is None or getattr(original, ORIGINAL, None) is not None:
                return False
            wrapper = make(original)
            setattr(wrapper, ORIGINAL, original)
            setattr(owner, attr, wrapper)
            self._done.append((owner, attr, original))
            return True

    def undo(self, keep: int = 0) -> None:
        """Restore every attribute replaced after the first ``keep`` replacements."""
        with self._lock:
            while len(self._done) > keep:
                owner, attr, original = self._done.pop()
                setattr(owner, attr, original)

    def __len__(self) -> int:
        return len(self._done)
