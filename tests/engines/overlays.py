"""Run a command under an engine overlay (scripts/engines.sh, docs/engines.md): the engine's
own directory, then the shared triton, first on PYTHONPATH over .venv."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.background import wait_for_install

ROOT = Path(__file__).resolve().parents[2]
OVERLAYS = {"vllm-0.32": ("vllm-0.32", "torchvision-0.28.0"), "sglang-0.5.23": ("sglang-0.5.23", "triton-3.7.1")}


def run(engine: str, args: list[str], timeout: float = 900) -> subprocess.CompletedProcess[str]:
    """``python ARGS`` in a fresh process that imports ``engine``'s code (skips the test where
    the overlay is not installed: scripts/test.sh always installs it)."""
    wait_for_install("SPECGUARD_ENGINES_DONE")  # scripts/test.sh may still be installing them
    dirs = [ROOT / ".engines" / d for d in OVERLAYS[engine]]
    missing = [str(d) for d in dirs if not d.is_dir()]
    if missing:
        pytest.skip(f"{engine} overlay not installed (bash scripts/engines.sh): {missing}")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*map(str, dirs), str(ROOT)]),
           "VLLM_TARGET_DEVICE": "cpu", "VLLM_PLUGINS": "", "VLLM_CACHE_ROOT": str(cache_root(engine))}
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)


def cache_root(engine: str) -> Path:
    """A vLLM cache of the engine's own: vLLM names its model-info cache files by module and class
    only (registry.py ``_get_cache_filename``), so two versions sharing one cache overwrite each
    other's entries, and each miss costs a model inspection in a new process (an ``import vllm``)."""
    default = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "vllm"
    return Path(os.environ.get("VLLM_CACHE_ROOT", default)) / engine
