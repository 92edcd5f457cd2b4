"""Every committed plan equals what the installed vLLM 0.33 CPU build records now.

One pass of engines/vllm/recorder.py over every architecture, in this process (vLLM
imported once), into a temporary folder; any byte of difference fails, so a plan can
never drift from the engine it describes. Re-record with scripts/record_plans.py.
"""

from __future__ import annotations

import pytest

from tests.integrations import vllm_harness

vllm_harness.set_cpu_env()  # before anything imports vLLM


def test_plans_match_the_installed_engine(tmp_path):
    pytest.importorskip("vllm")
    from specguard.engines.vllm.recorder import PLANS_DIR, TARGETS, record_all

    failed = record_all(tmp_path)
    assert failed == {}, f"vLLM 0.33 could not build: {failed}"
    committed = {p.name: p.read_text() for p in PLANS_DIR.glob("*.json")}
    fresh = {p.name: p.read_text() for p in tmp_path.glob("*.json")}
    assert sorted(fresh) == sorted(committed) == sorted([f"{n}.json" for n in TARGETS] + ["_registry.json"])
    drifted = [name for name in committed if committed[name] != fresh[name]]
    assert drifted == [], f"re-record with scripts/record_plans.py: {drifted} differ from vLLM 0.33"
