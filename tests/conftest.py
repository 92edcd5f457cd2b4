"""Shared fixtures: helpers that write real safetensors bytes."""

from __future__ import annotations

import json
import os
import signal
import struct
from pathlib import Path

import pytest

# Tests type Ctrl-C into the commands they start (a terminal's ^C, SIGINT) and expect them to stop
# as a user's command does. A shell that starts pytest in the background without job control
# (`pytest &` in a script, a CI step's `cmd &`) starts it with SIGINT ignored, which every child
# inherits through exec, and Python then never raises KeyboardInterrupt: those children would run
# to the end. Restore the default here (pytest-xdist's workers import this file too).
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# One torch thread per process unless told otherwise: two workers share two cores, and a second
# intra-op thread per worker (and per child command) only spins against the other worker: ~11 %
# more CPU on the torch-heavy files (benchmarks/results/test_time.txt). Set before torch imports;
# the commands the tests start inherit it.
os.environ.setdefault("OMP_NUM_THREADS", "1")


def raw_safetensors(path: Path, header: object, data: bytes = b"", *, length: int | None = None) -> Path:
    """Write a file with an arbitrary (possibly hostile) header, byte for byte."""
    raw = header if isinstance(header, bytes) else json.dumps(header).encode()
    n = len(raw) if length is None else length
    path.write_bytes(struct.pack("<Q", n) + raw + data)
    return path


@pytest.fixture
def write_raw():
    return raw_safetensors


@pytest.fixture(scope="session")
def scenarios(tmp_path_factory: pytest.TempPathFactory):
    """Every factory scenario written once per session: name -> ScenarioInfo."""
    from specguard.factory import SCENARIOS, write_scenario

    root = tmp_path_factory.mktemp("scenarios")
    return {name: write_scenario(name, root / name) for name in SCENARIOS}


def resolvers_for(info):
    """The Resolver(s) a user gets for a scenario: the target, plus a separate drafter (S4)."""
    from specguard.resolve import Resolver

    method = info.facts.get("draft_kind")
    if info.drafter_path is None:
        return [Resolver.open(info.path, draft_method=method if method == "dspark" else None)]
    target = Resolver.open(info.path, own_draft=False)
    return [target, Resolver.open(info.drafter_path, draft_method=method, target=target)]


# ---------------------------------------------------------------- parallel runs
# scripts/test.sh runs the suite as `pytest -n 2 --dist loadfile` (pytest-xdist). One work
# unit per test file, so a file's module fixtures are built once, in one worker; a whole
# directory where its conftest's session fixtures are expensive (real vLLM configs). Units
# whose tests mostly wait on an engine in a subprocess (a re-record, TP=2 ranks, the 0.32 and
# SGLang overlays) go first, so they overlap the rest instead of ending the run alone; the
# others follow, most tests first (xdist's own order). A new test file needs nothing here.
WHOLE_DIRECTORY = ("tests/integrations/",)
# Files that share a session fixture too costly to build twice run in one unit: the vLLM start of
# tests/integrations/fresh_vllm.py; the refdecoder's exports and bf16 runs (tests/refdecoder/conftest.py).
TOGETHER = {"tests/plans/test_recorded.py": "tests/integrations/",
            "tests/refdecoder/test_fixed.py": "tests/refdecoder/test_policies.py"}
FIRST = ("tests/integrations/", "tests/refdecoder/test_policies.py", "tests/engines/test_sglang_recorded.py",
         "tests/engines/test_engine_versions.py", "tests/refdecoder/test_demo.py")
# ... and the browser tests last: scripts/test.sh installs chromium while the others run.
LAST = ("tests/report/",)


def _unit(nodeid: str) -> str:
    path = nodeid.split("::", 1)[0]
    path = TOGETHER.get(path, path)
    return next((d for d in WHOLE_DIRECTORY if path.startswith(d)), path)


def _rank(unit: str) -> int:
    if unit.startswith(LAST):
        return len(FIRST) + 1
    return next((i for i, prefix in enumerate(FIRST) if unit.startswith(prefix)), len(FIRST))


# A worker starts with COLUMNS=80 and LINES set that pytest's own process does not have (seen with
# pytest-xdist 3.8 / execnet 2.1), and specguard sizes its tables by COLUMNS in a pipe: workers
# get the terminal settings of the run that started them instead.
TERMINAL_ENV = ("COLUMNS", "LINES")


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node) -> None:
    node.workerinput["terminal_env"] = {k: os.environ.get(k) for k in TERMINAL_ENV}


def pytest_configure(config: pytest.Config) -> None:
    for key, value in getattr(config, "workerinput", {}).get("terminal_env", {}).items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class EnginesFirst(LoadFileScheduling):
        ordered = False

        def _split_scope(self, nodeid: str) -> str:
            return _unit(nodeid)

        def _assign_work_unit(self, node) -> None:
            if not self.ordered:  # the first assignment: the queue is complete, in xdist's order
                self.ordered = True
                units = sorted(self.workqueue.items(), key=lambda unit: _rank(unit[0]))
                self.workqueue.clear()
                self.workqueue.update(units)
            super()._assign_work_unit(node)

    return EnginesFirst(config, log)
