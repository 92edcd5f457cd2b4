"""A pytest plugin: CPU seconds per test file (this process's and its waited-for children's),
and wall seconds beside them (wall well above CPU: a test waiting on a deadline, a child it
does not wait for, the disk, or the other worker's load).

    PYTHONPATH=benchmarks .venv/bin/python -m pytest -p pytest_cpu -q [ARGS]

Wall time on a shared 2-core machine counts everyone's load; CPU seconds do not. Each test's
setup, call and teardown are charged to its file (a session fixture to the first test that
asks for it), then the files, most CPU first, are printed after the run; with pytest-xdist
each worker prints its own table. PYTEST_CPU_OUT=FILE also writes the table as TSV there.
"""

from __future__ import annotations

import os
import resource
import time
from collections import defaultdict

import pytest

_by_file: dict[str, float] = defaultdict(float)
_by_test: dict[str, float] = {}
_wall_file: dict[str, float] = defaultdict(float)
_wall_test: dict[str, float] = {}


def _cpu() -> float:
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + kids.ru_utime + kids.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    before, started = _cpu(), time.perf_counter()
    yield
    spent, wall = _cpu() - before, time.perf_counter() - started
    _by_test[item.nodeid], _wall_test[item.nodeid] = spent, wall
    _by_file[item.nodeid.split("::", 1)[0]] += spent
    _wall_file[item.nodeid.split("::", 1)[0]] += wall


def pytest_sessionfinish(session: pytest.Session) -> None:
    if not _by_file:
        return
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    rows = sorted(_by_file.items(), key=lambda kv: -kv[1])
    lines = [f"{cpu:8.1f} {_wall_file[name]:8.1f}  {name}" for name, cpu in rows]
    top = sorted(_by_test.items(), key=lambda kv: -kv[1])[:25]
    text = "\n".join([f"CPU s and wall s per file ({worker}, total {sum(_by_file.values()):.1f} CPU, "
                       f"{sum(_wall_file.values()):.1f} wall):", *lines,
                      "slowest tests:", *(f"{cpu:8.1f} {_wall_test[name]:8.1f}  {name}" for name, cpu in top)])
    out = os.environ.get("PYTEST_CPU_OUT")
    if out:
        with open(f"{out}.{worker}", "w") as f:
            f.write(text + "\n")
    else:
        print("\n" + text)
