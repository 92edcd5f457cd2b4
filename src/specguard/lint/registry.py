"""Rules with stable codes, selectable by prefix (ruff style: SG2 selects SG2xx).

Each rule is a function ``(LintContext) -> Iterable[Finding]`` registered with
its code, name, default severity and a one-line summary; its documentation
lives in docs/rules/<CODE>.md in four parts (What it does / Why is this bad? /
Example / Use instead), printed by ``specguard rule CODE``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

from specguard.lint.finding import Finding, Severity

if TYPE_CHECKING:
    from specguard.lint.context import LintContext

Check = Callable[["LintContext"], Iterable[Finding]]


@dataclass(frozen=True)
class Rule:
    code: str
    name: str
    severity: Severity
    summary: str
    reads_bytes: bool
    check: Check


RULES: dict[str, Rule] = {}


def rule(code: str, name: str, severity: Severity, summary: str, *,
         reads_bytes: bool = False) -> Callable[[Check], Check]:
    """Register a rule function under a stable code."""

    def register(fn: Check) -> Check:
        if code in RULES:
            raise ValueError(f"rule code {code} registered twice")
        RULES[code] = Rule(code, name, severity, summary, reads_bytes, fn)
        return fn

    return register


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
