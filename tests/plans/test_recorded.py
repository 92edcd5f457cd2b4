"""Every committed plan equals what the installed vLLM 0.33 CPU build records now.

One pass of engines/vllm/recorder.py over every architecture, in a fresh process (a child of
the worker's one vLLM start, tests/integrations/fresh_vllm.py; earlier tests in this process
build vLLM classes whose class-level mappings the recording would see), into a temporary
folder; any byte of difference fails, so a plan can never drift from the engine it describes.
Re-record with scripts/record_plans.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integrations import vllm_harness

vllm_harness.set_cpu_env()  # before anything imports vLLM
ROOT = Path(__file__).resolve().parents[2]


def test_plans_match_the_installed_engine(tmp_path):
    pytest.importorskip("vllm")
    from specguard.engines.vllm.recorder import PLANS_DIR, targets

    code = ("import json, sys; from pathlib import Path; from specguard.engines.vllm.recorder import record_all; "
            "print('RESULT ' + json.dumps(record_all(Path(sys.argv[1]))))")
    env = {**os.environ, **vllm_harness.CPU_ENV}
    # a process of its own, not fresh_vllm's zygote: the overlay must be on the path before vLLM imports
    # Qwen3.5's module imports torchvision (recorder.torchvision_prelude): the overlay scripts/engines.sh installs
    overlay = ROOT / ".engines" / "torchvision-0.28.0"
    if not overlay.is_dir():
        pytest.skip(f"torchvision overlay not installed (bash scripts/engines.sh): {overlay}")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(overlay)])
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path)], env=env, capture_output=True, text=True,
                          timeout=900, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    failed = json.loads(next(x for x in proc.stdout.splitlines() if x.startswith("RESULT "))[len("RESULT "):])
    assert failed == {}, f"vLLM 0.33 could not build: {failed}"
    committed = {p.name: p.read_text() for p in PLANS_DIR.glob("*.json")}
    fresh = {p.name: p.read_text() for p in tmp_path.glob("*.json")}
    assert sorted(fresh) == sorted(committed) == sorted([f"{n}.json" for n in targets()] + ["_registry.json"])
    drifted = [name for name in committed if committed[name] != fresh[name]]
    assert drifted == [], f"re-record with scripts/record_plans.py: {drifted} differ from vLLM 0.33"
