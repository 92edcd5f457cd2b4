"""Engines as values: each modelled engine version under its key (``vllm-0.33``).

An entry names the engine as messages print it, the engine model class that
answers ``builds``/``refusals`` for one checkpoint, and the plans it reads
(``specguard.plans``, recorded from that engine). ``Resolver(..., engine=KEY)``
picks one; the default is ``DEFAULT``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

from specguard.errors import UsageError

DEFAULT = "vllm-0.33"


@dataclass(frozen=True)
class Engine:
    """One engine version: its key, its printed name, and how to build its model of a checkpoint."""

    key: str  # registry key and plans/ folder: "vllm-0.33"
    name: str  # as messages print it: "vLLM 0.33"
    model: Callable[..., Any]  # (config, hf_quant_config, **options) -> EngineModel
    layout: str = "vllm"  # whose runtime prefixes its routes use (layouts.layout_for's engine)
    # the vLLM plugin's patches were run against this version's own classes (docs/engines.md
    # "The plugin per version"): on it the plugin routes by the disk, on any other it patches nothing
    plugin: bool = False

    @property
    def platforms(self) -> tuple[str, ...]:
        """The platform classes its model distinguishes (``fix --platform all``)."""
        return tuple(getattr(self.model, "platforms", ()))


def _vllm_033() -> Engine:
    from specguard.engines.vllm.v0_33 import ENGINE, Vllm033

    return Engine("vllm-0.33", ENGINE, Vllm033, plugin="vllm-0.33" in _PLUGIN)


def _vllm_032() -> Engine:
    from specguard.engines.vllm.v0_32 import ENGINE, PLAN_ENGINE, Vllm032

    return Engine(PLAN_ENGINE, ENGINE, Vllm032, plugin=PLAN_ENGINE in _PLUGIN)


def _sglang_0523() -> Engine:
    from specguard.engines.sglang.v0_5_23 import ENGINE, PLAN_ENGINE, Sglang0523

    return Engine(PLAN_ENGINE, ENGINE, Sglang0523, layout="sglang")


_FACTORIES: dict[str, Callable[[], Engine]] = {"vllm-0.33": _vllm_033, "vllm-0.32": _vllm_032,
                                               "sglang-0.5.23": _sglang_0523}
_BUILT: dict[str, Engine] = {}
# The versions the vLLM plugin runs on (an entry's ``plugin``): its patches were run against
# their classes (tests/integrations/plugin_checks.py; 0.32 in tests/engines/vllm_032_probe.py).
_PLUGIN: set[str] = {"vllm-0.33", "vllm-0.32"}


def installed() -> str:
    """The modelled engine installed in this environment (vLLM by its package metadata, not
    imported), else ``DEFAULT``, the newest vLLM modelled: ``--engine``'s default."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        key = "vllm-" + ".".join(version("vllm").split(".")[:2])
    except PackageNotFoundError:
        return DEFAULT
    return key if key in _FACTORIES else DEFAULT


def vllm_key(version: str) -> str | None:
    """The registry key a vLLM release falls under (``0.32.1rc1`` -> ``vllm-0.32``), None if unparsable."""
    parts = version.split(".")
    try:
        return f"vllm-{int(parts[0])}.{int(parts[1])}"
    except (IndexError, ValueError):
        return None


def plugin_engine(version: str) -> Engine | None:
    """The engine the vLLM plugin routes as on vLLM ``version``: a registered vLLM entry whose
    plans are recorded and whose classes the patches were checked against; else None (the
    plugin then patches nothing)."""
    key = plugin_key(version)
    return engine(key) if key is not None else None


def plugin_key(version: str) -> str | None:
    """``plugin_engine``'s key, answered without importing the engine model (the plugin asks at
    vLLM's start-up, where importing specguard's stages costs every model)."""
    key = vllm_key(version)
    return key if key in _PLUGIN and key in _FACTORIES and _plans_recorded(key) else None


def _plans_recorded(key: str) -> bool:
    """plans/<key>/ holds recorded plans (read off the disk: importing specguard.plans would pull
    its dependencies, e.g. orjson, into vLLM's start-up)."""
    from pathlib import Path

    folder = Path(__file__).resolve().parents[1] / "plans" / key
    return folder.is_dir() and any(p.suffix == ".json" and not p.name.startswith("_") for p in folder.iterdir())


def plugin_versions() -> tuple[str, ...]:
    """The vLLM minor versions the plugin runs on, as messages print them (``0.33.x``)."""
    return tuple(k.removeprefix("vllm-") + ".x" for k in _FACTORIES
                 if k.startswith("vllm-") and plugin_key(k.removeprefix("vllm-")) is not None)


def keys() -> tuple[str, ...]:
    """Every registered engine key."""
    return tuple(_FACTORIES)


def engine(key: str = DEFAULT) -> Engine:
    """The engine registered as ``key``; a UsageError names the known ones otherwise."""
    hit = _BUILT.get(key)
    if hit is None:
        factory = _FACTORIES.get(key)
        if factory is None:
            raise UsageError(f"unknown engine {key!r}; known: {', '.join(_FACTORIES)}")
        hit = _BUILT[key] = factory()
    return hit


@contextmanager
def launched_with(key: str, **options: Any) -> Iterator[None]:
    """Within the block, ``key``'s engine model is built with these launch options (SGLang's
    ``--speculative-draft-model-quantization`` as ``draft_quantization``): every Resolver of the
    run (route, lint, fix, report) models the engine as the user starts it."""
    base = engine(key)
    _BUILT[key] = replace(base, model=partial(base.model, **options))
    try:
        yield
    finally:
        _BUILT[key] = base


def register(key: str, factory: Callable[[], Engine], *, plugin: bool = False) -> None:
    """Add an engine version (``factory`` builds its entry on first use; ``plugin``: the vLLM
    plugin runs on it, once its patches were run against its classes)."""
    _FACTORIES[key] = factory
    _BUILT.pop(key, None)
    (_PLUGIN.add if plugin else _PLUGIN.discard)(key)


__all__ = ["DEFAULT", "Engine", "engine", "installed", "keys", "launched_with", "plugin_engine", "plugin_key",
           "plugin_versions", "register", "vllm_key"]
