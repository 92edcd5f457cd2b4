"""LoadGuard on plain torch modules: every problem kind, every dtype, views,
containers, policies, the decorator, CPU and CUDA."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from specguard.guard import (
    IMPLAUSIBLE_SCALE,
    NEVER_WRITTEN,
    NON_FINITE,
    PARTLY_WRITTEN,
    POISONS,
    LoadGuard,
    LoadGuardWarning,
    Strategy,
    UnloadedParametersError,
)
from specguard.guard.tracking import region_runs


@pytest.fixture(params=["methods", "aten"])
def tracking(request: pytest.FixtureRequest) -> str:
    return request.param


def _param(*shape: int, dtype=torch.float32, device="cpu") -> nn.Parameter:
    return nn.Parameter(torch.empty(*shape, dtype=dtype, device=device), requires_grad=False)


def _random_like(t: torch.Tensor, seed: int = 0) -> torch.Tensor:
    """Legal values of t's dtype (random bytes for integer-like dtypes)."""
    g = torch.Generator().manual_seed(seed)
    if t.dtype == torch.bool:
        return torch.randint(0, 2, t.shape, generator=g).bool().to(t.device)
    if POISONS[t.dtype].strategy is Strategy.TRACK:
        raw = torch.randint(0, 256, (t.numel() * t.element_size(),), dtype=torch.uint8, generator=g)
        return raw.view(t.dtype).reshape(t.shape).to(t.device)
    return torch.rand(t.shape, generator=g).to(t.dtype).to(t.device)


def _one(report, problem=None):
    found = [f for f in report.findings if problem in (None, f.problem)]
    assert len(found) == 1, report
    return found[0]


def test_complete_load_is_clean(device):
    m = nn.Sequential(nn.Linear(8, 4), nn.LayerNorm(4)).to(device)
    state = {k: v.clone() for k, v in m.state_dict().items()}
    with LoadGuard(m) as g:
        m.load_state_dict(state)
    assert g.report.ok and g.report.checked == 4
    assert torch.equal(m[0].weight, state["0.weight"])


def test_missing_tensor_is_named_and_left_poisoned(device):
    m = nn.Sequential(nn.Linear(8, 4), nn.Linear(4, 2)).to(device)
    state = {k: v.clone() for k, v in m.state_dict().items() if k != "1.bias"}
    with LoadGuard(m, policy="report") as g:
        m.load_state_dict(state, strict=False)
    f = _one(g.report)
    assert (f.name, f.problem, f.count, f.total) == ("1.bias", NEVER_WRITTEN, 2, 2)
    assert torch.isnan(m[1].bias).all()  # the module fails loudly, not on stale memory


@pytest.mark.parametrize("dtype", [torch.float32, torch.uint8, torch.float8_e4m3fn, torch.int32])
def test_partly_written_expert_param_names_experts_rows_cols(device, dtype, tracking):
    m = nn.Module()
    m.w13 = _param(4, 6, 8, dtype=dtype, device=device)
    src = _random_like(m.w13)
    with LoadGuard(m, policy="report", track_writes=tracking) as g:
        m.w13.data[0].copy_(src[0])
        m.w13.data[2].copy_(src[2])
        m.w13.data[1][0:3].copy_(src[1][0:3])  # expert 1: rows 3-5 missing
        m.w13.data[3][:, 0:4].copy_(src[3][:, 0:4])  # expert 3: cols 4-7 missing
    f = _one(g.report)
    assert f.problem == PARTLY_WRITTEN
    assert f.count == 3 * 8 + 6 * 4
    assert f.where == (((1, 2), (3, 4)), ((0, 6),), ((0, 8),))
    assert "experts 1,3" in f.location()


def test_every_poisonable_dtype_reports_the_unwritten_row(device):
    for dtype in POISONS:
        m = nn.Module()
        m.p = _param(3, 8, dtype=dtype, device=device)
        src = _random_like(m.p, seed=1)
        with LoadGuard(m, policy="report") as g:
            m.p.data[0].copy_(src[0])
            m.p.data[2].copy_(src[2])
        f = _one(g.report)
        assert (f.problem, f.where[0], f.count) == (PARTLY_WRITTEN, ((1, 2),), 8), dtype
        assert torch.equal(m.p.data[0].view(torch.uint8), src[0].view(torch.uint8)), dtype


