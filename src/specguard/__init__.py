"""specguard: the disk is the truth, the config is a claim.

The public API (what the README shows)::

    import specguard

    r = specguard.Resolver.open("/ckpt")           # one header pass per process
    route: specguard.Route = r.route("model.layers.43.ffn.experts")
    ckpt = specguard.open_checkpoint("/ckpt")      # headers, config, byte ranges
    result = specguard.lint_resolvers([r])         # findings, as `specguard lint` prints them
    with specguard.LoadGuard(model): ...           # needs torch; imported on first use

Every error a user can cause is a ``specguard.SpecguardError``.
"""

from __future__ import annotations

from specguard._version import __version__
from specguard.errors import ConfigError, LayoutError, SpecguardError, UsageError

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy knows the name)
if TYPE_CHECKING:
    from typing import Any

    from specguard.checkpoint.errors import CheckpointError
    from specguard.checkpoint.source import Checkpoint, open_checkpoint
    from specguard.guard import LoadGuard
    from specguard.lint import Finding, LintResult
    from specguard.lint import lint as lint_resolvers
    from specguard.resolve import Resolver, Route

# Imported on first use, so `import specguard.checkpoint` (the vLLM plugin, the
# factory) stays cheap and LoadGuard's torch is loaded only when asked for.
_LAZY = {
    "CheckpointError": "specguard.checkpoint.errors",
    "Checkpoint": "specguard.checkpoint.source",
    "open_checkpoint": "specguard.checkpoint.source",
    "Finding": "specguard.lint",
    "LintResult": "specguard.lint",
    "lint_resolvers": "specguard.lint",  # specguard.lint.lint (``specguard.lint`` is the subpackage)
    "LoadGuard": "specguard.guard",
    "Resolver": "specguard.resolve",
    "Route": "specguard.resolve",
}


_RENAMED = {"lint_resolvers": "lint"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from importlib import import_module

        return getattr(import_module(_LAZY[name]), _RENAMED.get(name, name))
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "Checkpoint",
    "CheckpointError",
    "ConfigError",
    "Finding",
    "LayoutError",
    "LintResult",
    "LoadGuard",
    "Resolver",
    "Route",
    "SpecguardError",
    "UsageError",
    "__version__",
    "lint_resolvers",
    "open_checkpoint",
]
