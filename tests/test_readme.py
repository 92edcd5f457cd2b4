"""The README's examples run as printed."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def _section_code(heading: str) -> str:
    text = README.read_text()
    section = text[text.index(heading):]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_library_snippet_runs_as_printed() -> None:
    code = _section_code("## As a library")
    expected = [line[2:] for line in code.splitlines() if line.startswith("# ")]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "README.md", "exec"), {})
    assert out.getvalue().splitlines() == expected


def test_qwen_lint_output_is_what_lint_prints(tmp_path: Path) -> None:
    from specguard.cli import main
    from specguard.factory import write_scenario

    text = README.read_text()
    block = text[text.index("<!-- output of: specguard factory q1 q1 && specguard lint q1 -->"):]
    shown = re.search(r"```\n(.*?)```", block, re.S).group(1)
    path = write_scenario("q1", tmp_path / "q1").path
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        main(["lint", str(path)])
    got = out.getvalue().replace(str(path), "q1")
    assert " ".join(got.split()) == " ".join(shown.split())


def test_sample_lint_output_is_what_lint_prints(capsys) -> None:
    """The quick start's block, path included: the sample is named ``~/...`` as shown."""
    from specguard.cli import main

    text = README.read_text()
    block = text[text.index("<!-- output of: .venv/bin/specguard lint -->"):]
    shown = re.search(r"```\n(.*?)```", block, re.S).group(1)
    assert main(["lint"]) == 1
    got = capsys.readouterr().out
    assert got.splitlines()[-1].startswith("~/.cache/specguard/sample-")
    assert " ".join(got.split()) == " ".join(shown.split())


def test_scenario_table_names_the_codes_lint_finds(scenarios) -> None:
    from specguard.lint import lint
    from tests.conftest import resolvers_for

    rows = re.findall(r"^\| (S\d) \| [^|]* \| ([^|]*) \|$", README.read_text(), re.M)
    assert len(rows) >= 6
    for name, answer in rows:
        said = set(re.findall(r"SG\d{3}", answer))
        found = {f.code for f in lint(resolvers_for(scenarios[name.lower()])).findings}
        assert said == found, (name, said, found)


def test_scripts_in_the_readme_run_with_the_venvs_python() -> None:
    """scripts/ import specguard (and the test harness): the system python has neither."""
    commands = re.findall(r"(\S*python3?) scripts/", README.read_text())
    assert commands and set(commands) == {".venv/bin/python"}, commands
