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

import reprlib

ECHO_LIMIT = 120  # characters of an echoed name or value: a 100 kB tensor name is not a line


def escaped(text: str, limit: int = ECHO_LIMIT) -> str:
    """``text`` as one printable line: control characters escaped (a newline in a
    tensor name stays ``\\n``), shortened in the middle past ``limit`` characters."""
    if not text.isprintable():
        text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    if len(text) > limit:
        keep = (limit - 5) // 2
        text = f"{text[:keep]} ... {text[-keep:]}"
    return text


_SHOWN = reprlib.Repr()  # (keyword arguments only from Python 3.12)
_SHOWN.maxlevel, _SHOWN.maxlist, _SHOWN.maxtuple, _SHOWN.maxdict = 3, 8, 8, 6
_SHOWN.maxstring, _SHOWN.maxlong, _SHOWN.maxother = 60, 40, 60


def shown(value: object, limit: int = ECHO_LIMIT) -> str:
    """A value as a message echoes it: ``repr`` bounded in depth, items and length
    (``reprlib``: a list nested 10,000 deep is ``[[[...]]]``, never a RecursionError)."""
    return escaped(_SHOWN.repr(value), limit)


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


__all__ = ["ConfigError", "LayoutError", "SpecguardError", "UsageError", "escaped", "shown"]
