"""The checkpoint `specguard fix` writes, under the stock engine's routing (``global``):
acceptance within 5 points of the unquantized reference, output identical to
plain greedy decoding (issue 14)."""

from __future__ import annotations

import pytest
import torch

from specguard.factory import ScenarioInfo
from specguard.refdecoder.demo import FIXED, PolicyResult, run_fixed
from specguard.refdecoder.repaired import fixed_infos
from tests.refdecoder.conftest import DECODE

SCENARIOS = ("s1", "s2", "s4")


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory, exports: dict[str, ScenarioInfo],
            decode_prompts: list[list[int]], bf16_runs: dict[str, PolicyResult]) -> dict[tuple[str, str], PolicyResult]:
    torch.set_num_threads(1)
    fixed = fixed_infos({s: exports[s] for s in (*SCENARIOS, "s8")}, tmp_path_factory.mktemp("engine-fixed"))
    out = {(s, FIXED): run_fixed(s, fixed, decode_prompts, **DECODE) for s in SCENARIOS}
    out |= {(s, "bf16"): bf16_runs[s] for s in ("s1", "s4")}
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
