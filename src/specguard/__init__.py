"""specguard: the disk is the truth, the config is a claim.

The public API (what the README shows)::

    import specguard

    r = specguard.Resolver.open("/ckpt")           # one header pass per process
    route: specguard.Route = r.route("model.layers.43.ffn.experts")
    ckpt = specguard.open_checkpoint("/ckpt")      # headers, config, byte ranges
    result = specguard.lint_resolvers([r])         # findings, as `specguard lint` prints them
    with specguard.LoadGuard(model): ...           # needs torch; imported on first use

Names (``__all__``; all but the errors and ``__version__`` are imported on first use):

- ``Resolver``, ``Route``: per runtime prefix, what is stored, declared and built, and the verdict
- ``open_checkpoint``, ``Checkpoint``: a local directory or file, a Hub repo id (cache or ``remote``)
- ``lint_resolvers`` (``specguard.lint.lint``), ``Finding``, ``LintResult``: the rules
- ``LoadGuard``: name what a torch load never wrote (needs torch)
- ``SpecguardError`` and its subclasses ``CheckpointError``, ``ConfigError``, ``LayoutError``,
  ``UsageError``: every error a user can cause
- ``__version__``: the package's version (``_version.py``, which pyproject reads)
"""

from __future__ import annotations

from specguard import errors
from specguard._version import __version__
from specguard.errors import ConfigError, LayoutError, SpecguardError, UsageError

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (start-up: mypy knows the name)
if TYPE_CHECKING:
    from specguard.checkpoint.errors import CheckpointError
    from specguard.checkpoint.source import Checkpoint, open_checkpoint
    from specguard.guard import LoadGuard
    from specguard.lint import Finding, LintResult
    from specguard.lint import lint as lint_resolvers
    from specguard.resolve import Resolver, Route

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

# Imported on first use, so `import specguard.checkpoint` (the vLLM plugin, the
# factory) stays cheap and LoadGuard's torch is loaded only when asked for:
# name -> (module, attribute).
_LAZY = {
    "CheckpointError": ("specguard.checkpoint.errors", "CheckpointError"),
    "Checkpoint": ("specguard.checkpoint.source", "Checkpoint"),
    "open_checkpoint": ("specguard.checkpoint.source", "open_checkpoint"),
    "Finding": ("specguard.lint", "Finding"),
    "LintResult": ("specguard.lint", "LintResult"),
    "lint_resolvers": ("specguard.lint", "lint"),  # ``specguard.lint`` is the subpackage
    "LoadGuard": ("specguard.guard", "LoadGuard"),
    "Resolver": ("specguard.resolve", "Resolver"),
    "Route": ("specguard.resolve", "Route"),
}


def __getattr__(name: str) -> object:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    module, attribute = _LAZY[name]
    try:
        value = getattr(importlib.import_module(module), attribute)
    except ImportError as e:  # LoadGuard without torch: say which extra to install
        raise AttributeError(f"specguard.{name} needs {e.name} (pip install 'specguard[torch]')") from e
    globals()[name] = value  # the next lookup is a plain attribute
    return value


def __dir__() -> list[str]:
    """The public names (lazy ones included) and the subpackages already imported."""
    module = type(errors)  # types.ModuleType, without importing types
    loaded = [k for k, v in globals().items() if isinstance(v, module) and not k.startswith("_")]
    return sorted({*__all__, *loaded})
