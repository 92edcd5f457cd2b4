"""One error type for every unreadable input; its message is the one line users see."""

from __future__ import annotations

from specguard.errors import SpecguardError


class CheckpointError(SpecguardError):
    """Bad input: names the file, the tensor or key, and what is wrong."""

    def __init__(self, where: str, what: str) -> None:
        super().__init__(f"{where}: {what}")
        self.where = where
        self.what = what
