"""`specguard rule`: explain a lint rule, or list them all.

Reads the shipped pages and their index (lint/docs/rules.json, written from the
registry by scripts/refresh_rule_index.py), not the rules: explaining a rule
loads neither the checkpoint stages nor numpy.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from specguard.errors import UsageError

DOCS = Path(__file__).resolve().parent.parent / "lint" / "docs"  # the package specguard.lint, not imported
INDEX = DOCS / "rules.json"  # {code: {name, severity, summary}}


def rule_index() -> dict[str, dict[str, str]]:
    """Every rule's name, default severity and one-line summary, by code."""
    index: dict[str, dict[str, str]] = json.loads(INDEX.read_text())
    return index


def run_rule(args: argparse.Namespace) -> int:
    rules = rule_index()
    if args.all or not args.code:
        for code, r in sorted(rules.items()):
            print(f"{code}  {r['name']:42s} {r['severity']:8s} {r['summary']}")
        return 0
    code = args.code.upper()
    if code not in rules:
        raise UsageError(f"unknown rule {args.code!r} (see `specguard rule --all`)")
    page_file = DOCS / f"{code}.md"
    r = rules[code]
    page = page_file.read_text() if page_file.is_file() else f"# {code}: {r['name']}\n\n{r['summary']}\n"
    if not sys.stdout.isatty():  # a pipe: the Markdown as written, and rich never imported
        print(page)
        return 0
    from rich.markdown import Markdown

    from specguard.terminal import console

    console().print(Markdown(page, code_theme="ansi_dark"))  # a terminal: rendered, wrapped at words
    return 0
