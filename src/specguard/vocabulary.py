"""Base of every closed vocabulary the project prints (formats, conventions,
roles, module kinds, verdicts, severities).

A member is a ``str``: it compares and hashes equal to its word, and it
formats, serialises (json, orjson) and even reprs as the plain word, so JSON
output, messages and tuples in messages read exactly as the bare strings did.
"""

from __future__ import annotations

from enum import StrEnum


class Vocabulary(StrEnum):
    def __repr__(self) -> str:
        return repr(self.value)


__all__ = ["Vocabulary"]
