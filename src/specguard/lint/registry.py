"""Rules with stable codes, selectable by prefix (ruff style: SG2 selects SG2xx).

A rule's code, name, default severity and one-line summary are typed once:

    SG201 = rule("SG201", "stored-format-differs-from-declared", ERROR, "...")

    @SG201                       # registers the check, a ``(LintContext) -> Iterable[Finding]``
    def stored_differs(ctx): yield SG201.finding(message, modules, fix)

Its documentation
lives in docs/rules/<CODE>.md in four parts (What it does / Why is this bad? /
Example / Use instead), printed by ``specguard rule CODE``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

from specguard.declared.edits import Fix
from specguard.lint.finding import Finding, Severity

if TYPE_CHECKING:
    from specguard.lint.context import LintContext

Check = Callable[["LintContext"], Iterable[Finding]]


def _unset(ctx: LintContext) -> Iterable[Finding]:
    raise TypeError("rule declared without a check")


@dataclass(eq=False)
class Rule:
    code: str
    name: str
    severity: Severity
    summary: str
    reads_bytes: bool
    check: Check = field(default=_unset, repr=False)

    def __call__(self, fn: Check) -> Check:
        """Decorator: ``fn`` is this rule's check."""
        self.check = fn
        return fn

    def finding(self, message: str, modules: Iterable[str] = (), fix: Fix | str | None = None, *,
                severity: Severity | None = None, data: dict | None = None) -> Finding:
        """A finding of this rule (its default severity unless the finding's case sets one);
        a fix given as text is advice (``Fix`` display-only)."""
        if isinstance(fix, str):
            fix = Fix(fix)
        return Finding(self.code, severity or self.severity, message, tuple(modules), fix, data or {})


RULES: dict[str, Rule] = {}


def rule(code: str, name: str, severity: Severity, summary: str, *, reads_bytes: bool = False) -> Rule:
    """Register a rule under a stable code; decorate its check with the result."""
    if code in RULES:
        raise ValueError(f"rule code {code} registered twice")
    RULES[code] = Rule(code, name, severity, summary, reads_bytes)
    return RULES[code]


def select(select: Iterable[str] | None = None, ignore: Iterable[str] | None = None) -> list[Rule]:
    """Rules whose code starts with a selected prefix and with no ignored one."""
    chosen = [r for code, r in sorted(RULES.items()) if not select or any(code.startswith(p) for p in select)]
    return [r for r in chosen if not ignore or not any(r.code.startswith(p) for p in ignore)]


def unknown_codes(prefixes: Iterable[str]) -> list[str]:
    return [p for p in prefixes if not any(code.startswith(p) for code in RULES)]


def rule_doc(code: str) -> str | None:
    """The rule's documentation page (shipped inside the package)."""
    try:
        return resources.files("specguard.lint").joinpath("docs", f"{code}.md").read_text()
    except (FileNotFoundError, OSError):
        return None


def rule_index() -> str:
    """lint/docs/rules.json's text: each rule's name, severity and summary by code, which
    `specguard rule` reads without importing the rules (scripts/refresh_rule_index.py writes it)."""
    import json

    index = {code: {"name": r.name, "severity": str(r.severity), "summary": r.summary}
             for code, r in sorted(RULES.items())}
    return json.dumps(index, indent=1, ensure_ascii=False) + "\n"


def docs_dir() -> Path:
    return Path(str(resources.files("specguard.lint").joinpath("docs")))
