"""`specguard lint`: run the rules, print the findings, pick the exit code."""

from __future__ import annotations

import argparse
import sys

from specguard.commands.route import resolvers
from specguard.errors import UsageError
from specguard.lint import lint, severity_rank
from specguard.lint import output as out
from specguard.lint.registry import unknown_codes
from specguard.terminal import console
from specguard.usage import reader_gone


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
    rs = resolvers(args)
    result = lint(rs, select_codes=select, ignore_codes=ignore)
    source = " + ".join(r.checkpoint.name for r in rs)
    code = _exit_code(result.worst(), args.fail_on)  # known before printing: a reader gone early changes nothing
    try:
        if args.format == "json":
            sys.stdout.write(out.as_json(result.findings, source, bytes_read=result.bytes_read,
                                         total_bytes=result.checkpoint_bytes, bytes_by_rule=result.bytes_by_rule)
                             + "\n")
        elif args.format == "sarif":
            sys.stdout.write(out.as_sarif(result.findings, source) + "\n")
        else:
            out.text(result.findings, source, console(), bytes_read=result.bytes_read,
                     total_bytes=result.checkpoint_bytes, bytes_by_rule=result.bytes_by_rule)
        sys.stdout.flush()
    except BrokenPipeError:  # `specguard lint | head -0`
        return reader_gone(code)
    return code


def _exit_code(worst: str | None, fail_on: str) -> int:
    if fail_on == "never" or worst is None:
        return 0
    return 1 if severity_rank(worst) >= severity_rank(fail_on) else 0
