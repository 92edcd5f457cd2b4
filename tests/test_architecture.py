"""The layout docs/architecture.md describes: imports flow one way between the
stages, and every doc a source file cites is in the repository."""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "specguard"

# Each stage may import only stages of a lower level (docs/architecture.md).
# Same level, different stage: no import either way.
LEVELS = {
    "errors": 0, "_version": 0, "vocabulary": 0,
    "checkpoint": 1, "usage": 1, "terminal": 1,
    "formats": 2, "plans": 2,
    "codecs": 3, "layouts": 3, "guard": 3,
    "declared": 4, "factory": 4,
    "engines": 5,
    "resolve": 6,
    "repair": 7,
    "lint": 8,  # a finding's fix is what the repair planner plans (lint/fixes.py)
    "refdecoder": 9, "integrations": 9,
    "commands": 10,
    "cli": 11,
    "__main__": 12,  # the console script: cli.main behind a Ctrl-C handler for its imports
    "__init__": 12,  # the public API re-exports every stage
}


def _stage(path: Path) -> str:
    rel = path.relative_to(SRC)
    return rel.parts[0].removesuffix(".py")


@functools.cache
def _parse(path: Path) -> ast.Module:
    """A source file's tree, parsed once per run (a dozen tests walk every file)."""
    return ast.parse(path.read_text(), str(path))


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, stage) of every specguard stage this file imports, lazy imports included."""
    out = []
    for node in ast.walk(_parse(path)):
        names: list[str] = []
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module] if node.module != "specguard" else [f"specguard.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        for name in names:
            parts = name.split(".")
            if parts[0] == "specguard":
                out.append((node.lineno, parts[1] if len(parts) > 1 else "__init__"))
    return out


@functools.cache
def _stage_graph() -> dict[str, dict[str, str]]:
    """stage -> {imported stage: first file:line that imports it}."""
    graph: dict[str, dict[str, str]] = {}
    for path in sorted(SRC.rglob("*.py")):
        stage = _stage(path)
        for line, target in _imports(path):
            if target != stage:
                graph.setdefault(stage, {}).setdefault(target, f"{path.relative_to(ROOT)}:{line}")
    return graph


def test_every_stage_has_a_level():
    stages = {_stage(p) for p in SRC.rglob("*.py")}
    assert stages <= set(LEVELS), f"add {sorted(stages - set(LEVELS))} to LEVELS and docs/architecture.md"


def test_imports_flow_one_way():
    wrong = [f"{where}: {stage} (level {LEVELS[stage]}) imports {target} (level {LEVELS[target]})"
             for stage, targets in _stage_graph().items() for target, where in targets.items()
             if LEVELS[target] >= LEVELS[stage]]
    assert not wrong, "\n".join(wrong)


def test_no_cycles_between_stages():
    graph = {stage: set(targets) for stage, targets in _stage_graph().items()}
    seen: set[str] = set()

    def visit(stage: str, path: tuple[str, ...]) -> None:
        assert stage not in path, f"import cycle: {' -> '.join((*path, stage))}"
        if stage in seen:
            return
        for target in graph.get(stage, ()):
            visit(target, (*path, stage))
        seen.add(stage)

    for stage in graph:
        visit(stage, ())


@pytest.mark.parametrize(("low", "high"), [
    ("checkpoint", "formats"), ("formats", "lint"), ("formats", "commands"), ("layouts", "declared"),
    ("declared", "engines"), ("engines", "resolve"), ("lint", "commands"), ("lint", "cli"),
])
def test_a_lower_stage_never_imports_a_higher_one(low, high):
    assert high not in _stage_graph().get(low, {}), f"{low} imports {high}"


# A citation: a path or bare file name ending in .md, not part of a template (``{code}.md``).
_CITED = re.compile(r"(?<![\w/.{}<>-])((?:[\w.-]+/)*[\w-]+\.md)\b")


def _cited_docs() -> list[tuple[Path, str]]:
    out = []
    for folder in ("src", "tests", "benchmarks", "scripts"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            out += [(path, m) for m in _CITED.findall(path.read_text())]
    return out


def test_sources_cite_docs():
    assert any(doc == "docs/formats.md" for _, doc in _cited_docs())


def test_every_cited_doc_is_in_the_repository():
    missing = [f"{path.relative_to(ROOT)} cites {doc}" for path, doc in _cited_docs()
               if not any((base / doc).is_file() for base in (path.parent, ROOT, ROOT / "docs"))]
    assert not missing, "\n".join(missing)


# ------------------------------------------------------- names a newcomer reads


def test_no_two_stages_differ_by_a_plural():
    """``engine/`` beside ``engines/`` was read as one thing (the reference decoder is refdecoder/)."""
    stages = {_stage(p) for p in SRC.rglob("*.py")}
    assert not [s for s in stages if f"{s}s" in stages]


def test_no_module_is_named_for_what_is_left_over():
    vague = {"others", "misc", "etc", "stuff"}
    assert not [p.relative_to(ROOT) for p in SRC.rglob("*.py") if p.stem in vague]


def test_one_safetensors_header_reader_and_writer():
    """The 8-byte header length is packed in checkpoint/writer.py and read in checkpoint/header.py only."""
    allowed = {SRC / "checkpoint" / "writer.py", SRC / "checkpoint" / "header.py"}
    found = [p.relative_to(ROOT) for p in SRC.rglob("*.py") if '"<Q"' in p.read_text() and p not in allowed]
    assert not found


def test_no_function_is_written_twice():
    """Two top-level functions with one name and one body are one function (``_ratio`` was written twice)."""
    seen: dict[tuple[str, str], Path] = {}
    twice = []
    for path in sorted(SRC.rglob("*.py")):
        for node in _parse(path).body:
            if isinstance(node, ast.FunctionDef):
                key = (node.name, ast.dump(ast.Module(body=node.body, type_ignores=[])))
                if key in seen:
                    twice.append(f"{node.name}: {seen[key].relative_to(ROOT)} and {path.relative_to(ROOT)}")
                seen.setdefault(key, path)
    assert not twice, "\n".join(twice)


# The vLLM harness (a real vLLM stood up on CPU) and its /metrics server are test
# fixtures two scripts drive on purpose (scripts/watch_demo.py, producers/vllm_expectations.py).
# The vLLM harness, and two tables of test data a benchmark or the long fuzz run replays at
# scale: the codec cases (moved out of the package, issue 24) and the header mutations.
HARNESS = {"tests.integrations", "tests.integrations.watch_server", "tests.checkpoint", "tests.codecs.cases"}


def test_scripts_and_benchmarks_do_not_import_the_tests():
    """tests/ is not a library: what a script shares with a test lives in the package or in scripts/
    (scripts/rule_examples.py for the rule pages)."""
    found = []
    for folder in ("scripts", "benchmarks"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                mod = node.module if isinstance(node, ast.ImportFrom) else None
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else [mod or ""]
                found += [f"{path.relative_to(ROOT)}: {n}" for n in names
                          if (n == "tests" or n.startswith("tests.")) and n not in HARNESS]
    assert not found, "\n".join(found)


_ENGINE_PACKAGES = {p.name for p in (SRC / "engines").iterdir() if (p / "__init__.py").exists()}


def _engine_module_imports(path: Path) -> list[str]:
    """Modules of one engine (``specguard.engines.vllm...``) this file imports, lazy ones included."""
    out = []
    for node in ast.walk(_parse(path)):
        names: list[str] = []
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        out += [f"{n}:{node.lineno}" for n in names
                if n.startswith("specguard.engines.") and n.split(".")[2] in _ENGINE_PACKAGES]
    return out


def test_only_engines_import_an_engine_module():
    """The engine is a value (issue 27): other stages reach one engine's facts through the
    engine model a Resolver holds or through engines/registry.py, never by importing
    ``engines/vllm/`` or ``engines/sglang/``, so adding an engine touches engines/ only."""
    found = {str(p.relative_to(SRC)): hits for p in sorted(SRC.rglob("*.py"))
             if _stage(p) != "engines" and (hits := _engine_module_imports(p))}
    assert found == {}
