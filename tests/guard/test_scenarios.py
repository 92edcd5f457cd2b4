"""Seed 001 end to end: S5 and S1 loaded the way vLLM 0.33 loads them.

The guard must name exactly the draft layer's four NVFP4 per-tensor scales,
the same way whatever the allocator held before the load, while a load routed
by what is stored passes clean.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from specguard.formats.scheme import MXFP4
from specguard.guard import (
    NEVER_WRITTEN,
    PARTLY_WRITTEN,
    LoadGuard,
    UnloadedParametersError,
)
from specguard.refdecoder.loader import (
    ExpertConfig,
    ReferenceMoE,
    expert_prefix,
    global_routing,
    load_checkpoint,
    read_tensors,
)
from tests.guard.guard_facts import draft_params, never_loaded

RUNS = 20
# What seed 001 saw in those scales: denormals, 1e31, and healthy-looking values.
GARBAGE = (1e-43, 1e31, 2.9e-4, 5.9e-3, float("inf"), -1.0)


def churn_allocator(rng: np.random.Generator, device: str) -> None:
    """Allocate and free tensors of random sizes full of seed-001 garbage, so
    every load starts from a different allocator history."""
    held = []
    for _ in range(int(rng.integers(8, 48))):
        n = int(rng.integers(1, 1 << 14))
        value = GARBAGE[int(rng.integers(len(GARBAGE)))]
        held.append(torch.full((n,), value, device=device))
    for i in rng.permutation(len(held)):  # free in a random order
        held[int(i)] = None
    del held


def guarded_reports(path, routing, device: str) -> list[str]:
    """One guarded load per allocator history; each is preceded by an
    unguarded load whose never-written scales show that the histories differ."""
    rng = np.random.default_rng(1234)
    reports, leftovers = [], set()
    for _ in range(RUNS):
        churn_allocator(rng, device)
        model, _ = load_checkpoint(path, routing, device=device)
        params = dict(model.named_parameters())
        leftovers.add(b"".join(params[n].detach().cpu().numpy().tobytes()
                               for n in never_loaded(path)))
        del model, params
        _, result = load_checkpoint(path, routing, device=device, guard="report")
        reports.append(result.report.to_json())
    assert len(leftovers) > 1, "premise: unguarded scales should vary with allocator history"
    return reports


def test_s5_names_exactly_the_four_scales_across_allocator_histories(s5_dir, device):
    reports = guarded_reports(s5_dir, "global", device)
    assert len(set(reports)) == 1, "report depends on allocator history"
    _, result = load_checkpoint(s5_dir, "global", device=device, guard="report")
    report = result.report
    assert report.names() == never_loaded(s5_dir)
    assert report.names(NEVER_WRITTEN) == never_loaded(s5_dir)
    assert all(f.count == f.total for f in report.findings)


def test_s5_routed_by_the_resolver_still_names_them(s5_dir):
    """S5 stores the draft as NVFP4: routing it right cannot invent its scales."""
    _, result = load_checkpoint(s5_dir, "resolver", guard="report")
    assert result.report.names() == never_loaded(s5_dir)


def test_s5_raise_policy_stops_the_load_with_the_names(s5_dir):
    with pytest.raises(UnloadedParametersError) as err:
        load_checkpoint(s5_dir, "global", guard="raise")
    assert err.value.report.names() == never_loaded(s5_dir)
    for name in never_loaded(s5_dir):
        assert name in str(err.value)


def test_s1_global_routing_names_the_four_scales_and_the_half_written_block_scales(
    s1_dir, device
):
    reports = guarded_reports(s1_dir, "global", device)
    assert len(set(reports)) == 1
    _, result = load_checkpoint(s1_dir, "global", device=device, guard="report")
    report = result.report
    assert report.names(NEVER_WRITTEN) == never_loaded(s1_dir)
    # E8M0 [I, H/32] stored, E4M3 [I, H/16] slot: vLLM narrows, right half unwritten.
    d, cfg = draft_params(s1_dir), ExpertConfig.from_dir(s1_dir)
    h, inter = cfg.hidden_size, cfg.intermediate_size
    partly = {f.name: f for f in report.findings if f.problem == PARTLY_WRITTEN}
    assert set(partly) == {f"{d}.w13_weight_scale", f"{d}.w2_weight_scale"}
    w13 = partly[f"{d}.w13_weight_scale"]
    assert w13.where[2] == ((h // 32, h // 16),) and w13.count == w13.total // 2
    w2 = partly[f"{d}.w2_weight_scale"]
    assert w2.where[2] == ((inter // 32, inter // 16),)
    assert len(report.findings) == 6


def test_s1_routed_by_the_resolver_passes_clean(s1_dir, device):
    model, result = load_checkpoint(s1_dir, "resolver", device=device, guard="raise")
    assert result.report is not None and result.report.ok
    draft = ExpertConfig.from_dir(s1_dir).num_hidden_layers
    assert model.routes[expert_prefix(draft)] == MXFP4


def test_plausible_leftover_memory_is_still_caught(s5_dir):
    """The lucky case of seed 001: the empty scales happen to hold values that
    look like real scales (~2.9e-4). A value check alone would pass them; the
    guard poisons before the load, so they are named anyway."""
    config = ExpertConfig.from_dir(s5_dir)
    model = ReferenceMoE(config, global_routing(config))
    for p in model.parameters():
        if p.dtype == torch.float32:
            p.data.fill_(2.9e-4)
        else:
            p.data.view(torch.uint8).fill_(0x38)  # E4M3 1.0 / plausible FP4 bytes
    with LoadGuard(model, policy="report") as g:
        model.load_weights(read_tensors(s5_dir, lambda n: model.target(n) is not None))
    assert g.report.names() == never_loaded(s5_dir)


def test_without_the_guard_the_same_load_is_silent(s5_dir):
    """Control: the unguarded load raises nothing and reports nothing, and the
    four scales hold whatever was there (here: what we planted)."""
    config = ExpertConfig.from_dir(s5_dir)
    model = ReferenceMoE(config, global_routing(config))
    experts = model.experts(config.num_hidden_layers)
    experts.w13_weight_scale_2.data.fill_(1e31)
    result = model.load_weights(read_tensors(s5_dir, lambda n: model.target(n) is not None))
    assert result.report is None
    assert f"{draft_params(s5_dir)}.w13_weight_scale_2" not in result.loaded
    assert torch.all(experts.w13_weight_scale_2 == 1e31)
