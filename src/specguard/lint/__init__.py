"""`specguard lint`: every contradiction between config and disk, as stable rules.

Importing the rule modules registers them (lint/registry.py).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from specguard.checkpoint.source import gc_paused
from specguard.lint import (  # noqa: F401  (registration)
    rules_draft,
    rules_engine,
    rules_integrity,
    rules_patterns,
    rules_routing,
    rules_scales,
    rules_structure,
)
from specguard.lint.context import LintContext
from specguard.lint.finding import SEVERITIES, Finding, severity_rank
from specguard.lint.registry import RULES, Rule, select
from specguard.resolve import Resolver

__all__ = ["RULES", "SEVERITIES", "Finding", "LintResult", "Rule", "lint", "severity_rank"]


@dataclass(frozen=True)
class LintResult:
    findings: tuple[Finding, ...]
    bytes_by_rule: dict[str, int]  # tensor bytes each rule read (header-only rules: 0)
    checkpoint_bytes: int

    @property
    def bytes_read(self) -> int:
        return sum(self.bytes_by_rule.values())

    def worst(self) -> str | None:
        return max((f.severity for f in self.findings), key=severity_rank, default=None)


def lint(resolvers: list[Resolver], *, select_codes: Iterable[str] | None = None,
         ignore_codes: Iterable[str] | None = None) -> LintResult:
    """Run the selected rules over a target (and optional drafter) checkpoint."""
    with gc_paused():  # the content rules build large transient arrays of small objects
        return _lint(resolvers, select_codes, ignore_codes)


def _lint(resolvers: list[Resolver], select_codes: Iterable[str] | None,
          ignore_codes: Iterable[str] | None) -> LintResult:
    ctx = LintContext(resolvers)
    findings: list[Finding] = []
    bytes_by_rule: dict[str, int] = {}
    for x in resolvers:  # each run counts the pages it reads once (an opened checkpoint may be linted again)
        x.checkpoint.pages_read.clear()
    for r in select(select_codes, ignore_codes):
        before = sum(x.checkpoint.bytes_read[0] for x in resolvers)
        findings.extend(r.check(ctx))
        bytes_by_rule[r.code] = sum(x.checkpoint.bytes_read[0] for x in resolvers) - before
    for f in findings:  # every finding names the engine it is a promise about (JSON "engine")
        f.data.setdefault("engine", ctx.engine_name)
    findings.sort(key=lambda f: (-severity_rank(f.severity), f.code))
    return LintResult(tuple(findings), bytes_by_rule, sum(x.checkpoint.total_bytes for x in resolvers))
