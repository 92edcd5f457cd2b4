"""A Finding: one rule's verdict on a group of modules."""

from __future__ import annotations

from dataclasses import dataclass, field

from specguard.declared.edits import Fix
from specguard.vocabulary import Vocabulary


class Severity(Vocabulary):
    """How bad a finding is, in ascending order."""

    INFO = "info"
    WARNING = "warning"
    ERROR = "error"


INFO, WARNING, ERROR = Severity.INFO, Severity.WARNING, Severity.ERROR
SEVERITIES = tuple(Severity)  # ascending


def severity_rank(severity: str) -> int:
    return SEVERITIES.index(Severity(severity))


@dataclass(frozen=True)
class Finding:
    """What a rule found. ``message`` is one line; ``modules`` are checkpoint
    names (or runtime prefixes where nothing is on disk); ``fix`` says what to
    change, as text and as edits (declared/edits.py ``Fix``). Rules make them
    through their registered code (lint/registry.py ``Rule.finding``)."""

    code: str
    severity: Severity
    message: str
    modules: tuple[str, ...] = ()
    fix: Fix | None = None
    data: dict = field(default_factory=dict, compare=False)

    @property
    def edits(self) -> list:
        return list(self.fix.edits) if self.fix else []

    def as_dict(self) -> dict:
        fix = self.fix.as_dict() if self.fix else {"applicability": None, "platforms": [], "edits": [],
                                                    "reencode": [], "targets": []}
        return {
            "code": self.code, "severity": self.severity, "message": self.message,
            "modules": list(self.modules), "fix": self.fix.message if self.fix else None, **fix, **self.data,
        }
