"""Start-up: what each command imports before it answers, and Ctrl-C at any moment.

The import graph is checked, not timed (benchmarks/startup.py times it): a light
command (`--version`, `--help`, `rule`, a mistyped option, `watch`) never loads
numpy or ml_dtypes, and `inspect`, which decodes no values, never loads ml_dtypes.
Each command runs in a fresh interpreter, through the console script's entry
point, and reports its sys.modules.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from specguard import cli

# Runs `specguard ARGS...` as the console script does, then writes the loaded modules to a file.
_PROBE = """
import json, sys
out, sys.argv = sys.argv[1], ["specguard", *sys.argv[2:]]
from specguard.__main__ import main
try:
    code = main()
finally:
    with open(out, "w") as f:
        json.dump(sorted(sys.modules), f)
sys.exit(code)
"""
HEAVY = ("numpy", "ml_dtypes", "torch", "rich", "msgspec", "orjson", "huggingface_hub")
# What parsing and `rule` may load of specguard: nothing of the stages.
LIGHT = {"specguard", "specguard.__main__", "specguard._version", "specguard.errors", "specguard.usage",
         "specguard.cli", "specguard.commands", "specguard.commands.rule"}
SCRIPT = Path(sys.executable).with_name("specguard")  # the installed console script


def _modules(tmp_path: Path, *args: str) -> tuple[int, set[str]]:
    out = tmp_path / "modules.json"
    r = subprocess.run([sys.executable, "-c", _PROBE, str(out), *args], capture_output=True, text=True,
                       timeout=120)
    assert "Traceback" not in r.stderr, r.stderr
    return r.returncode, set(json.loads(out.read_text()))


def _loaded(modules: set[str], roots: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules if m.split(".")[0] in roots)


@pytest.mark.parametrize(("args", "code"), [
    (["--version"], 0),
    (["--help"], 0),
    ([], 2),
    (["rule", "SG201"], 0),
    (["rule", "--all"], 0),
    (["rule", "SG999"], 2),
    (["lint", "--no-such-option"], 2),
    (["lint", "--fail-on", "fatal"], 2),
    (["no-such-command"], 2),
    (["inspect", "--help"], 0),
    (["fix", "--help"], 0),
])
def test_light_commands_load_no_stage(tmp_path: Path, args: list[str], code: int) -> None:
    rc, modules = _modules(tmp_path, *args)
    assert rc == code
    assert _loaded(modules, HEAVY) == []
    assert sorted(m for m in modules if m.startswith("specguard") and m not in LIGHT) == []


@pytest.mark.parametrize("args", [["watch", "--help"], ["watch", "127.0.0.1:9", "--once", "--interval", "0.1"]])
def test_watch_loads_neither_numpy_nor_ml_dtypes(tmp_path: Path, args: list[str]) -> None:
    rc, modules = _modules(tmp_path, *args)
    assert rc in (0, 2)  # --help; nothing listens on port 9: "cannot watch", exit 2
    assert _loaded(modules, ("numpy", "ml_dtypes", "torch")) == []


@pytest.mark.parametrize("scenario", ["s8", "s1-u8"])
def test_inspect_decodes_no_values_so_loads_no_ml_dtypes(tmp_path: Path, scenarios, scenario: str) -> None:
    """inspect reads headers (s8) and, for a U8 scale, the distribution of its first bytes
    (s1-u8): no element is decoded as a float, so ml_dtypes' extension is never loaded."""
    rc, modules = _modules(tmp_path, "inspect", str(scenarios[scenario].path))
    assert rc == 0 and "ml_dtypes" not in modules and "torch" not in modules


def test_the_parser_vocabularies_are_the_stages_own() -> None:
    """cli.py writes out the choices it parses (importing their stages would load numpy)."""
    from specguard.engines.vllm import v0_33
    from specguard.layouts.roles import DraftKind
    from specguard.lint.finding import Severity

    assert cli.ENGINE == v0_33.ENGINE and cli.PLATFORMS == v0_33.PLATFORMS
    assert tuple(DraftKind) == cli.DRAFT_METHODS
    assert tuple(Severity) == cli.SEVERITIES
    from specguard.engines import registry

    assert registry.keys() == cli.ENGINE_KEYS and registry.DEFAULT == cli.DEFAULT_ENGINE


# ---------------------------------------------------------------- Ctrl-C


def _interrupt(args: list[str], delay: float) -> tuple[int, str]:
    """Run the console script, type Ctrl-C ``delay`` s after specguard's first module has
    run (the interpreter's ``-X importtime`` line for it: before it, the start-up is
    Python's own), and return (exit code, stderr less the import-time lines)."""
    proc = subprocess.Popen([str(SCRIPT), *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPROFILEIMPORTTIME": "1"})
    assert proc.stderr is not None
    for line in proc.stderr:
        if line.rstrip().endswith("| specguard.__main__"):
            break
    else:
        pytest.fail("the console script never ran specguard/__main__.py")
    time.sleep(delay)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    return proc.returncode, "".join(ln for ln in err.splitlines(keepends=True) if not ln.startswith("import time:"))


@pytest.mark.parametrize("delay", [0.0, 0.001, 0.003, 0.01, 0.03, 0.1, 0.3])
def test_ctrl_c_at_any_moment_is_one_line_and_exit_130(scenarios, delay: float) -> None:
    """SIGINT while specguard's modules import (numpy, ml_dtypes, the stages: the first
    second on a busy machine) and while lint runs."""
    code, err = _interrupt(["lint", str(scenarios["s1"].path)], delay)
    if code == 1 and err == "":
        pytest.skip(f"lint finished within {delay} s")
    assert (code, err) == (130, "specguard: interrupted\n")
