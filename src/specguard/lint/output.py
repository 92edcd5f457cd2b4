"""Lint output: human text (grouped, with the fix), JSON, SARIF 2.1.0."""

from __future__ import annotations

import json
from collections.abc import Sequence

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from specguard._version import __version__
from specguard.declared.edits import Applicability, Fix
from specguard.lint.finding import ERROR, INFO, WARNING, Finding
from specguard.lint.registry import RULES, rule_doc

_STYLE = {ERROR: "bold red", WARNING: "yellow", INFO: "cyan"}
SARIF_SCHEMA = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
_SARIF_LEVEL = {ERROR: "error", WARNING: "warning", INFO: "note"}


def text(findings: Sequence[Finding], source: str, console: Console, *, bytes_read: int, total_bytes: int,
         bytes_by_rule: dict[str, int]) -> None:
    """``CODE severity: message`` then the modules and the fix, one finding per block."""
    for f in findings:
        console.print(f"[bold]{f.code}[/] [{_STYLE[f.severity]}]{f.severity}[/]: {escape(f.message)}")
        if f.fix and console.soft_wrap:  # a pipe: one line, as written
            console.print(f"  [green]fix{escape(_applies(f.fix))}:[/] {escape(f.fix.message)}")
        elif f.fix:  # a terminal: wrapped at words, each line under the fix's first word (a hanging indent)
            grid = Table.grid(padding=(0, 1, 0, 0))
            grid.add_column(no_wrap=True)
            grid.add_column(overflow="fold")
            grid.add_row(Text(f"  fix{_applies(f.fix)}:", style="green"), Text(f.fix.message))
            console.print(grid)
    counts = {s: sum(1 for f in findings if f.severity == s) for s in (ERROR, WARNING, INFO)}
    summary = ", ".join(f"{n} {s}{'s' if n != 1 else ''}" for s, n in counts.items() if n) or "no findings"
    frac = f" ({bytes_read / total_bytes:.3%} of the checkpoint, in whole 4 KiB pages)" if total_bytes else ""
    readers = ", ".join(f"{code} {n:,}" for code, n in bytes_by_rule.items() if n)
    console.print(escape(f"{source}: {summary}; read {bytes_read:,} bytes of tensor data{frac}"
                         + (f" [{readers}; every other rule: headers only]" if readers else "")), highlight=False)


def _applies(fix: Fix) -> str:
    """`` (safe)``, `` (platform-specific: cuda, rocm)``, `` (needs-reencode)``; advice: nothing."""
    if fix.applicability == Applicability.DISPLAY:
        return ""
    where = f": {', '.join(fix.platforms)}" if fix.platforms else ""
    return f" ({fix.applicability}{where})"


LINT_SCHEMA_VERSION = 3  # 3 since every finding carries ``engine`` (docs/json.md)


def as_json(findings: Sequence[Finding], source: str, *, bytes_read: int, total_bytes: int,
            bytes_by_rule: dict[str, int]) -> str:
    return json.dumps({
        "schema": LINT_SCHEMA_VERSION, "checkpoint": source, "bytes_read": bytes_read, "checkpoint_bytes": total_bytes,
        "bytes_read_by_rule": bytes_by_rule,
        "findings": [f.as_dict() for f in findings],
    }, indent=1)


def as_sarif(findings: Sequence[Finding], source: str, artifact: str = "config.json") -> str:
    """SARIF 2.1.0: one run, the rules that fired as reportingDescriptors, modules as logical locations."""
    used = sorted({f.code for f in findings})
    index = {code: i for i, code in enumerate(used)}
    rules = []
    for code in used:
        r = RULES[code]
        doc = rule_doc(code) or r.summary
        rules.append({
            "id": code, "name": r.name,
            "shortDescription": {"text": r.summary},
            "fullDescription": {"text": r.summary},
            "help": {"text": doc, "markdown": doc},
            "defaultConfiguration": {"level": _SARIF_LEVEL[r.severity]},
        })
    results = []
    for f in findings:
        results.append({
            "ruleId": f.code, "ruleIndex": index[f.code], "level": _SARIF_LEVEL[f.severity],
            "message": {"text": f.message + (f" Fix: {f.fix.message}" if f.fix else "")},
            "locations": [{
                "physicalLocation": {"artifactLocation": {"uri": artifact, "uriBaseId": "CHECKPOINT"}},
                "logicalLocations": [{"fullyQualifiedName": m, "kind": "module"} for m in f.modules[:50]],
            }],
            "properties": {"modules": len(f.modules)},
        })
    return json.dumps({
        "$schema": SARIF_SCHEMA, "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {
                "name": "specguard", "version": __version__, "semanticVersion": __version__,
                "rules": rules,
            }},
            "originalUriBaseIds": {"CHECKPOINT": {"description": {"text": source}}},
            "results": results,
        }],
    }, indent=1)
