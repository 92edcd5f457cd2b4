"""Rewrite the output under every ``$ specguard lint NAME --select X`` in the rule pages.

Usage: .venv/bin/python scripts/refresh_rule_docs.py [--check] [CODE ...]

The example checkpoints are built exactly as tests/lint/test_docs.py builds them
(both import scripts/rule_examples.py): every factory scenario written with its default seed, the producer
checkpoints under tests/data/producers, and the corrupted copies. Each command's
old output lines are replaced by what lint prints today (one line per finding,
fix and summary: rich's 200-column wrapping is undone); the prose around them
is left alone, so read the diff: an example must still show its rule firing (or,
under "Use instead", not firing) for the reason the page gives.

--check: rewrite nothing, list the pages that are stale and exit 1 if any.
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # rule_examples beside this script

from rule_examples import COMMAND, REPO, example_builder, lint_transcript

from specguard.factory import SCENARIOS, write_scenario
from specguard.lint.registry import docs_dir

DOCS = docs_dir()

Run = Callable[[str, str], str]  # (checkpoint name, --select) -> transcript


def unwrap(transcript: str, name: str) -> list[str]:
    """Lint's lines as it writes them: piped, rich wraps at 200 columns; a wrapped
    piece (a line that starts no finding, fix or summary) is joined back with the
    space rich broke it at. Whitespace only: the test compares whitespace-normalized."""
    start = re.compile(rf"^(SG\d{{3}} (error|warning|info): |  fix( \([^)]*\))?: |{re.escape(name)}: )")
    lines: list[str] = []
    for line in transcript.rstrip("\n").splitlines():
        if lines and not start.match(line):
            lines[-1] += " " + line.strip()
        else:
            lines.append(line.rstrip())
    return lines


def rewrite(page: str, run: Run) -> str:
    """``page`` with the output of each lint command in a plain fenced block replaced.

    A command's output runs to the next ``$ `` line or the end of the block, as
    the test reads it.
    """
    out: list[str] = []
    in_plain_block = in_other_block = skipping = False
    for line in page.splitlines():
        if line.startswith("```"):
            if in_plain_block or in_other_block:
                in_plain_block = in_other_block = skipping = False
            elif line[3:].strip():
                in_other_block = True
            else:
                in_plain_block = True
            out.append(line)
            continue
        if in_plain_block and line.startswith("$ "):
            skipping = False
            out.append(line)
            m = COMMAND.match(line)
            if m:
                out += unwrap(run(m[1], m[2]), m[1])
                skipping = True
            continue
        if not skipping:
            out.append(line)
    return "\n".join(out) + ("\n" if page.endswith("\n") else "")


def pages(codes: Iterable[str]) -> list[Path]:
    wanted = {c.upper() for c in codes}
    return [p for p in sorted(DOCS.glob("*.md")) if not wanted or p.stem in wanted]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("codes", nargs="*", help="rule codes (default: every page)")
    ap.add_argument("--check", action="store_true", help="report stale pages, write nothing")
    args = ap.parse_args(argv)
    todo = pages(args.codes)
    if not todo:
        print(f"no rule page for {' '.join(args.codes)}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="rule-docs-") as tmp:
        root = Path(tmp)
        written: dict[str, Path] = {}

        def scenario_path(name: str) -> Path | None:
            if name not in SCENARIOS:
                return None
            if name not in written:
                written[name] = write_scenario(name, root / "scenarios" / name).path
            return written[name]

        get = example_builder(scenario_path, root / "examples")

        def run(name: str, select: str) -> str:
            return lint_transcript(get(name), name, select)

        stale = []
        for path in todo:
            old = path.read_text()
            new = rewrite(old, run)
            if new != old:
                stale.append(path)
                if not args.check:
                    path.write_text(new)
    verb = "stale" if args.check else "rewrote"
    for path in stale:
        print(f"{verb} {path.relative_to(REPO)}")
    if not stale:
        print(f"{len(todo)} page(s) current")
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
