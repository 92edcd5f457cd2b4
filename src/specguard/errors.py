"""One base for every error a user can cause: bad input or bad usage.

The CLI turns exactly these into one line on stderr and exit code 2; any
other exception is a bug in specguard and shows as one (``--debug``: the
traceback). ``str(error)`` is the line users see, so it names the file, key
or argument and says what is wrong.

    SpecguardError
    ├── CheckpointError   unreadable checkpoint: file, header, index, tensor
    │                     (defined in specguard.checkpoint.errors: the reader imports nothing above it)
    ├── ConfigError       a config value of the wrong type (also a ValueError, as before)
    ├── LayoutError       a config that does not say enough to lay out the model (also a ValueError)
    └── UsageError        a command-line or API argument specguard cannot act on

This module imports nothing from specguard: every stage may raise these.
"""

from __future__ import annotations


class SpecguardError(Exception):
    """Bad input or bad usage; the message is the one line users see."""


class ConfigError(SpecguardError, ValueError):
    """A config value of the wrong type; ``key`` is its dotted path."""

    def __init__(self, key: str, what: str) -> None:
        super().__init__(f"{key}: {what}")
        self.key = key


class LayoutError(SpecguardError, ValueError):
    """The config does not say enough to lay out the model (or says something no model is)."""


class UsageError(SpecguardError):
    """A command-line mistake (unknown rule code, bad option value): exit 2 like bad input."""


__all__ = ["ConfigError", "LayoutError", "SpecguardError", "UsageError"]