def test_writing_the_marker_bytes_still_counts_as_written(device, tracking):
    """0xA5 is legal packed-FP4 data: the recorder, not the content, decides."""
    m = nn.Module()
    m.q = _param(4, 16, dtype=torch.uint8, device=device)
    with LoadGuard(m, track_writes=tracking, marker=True) as g:
        m.q.data[:2].copy_(torch.full((2, 16), 0xA5, dtype=torch.uint8))
        m.q.data[2] = torch.full((16,), 0xA5, dtype=torch.uint8)  # __setitem__
        m.q.data[3].fill_(0xA5)
    assert g.report.ok


def test_out_variants_are_recorded_by_aten_and_decided_by_content_otherwise(tracking):
    m = nn.Module()
    m.q = _param(2, 8, dtype=torch.int32)
    with LoadGuard(m, policy="report", track_writes=tracking, marker=True) as g:
        torch.add(torch.zeros(8, dtype=torch.int32), 1, out=m.q.data[0])
        torch.mul(torch.zeros(8, dtype=torch.int32), 1, out=m.q.data[1])
    assert g.report.ok  # aten: recorded; methods: row content changed -> written


def test_method_hooks_see_other_threads_and_are_removed_after():
    import threading

    original = torch.Tensor.copy_
    m = nn.Module()
    m.q = _param(4, 8, dtype=torch.uint8)
    marker = torch.full((8,), 0xA5, dtype=torch.uint8)  # same bytes: only recording tells
    with LoadGuard(m, policy="report") as g:
        assert torch.Tensor.copy_ is not original
        threads = [threading.Thread(target=m.q.data[i].copy_, args=(marker,)) for i in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert g.report.names() == ("q",) and g.report.findings[0].where[0] == ((3, 4),)
    assert torch.Tensor.copy_ is original and "copy_" not in torch.Tensor.__dict__


def test_nested_guards_each_see_their_own_module():
    a, b = nn.Linear(2, 2), nn.Module()
    b.q = _param(2, 4, dtype=torch.uint8)
    with LoadGuard(b, policy="report") as gb:
        with LoadGuard(a, policy="report") as ga:
            a.weight.data.zero_()
            b.q.data[0].zero_()
        b.q.data[1].zero_()
    assert ga.report.names() == ("bias",)
    assert gb.report.ok


def test_untracked_write_falls_back_to_the_marker_per_row():
    m = nn.Module()
    m.q = _param(4, 16, dtype=torch.uint8)
    with LoadGuard(m, policy="report", marker=True) as g:
        m.q.detach().numpy()[:3] = 7  # numpy view: invisible to the dispatcher
    f = _one(g.report)
    assert (f.problem, f.where[0]) == (PARTLY_WRITTEN, ((3, 4),))


def test_without_the_marker_unrecorded_writes_are_reported():
    """The documented limit of marker=False: a numpy write is invisible, so the
    rows it wrote are reported; the recorded copy_ row is not."""
    m = nn.Module()
    m.q = _param(3, 16, dtype=torch.uint8)
    with LoadGuard(m, policy="report") as g:
        m.q.data[0].copy_(torch.ones(16, dtype=torch.uint8))
        m.q.detach().numpy()[1:] = 7
    f = _one(g.report)
    assert (f.problem, f.where[0], f.detail) == (PARTLY_WRITTEN, ((1, 3),), "no recorded write")
    with LoadGuard(m, policy="report", track_writes="aten") as g:
        m.q.data[torch.tensor([0, 1])] = 1  # located by neither: counted
        m.q.data[2].zero_()
    f = _one(g.report)
    assert f.where[0] == ((0, 2),) and "could not be located" in f.detail


def test_track_writes_off_uses_the_marker():
    m = nn.Module()
    m.q = _param(4, 16, dtype=torch.uint8)
    with LoadGuard(m, policy="report", track_writes=None) as g:
        m.q.data[1:].copy_(torch.ones(3, 16, dtype=torch.uint8))
    assert _one(g.report).where[0] == ((0, 1),)


def test_index_driven_write_is_decided_by_content(tracking):
    m = nn.Module()
    m.q = _param(4, 8, dtype=torch.int32)
    with LoadGuard(m, policy="report", track_writes=tracking, marker=True) as g:
        m.q.data[torch.tensor([0, 2])] = torch.zeros(2, 8, dtype=torch.int32)  # index_put_
    assert _one(g.report).where[0] == ((1, 2), (3, 4))
    assert g.report.notes


def test_written_nan_is_non_finite_not_unwritten(device):
    m = nn.Module()
    m.w = _param(2, 4, dtype=torch.bfloat16, device=device)
    src = torch.ones(2, 4, dtype=torch.bfloat16)
    src[1, 2] = float("nan")
    src[0, 0] = float("inf")
    with LoadGuard(m, policy="report") as g:
        m.w.copy_(src)
    f = _one(g.report)
    assert (f.problem, f.count, f.where) == (NON_FINITE, 2, (((0, 2),), ((0, 1), (2, 3))))


def test_fp8_written_nan_is_non_finite(device):
    m = nn.Module()
    m.s = _param(8, dtype=torch.float8_e4m3fn, device=device)
    src = torch.full((8,), 2.0).to(torch.float8_e4m3fn)
    src.view(torch.uint8)[5] = 0x7F
    with LoadGuard(m, policy="report") as g:
        m.s.copy_(src)
    assert (_one(g.report).problem, _one(g.report).where) == (NON_FINITE, (((5, 6),),))


def test_implausible_scales_are_named(device):
    m = nn.Module()
    m.weight_scale_2 = _param(4, device=device)
    m.bias = _param(4, device=device)
    values = torch.tensor([1e-43, 1e31, 2.9e-4, -3e-3])
    with LoadGuard(m, policy="report") as g:
        m.weight_scale_2.copy_(values)
        m.bias.copy_(values)  # not a scale: magnitudes are not its business
    f = _one(g.report)
    assert (f.name, f.problem, f.count) == ("weight_scale_2", IMPLAUSIBLE_SCALE, 3)
    assert f.where == (((0, 2), (3, 4)),)


def test_plausible_stale_memory_is_still_caught(device):
    """Uninitialised memory holding healthy-looking scales is poisoned on entry."""
    m = nn.Module()
    m.w13_weight_scale_2 = _param(4, 2, device=device)
    m.w13_weight_scale_2.data.fill_(2.9e-4)  # what a lucky allocator might leave
    with LoadGuard(m, policy="report") as g:
        pass
    assert _one(g.report).problem == NEVER_WRITTEN


def test_policies(device):
    def build():
        m = nn.Module()
        m.a = _param(2, device=device)
        return m

    m = build()
    with pytest.raises(UnloadedParametersError) as err, LoadGuard(m):
        pass
    assert err.value.report.names() == ("a",)
    assert "never written" in str(err.value)
    m = build()
    with pytest.warns(LoadGuardWarning, match="never written"), LoadGuard(m, policy="warn"):
        pass
    m = build()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with LoadGuard(m, policy="report") as g:
            pass
    assert g.report.names(NEVER_WRITTEN) == ("a",)
    with pytest.raises(ValueError, match="policy"):
        LoadGuard(m, policy="ignore")  # type: ignore[arg-type]


def test_exception_in_body_propagates_unchecked():
    m = nn.Module()
    m.a = _param(2)
    g = LoadGuard(m)
    with pytest.raises(KeyError), g:
        raise KeyError("w13_weight")
    assert g.report is None


def test_decorator_guards_functions_and_methods():
    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.experts = nn.ModuleList([nn.Linear(4, 4, bias=False) for _ in range(3)])

        @LoadGuard(policy="report")
        def load_weights(self, weights: dict[str, torch.Tensor]) -> None:
            for name, w in weights.items():
                self.get_parameter(name).data.copy_(w)

    m = Model()
    weights = {f"experts.{i}.weight": torch.ones(4, 4) for i in (0, 2)}
    m.load_weights(weights)
    assert Model.load_weights.last_report.names() == ("experts.1.weight",)

    @LoadGuard(policy="raise")
    def load(model: nn.Module, state: dict) -> str:
        model.load_state_dict(state)
        return "done"

    assert load(m, {k: torch.zeros(4, 4) for k in m.state_dict()}) == "done"
    assert load.last_report.ok
    with pytest.raises(TypeError, match=r"no nn\.Module"):
        load("not a module", {})


def test_module_containers_and_name_patterns():
    m = nn.Module()
    m.layers = nn.ModuleDict({"7": nn.ModuleList([nn.Linear(2, 2), nn.Linear(2, 2)])})
    with LoadGuard(m, policy="report", include=["layers.7.*"], exclude=["*.bias"]) as g:
        m.layers["7"][0].weight.data.zero_()
    assert g.report.names() == ("layers.7.1.weight",)
    assert g.report.checked == 2
    assert torch.isfinite(m.layers["7"][0].bias).all()  # excluded: left untouched


def test_parameters_that_are_views_of_one_storage(device, tracking):
    base = torch.empty(10, 4, dtype=torch.uint8, device=device)
    fbase = torch.empty(10, 4, device=device)
    m = nn.Module()
    m.q = nn.Parameter(base[:6], requires_grad=False)
    m.k = nn.Parameter(base[6:], requires_grad=False)
    m.fq = nn.Parameter(fbase[:, :2], requires_grad=False)  # non-contiguous view
    m.fk = nn.Parameter(fbase[:, 2:], requires_grad=False)
    with LoadGuard(m, policy="report", track_writes=tracking) as g:
        m.q.data.copy_(torch.ones(6, 4, dtype=torch.uint8))
        m.fq.data.copy_(torch.ones(10, 2))
        m.fk.data[:5].copy_(torch.ones(5, 2))
    assert g.report.names(NEVER_WRITTEN) == ("k",)
    assert _one(g.report, PARTLY_WRITTEN).where == (((5, 10),), ((0, 2),))


def test_replaced_storage_counts_as_written():
    m = nn.Linear(3, 2)
    with LoadGuard(m, policy="report") as g:
        m.weight.data = torch.ones(2, 3)
        m.load_state_dict({"bias": torch.tensor([1.0, float("nan")])}, strict=False, assign=True)
    f = _one(g.report)
    assert (f.name, f.problem, f.count) == ("bias", NON_FINITE, 1)


def test_non_persistent_buffers_are_not_guarded():
    m = nn.Module()
    m.register_buffer("inv_freq", torch.arange(4.0), persistent=False)
    m.register_buffer("running", torch.zeros(4))
    with LoadGuard(m, policy="report") as g:
        pass
    assert g.report.names() == ("running",)
    assert torch.equal(m.inv_freq, torch.arange(4.0))


def test_unsupported_and_meta_tensors_are_listed_as_skipped():
    m = nn.Module()
    m.c = _param(2, dtype=torch.complex128)
    m.meta = nn.Parameter(torch.empty(2, device="meta"), requires_grad=False)
    with LoadGuard(m, policy="report") as g:
        pass
    assert [s[0] for s in g.report.skipped] == ["c", "meta"] and g.report.ok


def test_report_json_is_stable_and_text_names_tensors():
    def run() -> tuple[str, str]:
        m = nn.Module()
        m.experts = nn.ModuleList([nn.Linear(4, 4) for _ in range(2)])
        with LoadGuard(m, policy="report") as g:
            m.experts[0].weight.data[:2].zero_()
        return g.report.to_json(), str(g.report)

    (j1, t1), (j2, _) = run(), run()
    assert j1 == j2
    data = json.loads(j1)
    assert data["format"] == 1 and data["ok"] is False
    assert [f["name"] for f in data["findings"]] == [
        "experts.0.bias", "experts.0.weight", "experts.1.bias", "experts.1.weight"]
    assert "experts.0.weight" in t1 and "partly written" in t1


def test_guard_memory_is_bounded_metadata(tracking):
    m = nn.Module()
    m.q = _param(64, 1024, dtype=torch.uint8)
    with LoadGuard(m, track_writes=tracking) as g:
        for i in range(64):
            m.q.data[i].copy_(torch.zeros(1024, dtype=torch.uint8))
        # rows written one by one merge into one interval once compacted
        assert g.recorder_bytes <= 64 * 16
    assert g.report.ok


@settings(max_examples=150, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 4), min_size=1, max_size=3),
    perm_seed=st.integers(0, 100),
    offset=st.integers(0, 5),
    step=st.integers(1, 2),
)
def test_region_runs_match_the_bytes_of_the_view(sizes, perm_seed, offset, step):
    """Property: the runs of any (permuted, stepped, offset) view cover exactly
    the bytes its elements occupy."""
    base = torch.zeros(600, dtype=torch.int32)
    contiguous = [1] * len(sizes)
    for d in range(len(sizes) - 2, -1, -1):
        contiguous[d] = contiguous[d + 1] * sizes[d + 1] * step
    strides = [s * step for s in contiguous]
    order = np.random.default_rng(perm_seed).permutation(len(sizes))
    sizes_p, strides_p = [sizes[i] for i in order], [strides[i] for i in order]
    view = base.as_strided(sizes_p, strides_p, offset)
    runs = region_runs(view.storage_offset(), view.shape, view.stride(), 4)
    assert runs is not None
    starts, run = runs
    got = sorted({int(s) + b for s in starts for b in range(run)})
    idx = torch.arange(600, dtype=torch.int32)
    elems = idx.as_strided(sizes_p, strides_p, offset).reshape(-1).tolist()
    want = sorted({4 * e + b for e in elems for b in range(4)})
    assert got == want
