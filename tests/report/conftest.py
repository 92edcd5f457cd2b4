"""The report's browser: Debian's chromium, which scripts/test.sh installs when missing."""

from __future__ import annotations

import os
import time

import pytest

from tests.report.browser import Browser, chromium


def wait_for_the_install(limit_s: float = 900.0) -> None:
    """scripts/test.sh installs chromium in the background while the tests run: its file
    $SPECGUARD_CHROMIUM_DONE appears when the install is over, whatever its outcome."""
    done = os.environ.get("SPECGUARD_CHROMIUM_DONE")
    deadline = time.monotonic() + limit_s
    while done and not os.path.exists(done) and time.monotonic() < deadline:
        time.sleep(0.5)


@pytest.fixture(scope="session")
def browser():
    wait_for_the_install()
    if chromium() is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is missing: scripts/test.sh installs it (apt-get install chromium)")
        pytest.skip("no chromium on PATH (scripts/test.sh installs it)")
    with Browser() as b:
        yield b
