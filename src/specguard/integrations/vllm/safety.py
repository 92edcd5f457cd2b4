"""The plugin runs inside vLLM: a failure of specguard's own never reaches vLLM.

Every deferred import hook and every patched method is guarded by this module.
On an exception of specguard's own (a missing dependency, a bug, a checkpoint it
cannot read) it logs one warning naming the cause and does exactly what vLLM
would have done unpatched. Two kinds of exception pass through untouched:
those vLLM itself raised (marked with ``from_vllm``) and the guard's deliberate
``DraftLoadError`` (marked by its class attribute), since both are vLLM's or the
user's chosen behaviour, not specguard's failure.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable
from typing import Any, TypeVar

log = logging.getLogger("vllm.specguard")

PASS_ATTR = "__specguard_passthrough__"
E = TypeVar("E", bound=BaseException)

_warned: set[str] = set()
_warned_lock = threading.Lock()


def from_vllm(exc: E) -> E:
    """Mark ``exc`` as vLLM's own, so the safety net re-raises it unchanged."""
    setattr(exc, PASS_ATTR, True)
    return exc


def passes_through(exc: BaseException) -> bool:
    return bool(getattr(exc, PASS_ATTR, False)) or not isinstance(exc, Exception)


def warn_once(what: str, exc: BaseException) -> None:
    """One warning per distinct failure: a hot path must not flood vLLM's log."""
    key = f"{what}|{type(exc).__name__}|{exc}"
    with _warned_lock:
        if key in _warned:
            return
        _warned.add(key)
    log.warning("specguard: %s failed (%s: %s); vLLM's behaviour there is unchanged",
                what, type(exc).__name__, exc)


def method(
    what: str, patched: Callable[..., Any], original: Callable[..., Any],
    fallback: Callable[..., Any] | None = None,
) -> Callable[..., Any]:
    """``patched(*args)``, or vLLM's answer (``fallback``, default ``original``) when
    specguard's own code in it fails."""

    @functools.wraps(original)
    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return patched(*args, **kwargs)
        except Exception as exc:
            if passes_through(exc):
                raise
            warn_once(what, exc)
        return (fallback or original)(*args, **kwargs)

    return call
