"""A Finding: one rule's verdict on a group of modules."""

from __future__ import annotations

from dataclasses import dataclass, field

ERROR = "error"
WARNING = "warning"
INFO = "info"
SEVERITIES = (INFO, WARNING, ERROR)  # ascending


def severity_rank(severity: str) -> int:
    return SEVERITIES.index(severity)


@dataclass(frozen=True)
class Finding:
    """What a rule found. ``message`` is one line; ``modules`` are checkpoint
    names (or runtime prefixes where nothing is on disk); ``fix`` says what to
    change."""

    code: str
    severity: str
    message: str
    modules: tuple[str, ...] = ()
    fix: str | None = None
    data: dict = field(default_factory=dict, compare=False)

    def as_dict(self) -> dict:
        return {
            "code": self.code, "severity": self.severity, "message": self.message,
            "modules": list(self.modules), "fix": self.fix, **self.data,
        }
