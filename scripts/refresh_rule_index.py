"""Write lint/docs/rules.json (every rule's code, name, severity and summary) from
the registry: `specguard rule` reads it instead of importing the rules.

Usage: .venv/bin/python scripts/refresh_rule_index.py [--check]

--check: write nothing; exit 1 if the file is stale (tests/lint/test_docs.py checks it too).
"""

from __future__ import annotations

import argparse
import sys

from specguard.commands.rule import INDEX
from specguard.lint.registry import rule_index


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args(argv)
    text = rule_index()
    if INDEX.is_file() and INDEX.read_text() == text:
        print(f"{INDEX.name} current")
        return 0
    if args.check:
        print(f"{INDEX.name} stale: run scripts/refresh_rule_index.py")
        return 1
    INDEX.write_text(text)
    print(f"wrote {INDEX}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
