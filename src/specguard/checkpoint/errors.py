"""One error type for every unreadable input; its message is the one line users see."""

from __future__ import annotations

from specguard.errors import SpecguardError, escaped

WHERE_LIMIT = 240  # a path and a tensor name
WHAT_LIMIT = 400


class CheckpointError(SpecguardError):
    """Bad input: names the file, the tensor or key, and what is wrong.

    Both parts are echoed through ``escaped``: whatever a hostile file names, the
    message stays one line of bounded length (callers shorten each name and value
    they echo with ``escaped`` / ``shown``; this is the backstop)."""

    def __init__(self, where: str, what: str) -> None:
        where, what = escaped(where, WHERE_LIMIT), escaped(what, WHAT_LIMIT)
        super().__init__(f"{where}: {what}")
        self.where = where
        self.what = what


def named(where: str, name: str) -> str:
    """``where [name]``, the name escaped and shortened: how a message names an entry."""
    return f"{where} [{escaped(name)}]"
