"""Every committed plan equals what the installed vLLM 0.33 CPU build records now.

One pass of engines/vllm/recorder.py over every architecture, in a fresh process (a child of
the worker's one vLLM start, tests/integrations/fresh_vllm.py: one engine start for the
recorded-plan checks; earlier tests in this process build vLLM classes whose class-level mappings
the recording would see), into a temporary folder; any byte of difference fails, so a plan can
never drift from the engine it describes. Re-record with scripts/record_plans.py.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.background import wait_for_install
from tests.integrations import fresh_vllm, vllm_harness

vllm_harness.set_cpu_env()  # before anything imports vLLM
ROOT = Path(__file__).resolve().parents[2]
# Qwen3.5's module imports torchvision (recorder.torchvision_prelude): the overlay scripts/engines.sh
# installs. `import vllm` (all the zygote did) imports neither transformers nor torchvision, so the
# child puts the overlay on its path before the recorder imports them, as scripts/record_plans.py
# does; PYTHONPATH carries it (and its sitecustomize hook) into vLLM's model-inspection subprocesses.
OVERLAY = ROOT / ".engines" / "torchvision-0.28.0"
CODE = ("import json, sys; from pathlib import Path; sys.path.append(sys.argv[2]); "
        "from specguard.engines.vllm.recorder import record_all; "
        "print('RESULT ' + json.dumps(record_all(Path(sys.argv[1]))))")


def test_plans_match_the_installed_engine(tmp_path):
    pytest.importorskip("vllm")
    from specguard.engines.vllm.recorder import PLANS_DIR, targets

    wait_for_install("SPECGUARD_ENGINES_DONE")  # scripts/test.sh may still be installing it
    if not OVERLAY.is_dir():
        pytest.skip(f"torchvision overlay not installed (bash scripts/engines.sh): {OVERLAY}")
    env = fresh_vllm.fresh_env(**vllm_harness.CPU_ENV, PYTHONPATH=os.pathsep.join([str(ROOT), str(OVERLAY)]))
    proc = fresh_vllm.run_one(fresh_vllm.Job(env=env, code=CODE, argv=(str(tmp_path), str(OVERLAY))), timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    failed = json.loads(next(x for x in proc.stdout.splitlines() if x.startswith("RESULT "))[len("RESULT "):])
    assert failed == {}, f"vLLM 0.33 could not build: {failed}"
    committed = {p.name: p.read_text() for p in PLANS_DIR.glob("*.json")}
    fresh = {p.name: p.read_text() for p in tmp_path.glob("*.json")}
    assert sorted(fresh) == sorted(committed) == sorted([f"{n}.json" for n in targets()] + ["_registry.json"])
    drifted = [name for name in committed if committed[name] != fresh[name]]
    assert drifted == [], f"re-record with scripts/record_plans.py: {drifted} differ from vLLM 0.33"
