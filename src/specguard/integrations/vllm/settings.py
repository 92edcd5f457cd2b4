"""What the plugin does in this process: read once from the environment.

``SPECGUARD_VLLM=off|log|fix`` (default ``fix``): ``off`` patches nothing,
``log`` patches but only logs where vLLM's choice differs from the disk,
``fix`` routes each module by what is stored.
``SPECGUARD_VLLM_GUARD=raise|warn`` (default ``raise``): what the LoadGuard
around the draft model's weight load does with a parameter the load never wrote.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from dataclasses import dataclass

MODE_ENV = "SPECGUARD_VLLM"
GUARD_ENV = "SPECGUARD_VLLM_GUARD"

OFF, LOG, FIX = "off", "log", "fix"
MODES = (OFF, LOG, FIX)
RAISE, WARN = "raise", "warn"
GUARD_POLICIES = (RAISE, WARN)

@dataclass(frozen=True)
class Settings:
    mode: str = FIX
    guard: str = RAISE


_current = Settings()


def current() -> Settings:
    """The settings the installed patches run with."""
    return _current


def set_current(settings: Settings) -> None:
    global _current
    _current = settings


class SettingsError(ValueError):
    """An environment variable holds a value the plugin does not know."""


def read_settings(environ: Mapping[str, str] | None = None) -> Settings:
    """Settings from ``environ`` (default ``os.environ``); unknown values raise SettingsError."""
    env = os.environ if environ is None else environ
    mode = _choice(env, MODE_ENV, MODES, FIX)
    guard = _choice(env, GUARD_ENV, GUARD_POLICIES, RAISE)
    return Settings(mode, guard)


def _choice(env: Mapping[str, str], key: str, allowed: tuple[str, ...], default: str) -> str:
    raw = env.get(key, "").strip().lower()
    if not raw:
        return default
    if raw not in allowed:
        raise SettingsError(f"{key}={env[key]!r} is not one of {'|'.join(allowed)}")
    return raw


def version_supported(version: str) -> bool:
    """True for the vLLM releases the patches were checked against (``0.33.0``, ``0.32.1rc1``, ...):
    a registered engine version with recorded plans and ``plugin`` set (engines/registry.py)."""
    from specguard.engines.registry import plugin_key

    return plugin_key(version) is not None


@functools.cache
def running_engine() -> str:
    """The registry key of the vLLM this process runs (``vllm-0.32``): the engine model the
    plugin asks what is built. The newest modelled vLLM where the plugin does not support it
    (``register`` patches nothing then; ``install`` called directly, as tests do, still routes)."""
    from importlib.metadata import PackageNotFoundError, version

    from specguard.engines.registry import DEFAULT, plugin_key

    try:
        key = plugin_key(version("vllm"))
    except PackageNotFoundError:
        return DEFAULT
    return key or DEFAULT
