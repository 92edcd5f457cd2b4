"""The one question the plugin asks specguard: what is stored behind a runtime prefix?

Everything vLLM-independent lives in specguard's stages; this adapter only
asks the Resolver and turns its Route into a ``Stored`` answer, or None where
the disk cannot say (no such module, mixed formats, bytes that stay ambiguous).
"""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING

from specguard.formats.scheme import AMBIGUOUS, MIXED, UNKNOWN, Scheme

if TYPE_CHECKING:
    from specguard.resolve import Resolver

log = logging.getLogger("vllm.specguard")


@dataclass(frozen=True)
class Stored:
    """What the checkpoint holds for one runtime module."""

    scheme: Scheme
    role: str  # main, draft, embedding, head
    checkpoint_names: tuple[str, ...]
    # why specguard cannot say what the engine builds here (no recorded plan of the architecture,
    # a quant stack not modelled): the plugin then leaves the model's routing to vLLM
    unmodelled: str = ""

    @property
    def format(self) -> str:
        return self.scheme.format


def stored(source: str, runtime_prefix: str, draft_method: str | None = None) -> Stored | None:
    """The stored scheme behind ``runtime_prefix`` in checkpoint ``source``, if the disk says.

    ``draft_method`` is how vLLM serves the draft (``mtp``/``dspark``); it picks the
    layout's runtime names (DSpark builds may use an empty root). None: from config.json.
    Never raises: a checkpoint specguard cannot read keeps vLLM's routing (said once).
    """
    key = (source, draft_method)
    if key in _failed:
        return None
    from specguard.resolve import UnknownPrefixError

    try:
        route = _resolver(source, draft_method).route(runtime_prefix)
    except UnknownPrefixError:
        return None  # a module the checkpoint does not name: vLLM's own choice stands
    except Exception as exc:
        with _failed_lock:
            _failed.add(key)
        say_unreadable(source, exc)
        return None
    scheme = route.stored
    if scheme is None or scheme.format in (UNKNOWN, AMBIGUOUS, MIXED):
        return None
    built = route.vllm
    unmodelled = built.reason if built is not None and built.method in _UNMODELLED else ""
    return Stored(scheme, route.role.name, tuple(route.checkpoint_names), unmodelled)


_UNMODELLED = ("no plan", "unknown")  # engines.vllm.v0_33.NO_PLAN, engines.NOT_MODELLED


_failed: set[tuple[str, str | None]] = set()
_failed_lock = threading.Lock()
_said: set[str] = set()


def forget_failures() -> None:
    """Read every checkpoint afresh (tests; a checkpoint repaired while vLLM runs)."""
    with _failed_lock:
        _failed.clear()
        _said.clear()


def say_unreadable(source: str, exc: BaseException) -> None:
    """One warning per checkpoint specguard cannot read, however many of its readers fail."""
    where = os.path.realpath(source) if os.path.exists(source) else source
    with _failed_lock:
        first = where not in _said
        _said.add(where)
    if first:
        log.warning("specguard: cannot read %s (%s: %s); vLLM's routing is kept",
                    source, type(exc).__name__, exc)


def _resolver(source: str, draft_method: str | None) -> Resolver:
    """The checkpoint's Resolver (one header pass per checkpoint per process, memoized), modelling
    the vLLM version this process runs.

    Read what the engine itself reads: the revision and download directory vLLM
    resolves the model with, and shards that are symlinks to another disk.
    """
    from specguard.integrations.vllm.settings import running_engine
    from specguard.resolve import Resolver

    revision, cache_dir = engine_source_options(source)
    return Resolver.open(source, draft_method=draft_method, revision=revision, cache_dir=cache_dir,
                         follow_links=True, engine=running_engine())


def engine_source_options(source: str) -> tuple[str | None, str | None]:
    """(revision, download_dir) vLLM uses for ``source``: the target's or the draft's
    ModelConfig, whichever names it; a local path has no revision."""
    from vllm.config import get_current_vllm_config_or_none

    cfg = get_current_vllm_config_or_none()
    if cfg is None:
        return None, None
    cache_dir = getattr(getattr(cfg, "load_config", None), "download_dir", None) or None
    if os.path.exists(source):
        return None, cache_dir
    spec = getattr(cfg, "speculative_config", None)
    for model_config in (getattr(cfg, "model_config", None), getattr(spec, "draft_model_config", None)):
        if model_config is not None and str(getattr(model_config, "model", "")) == source:
            return getattr(model_config, "revision", None) or None, cache_dir
    return None, cache_dir
