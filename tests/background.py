"""What scripts/test.sh installs while the tests already run (the engine overlays, chromium): each
install's file, named by an environment variable, appears when the install is over, whatever its
outcome (test.sh reports a failed install itself)."""

from __future__ import annotations

import os
import time


def wait_for_install(variable: str, limit_s: float = 900.0) -> None:
    """Return once the file named by ``variable`` exists (at once where it is unset: no install
    in the background), or after ``limit_s``."""
    done = os.environ.get(variable)
    deadline = time.monotonic() + limit_s
    while done and not os.path.exists(done) and time.monotonic() < deadline:
        time.sleep(0.5)
