"""`specguard rule`: explain a lint rule, or list them all."""

from __future__ import annotations

import argparse

from rich.markdown import Markdown

from specguard.errors import UsageError
from specguard.lint.registry import RULES, rule_doc
from specguard.terminal import console


def run_rule(args: argparse.Namespace) -> int:
    if args.all or not args.code:
        for code, r in sorted(RULES.items()):
            print(f"{code}  {r.name:42s} {r.severity:8s} {r.summary}")
        return 0
    code = args.code.upper()
    if code not in RULES:
        raise UsageError(f"unknown rule {args.code!r} (see `specguard rule --all`)")
    doc = rule_doc(code)
    r = RULES[code]
    page = doc if doc else f"# {code} {r.name}\n\n{r.summary}\n"
    out = console()
    if out.soft_wrap:  # a pipe: the Markdown as written
        print(page)
    else:  # a terminal: rendered, wrapped at words
        out.print(Markdown(page, code_theme="ansi_dark"))
    return 0
