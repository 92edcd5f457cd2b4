"""`specguard lint`: run the rules, print the findings, pick the exit code."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from specguard.commands.route import resolvers
from specguard.engines.registry import keys as engine_keys
from specguard.errors import UsageError
from specguard.lint import Finding, lint, severity_rank
from specguard.lint import output as out
from specguard.lint.registry import unknown_codes
from specguard.terminal import console
from specguard.usage import EXIT_UNVOUCHED, reader_gone

UNVOUCHED_CODE = "SG205"  # lint/rules_routing.py build_unknown: modules specguard cannot vouch for


def _codes(text: str | None) -> list[str] | None:
    if not text:
        return None
    codes = [c.strip().upper() for c in text.split(",") if c.strip()]
    bad = unknown_codes(codes)
    if bad:
        raise UsageError(f"unknown rule code(s): {', '.join(bad)} (see `specguard rule --all`)")
    return codes


def run_lint(args: argparse.Namespace) -> int:
    select, ignore = _codes(args.select), _codes(args.ignore)
    every = getattr(args, "engine", None) == "all"
    runs = []  # (engine key or None, resolvers, result): one per engine with --engine all
    for key in (engine_keys() if every else (None,)):
        rs = resolvers(args, key)
        runs.append((key, rs, lint(rs, select_codes=select, ignore_codes=ignore)))
    source = " + ".join(r.checkpoint.name for r in runs[0][1])
    findings = [f for _, _, result in runs for f in result.findings]
    code = exit_code(findings, args.fail_on)  # known before printing: a reader gone early changes nothing
    try:
        if args.format == "json":
            by_rule: dict[str, int] = {}
            for _, _, result in runs:
                for rule, n in result.bytes_by_rule.items():
                    by_rule[rule] = by_rule.get(rule, 0) + n
            sys.stdout.write(out.as_json(findings, source, bytes_read=sum(by_rule.values()),
                                         total_bytes=runs[0][2].checkpoint_bytes, bytes_by_rule=by_rule) + "\n")
        elif args.format == "sarif":
            sys.stdout.write(out.as_sarif(findings, source) + "\n")
        else:
            for key, rs, result in runs:
                if key:  # --engine all: each engine's findings under its name
                    console().print(f"[bold]{key}[/] ({rs[0].vllm.name}):", highlight=False)
                out.text(result.findings, f"{source} [{key}]" if key else source, console(),
                         bytes_read=result.bytes_read, total_bytes=result.checkpoint_bytes,
                         bytes_by_rule=result.bytes_by_rule)
        sys.stdout.flush()
    except BrokenPipeError:  # `specguard lint | head -0`
        return reader_gone(code)
    return code


def exit_code(findings: Sequence[Finding], fail_on: str) -> int:
    """1: a finding at least as severe as ``fail_on``; else 3 (could not vouch) where SG205
    reports modules specguard does not model; else 0. ``never``: always 0. With ``--engine
    all`` over every engine's findings: the same order as route's exit code."""
    if fail_on == "never":
        return 0
    if any(f.code != UNVOUCHED_CODE and severity_rank(f.severity) >= severity_rank(fail_on) for f in findings):
        return 1
    return EXIT_UNVOUCHED if any(f.code == UNVOUCHED_CODE for f in findings) else 0
