"""A rule's code and severity are typed once (issue 24 item 6): findings are made through
the registered rule (``SG201.finding(...)``), never ``Finding("SG201", ERROR, ...)``, and
each rule family (SG1xx ... SG7xx) lives in one file, ``rules_<family>.py``."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

from specguard.lint import RULES
from specguard.lint.finding import ERROR

LINT = Path(__file__).resolve().parents[2] / "src" / "specguard" / "lint"


def test_each_family_lives_in_one_file():
    files: dict[str, set[str]] = {}
    for code, r in RULES.items():
        files.setdefault(code[:3], set()).add(Path(inspect.getfile(r.check)).name)
    assert all(len(names) == 1 and next(iter(names)).startswith("rules_") for names in files.values()), files
    owners = [next(iter(names)) for names in files.values()]
    assert len(owners) == len(set(owners)), files  # and one family per file


def test_no_finding_spells_its_code():
    spelled = []
    for path in sorted(LINT.glob("rules_*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Finding":
                spelled.append(f"{path.name}:{node.lineno}")
    assert not spelled, "make findings with the rule: SG201.finding(message, modules, fix)"


def test_the_rule_sets_code_and_default_severity():
    f = RULES["SG201"].finding("m", ["a"], "advice")
    assert (f.code, f.severity, f.modules, f.fix.message, f.fix.applicability) == (
        "SG201", ERROR, ("a",), "advice", "display-only")
    assert RULES["SG103"].finding("m", severity=ERROR).severity == ERROR
