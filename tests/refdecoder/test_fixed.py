"""The checkpoint `specguard fix` writes, under the stock engine's routing (``global``):
acceptance within 5 points of the unquantized reference, output identical to
plain greedy decoding (issue 14).

Each repaired checkpoint is loaded for real under ``global`` (LoadGuard on) and must hold, bit
for bit, the weights the ``resolver`` policy loads from the unrepaired export (target, MTP
block and DSpark drafter): the decode is a function of those weights alone (float32 on one
CPU thread), so the resolver's measured run (tests/refdecoder/conftest.py, shared with
test_policies.py) is this load's run, measured once. A fix that wrote other weights (say,
re-quantized drafts) fails here first and would need its own decode.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from specguard.factory import ScenarioInfo
from specguard.refdecoder.demo import PolicyResult, load_case
from specguard.refdecoder.policies import Loaded
from specguard.refdecoder.repaired import fixed_infos
from specguard.refdecoder.specdec import DSparkDraft

SCENARIOS = ("s1", "s2", "s4")


@pytest.fixture(scope="module")
def fixed(tmp_path_factory: pytest.TempPathFactory, exports: dict[str, ScenarioInfo]) -> dict[str, ScenarioInfo]:
    return fixed_infos({s: exports[s] for s in (*SCENARIOS, "s8")}, tmp_path_factory.mktemp("engine-fixed"))


def weights(loaded: Loaded) -> dict[str, torch.Tensor]:
    """Every weight a decode reads: the model's (MTP block included) and a DSpark drafter's."""
    out = dict(loaded.model.state_dict())
    if isinstance(loaded.drafter, DSparkDraft):
        out |= {f"dspark.{k}": v for k, v in loaded.drafter.drafter.state_dict().items()}
    return out


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_fixed_checkpoint_under_the_stock_policy_drafts_like_bf16(
    fixed: dict[str, ScenarioInfo], exports: dict[str, ScenarioInfo], resolver_runs: dict[str, PolicyResult],
    bf16_runs: dict[str, PolicyResult], scenario: str,
) -> None:
    assert Path(fixed[scenario].path) != Path(exports[scenario].path)  # fix wrote a repaired copy
    got = load_case(scenario, "global", fixed, "cpu")  # raises LoadFailure where the stock routing cannot load it
    assert got.report is not None and got.report.ok  # LoadGuard: every expert parameter written
    want = weights(load_case(scenario, "resolver", exports, "cpu"))
    have = weights(got)
    assert have.keys() == want.keys()
    differ = [name for name, t in want.items() if not torch.equal(have[name], t)]
    assert differ == [], f"the repaired load differs from the resolver's: {differ[:5]}"
    run, ref = resolver_runs[scenario], bf16_runs["s4" if scenario == "s4" else "s1"]
    assert run.error is None and run.stats is not None and ref.stats is not None and run.stats.num_drafts > 10
    assert abs(run.stats.acceptance_rate - ref.stats.acceptance_rate) <= 0.05, (run.stats, ref.stats)
    assert run.identical
