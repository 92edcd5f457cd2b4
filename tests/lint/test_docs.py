"""Rule pages: one per registered rule, four sections, printed by `specguard rule`,
shipped in the package and reachable as docs/rules/; and every `specguard lint`
command a page shows prints, today, what the page says it prints.

The pages' examples run on factory scenarios and on copies of them corrupted in
one precise way; scripts/rule_examples.py rebuilds the corruptions, so a changed
rule message (or a lost/new finding) fails until the page is updated.
"""

from __future__ import annotations

import importlib.util
import os
import re
from pathlib import Path

import pytest

from specguard.cli import main
from specguard.lint import RULES, lint
from specguard.lint.registry import docs_dir, rule_doc

REPO = Path(__file__).resolve().parents[2]
DOCS = docs_dir()
HEADINGS = ["## What it does", "## Why is this bad?", "## Example", "## Use instead"]


def _page(code: str) -> str:
    return (DOCS / f"{code}.md").read_text()


# ---------------------------------------------------------------- structure


def test_every_rule_has_a_page_and_every_page_a_rule():
    assert {p.stem for p in DOCS.glob("*.md")} == set(RULES)


@pytest.mark.parametrize("code", sorted(RULES))
def test_page_has_the_four_sections_in_order(code):
    lines = _page(code).splitlines()
    assert lines[0] == f"# {code}: {RULES[code].name}"
    assert [ln for ln in lines if ln.startswith("#") and not ln.startswith("# ")] == HEADINGS
    bodies = re.split(r"^## .*$", _page(code), flags=re.M)[1:]
    assert all(b.strip() for b in bodies), "a section is empty"
    assert len(lines) <= 80, "keep rule pages short"


def test_docs_rules_is_a_relative_link_to_the_shipped_pages():
    link = REPO / "docs" / "rules"
    assert link.is_symlink() and not os.path.isabs(os.readlink(link))
    assert link.resolve() == DOCS.resolve()


@pytest.mark.parametrize("code", sorted(RULES))
def test_specguard_rule_prints_the_page(code, capsys):
    assert main(["rule", code.lower()]) == 0
    assert capsys.readouterr().out == _page(code) + "\n"
    assert rule_doc(code) == _page(code)


def test_the_rule_index_specguard_rule_reads_is_current():
    """`specguard rule` reads lint/docs/rules.json, not the rules (start-up): it must say what they say."""
    from specguard.commands.rule import INDEX
    from specguard.lint.registry import rule_index

    assert INDEX.read_text() == rule_index(), "stale: run scripts/refresh_rule_index.py"


def test_unknown_rule_exits_2_with_one_line(capsys):
    assert main(["rule", "NOPE"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown rule 'NOPE'" in err


# ------------------------------------------------- examples' checkpoints

# scripts/rule_examples.py builds them (shared with scripts/refresh_rule_docs.py)
_spec = importlib.util.spec_from_file_location("rule_examples", REPO / "scripts" / "rule_examples.py")
assert _spec is not None and _spec.loader is not None
rule_examples = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(rule_examples)
COMMAND, example_builder, lint_transcript = rule_examples.COMMAND, rule_examples.example_builder, \
    rule_examples.lint_transcript


@pytest.fixture(scope="module")
def example(scenarios, tmp_path_factory):
    root = tmp_path_factory.mktemp("rule-examples")
    return example_builder(lambda n: scenarios[n].path if n in scenarios else None, root)


def _blocks(page: str) -> list[list[str]]:
    """Lines of each fenced code block without an info string (the shell transcripts)."""
    blocks, current, info = [], None, None
    for line in page.splitlines():
        if line.startswith("```"):
            if current is None:
                current, info = [], line[3:].strip()
            else:
                if not info:
                    blocks.append(current)
                current = None
        elif current is not None:
            current.append(line)
    return blocks


def _commands(page: str) -> list[tuple[str, str, str]]:
    """(checkpoint name, --select value, expected output) for each `$ specguard lint` in a page."""
    out = []
    for lines in _blocks(page):
        for i, line in enumerate(lines):
            m = COMMAND.match(line)
            if m:
                rest = lines[i + 1:]
                end = next((j for j, x in enumerate(rest) if x.startswith("$ ")), len(rest))
                out.append((m[1], m[2], "\n".join(rest[:end])))
    return out


EXAMPLES = [(code, *c) for code in sorted(RULES) for c in _commands(_page(code))]


def test_every_page_shows_its_rule_firing():
    for code in RULES:
        shown = "\n".join(expected for c, _, _, expected in EXAMPLES if c == code)
        assert re.search(rf"^{code} (error|warning|info): ", shown, flags=re.M), f"{code}: no real finding shown"


@pytest.mark.parametrize(("code", "name", "select", "expected"), EXAMPLES,
                         ids=[f"{c}-{n}-{s}" for c, n, s, _ in EXAMPLES])
def test_page_output_is_what_lint_prints(code, name, select, expected, example):
    got = lint_transcript(example(name), name, select)
    assert " ".join(got.split()) == " ".join(expected.split()), "run scripts/refresh_rule_docs.py"


def test_messages_use_only_terms_the_rule_page_explains(scenarios):
    """Issue 24 item 4: a matching rule's name printed in a finding (``(vllm-exact)``) is
    explained by that rule's page (`specguard rule CODE`)."""
    from specguard.declared.model import SEMANTICS
    from tests.conftest import resolvers_for

    unexplained = set()
    for info in scenarios.values():
        for f in lint(resolvers_for(info)).findings:
            doc = rule_doc(f.code) or ""
            unexplained |= {(f.code, t) for t in SEMANTICS if f"({t})" in f.message and f"`{t}`" not in doc}
    assert not unexplained
