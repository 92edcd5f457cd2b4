"""The report's browser: Debian's chromium, which scripts/test.sh installs when missing."""

from __future__ import annotations

import os

import pytest

from tests.background import wait_for_install
from tests.report.browser import Browser, chromium


@pytest.fixture(scope="session")
def browser():
    wait_for_install("SPECGUARD_CHROMIUM_DONE")  # scripts/test.sh may still be installing it
    if chromium() is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is missing: scripts/test.sh installs it (apt-get install chromium)")
        pytest.skip("no chromium on PATH (scripts/test.sh installs it)")
    with Browser() as b:
        yield b
