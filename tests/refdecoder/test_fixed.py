"""The checkpoint `specguard fix` writes, under the stock engine's routing (``global``):
acceptance within 5 points of the unquantized reference, output identical to
plain greedy decoding (issue 14)."""

from __future__ import annotations

import pytest
import torch

from specguard.factory import ScenarioInfo
from specguard.refdecoder.demo import FIXED, PolicyResult, export_all, prompts_from_held_out, run_case, run_fixed
from specguard.refdecoder.repaired import fixed_infos

SCENARIOS = ("s1", "s2", "s4")


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], PolicyResult]:
    torch.set_num_threads(1)
    work = tmp_path_factory.mktemp("engine-fixed")
    infos: dict[str, ScenarioInfo] = export_all(work, list(SCENARIOS))
    fixed = fixed_infos(infos, work)
    prompts = prompts_from_held_out(12, length=48)
    out = {(s, FIXED): run_fixed(s, fixed, prompts, 32, 3, "cpu") for s in SCENARIOS}
    out |= {(s, "bf16"): run_case(s, "bf16", infos, prompts, 32, 3, "cpu") for s in ("s1", "s4")}
    return out


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_fixed_checkpoint_under_the_stock_policy_drafts_like_bf16(
    results: dict[tuple[str, str], PolicyResult], scenario: str
) -> None:
    got = results[(scenario, FIXED)]
    assert got.error is None, got.error
    ref = results[("s4" if scenario == "s4" else "s1", "bf16")].stats
    assert got.stats is not None and ref is not None and got.stats.num_drafts > 10
    assert abs(got.stats.acceptance_rate - ref.acceptance_rate) <= 0.05, (got.stats, ref)
    assert got.identical
    assert got.report is not None and got.report.ok  # LoadGuard: every expert parameter written
