"""The guard's single-pass checks and its write recorder against slow,
element-by-element references (the fast paths decide the common case, so they
must never call a bad tensor good)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from specguard.guard import IMPLAUSIBLE_SCALE, NEVER_WRITTEN, NON_FINITE, PARTLY_WRITTEN, LoadGuard
from specguard.guard.poison import NON_FINITE_BITS, all_finite_fast, non_finite
from specguard.guard.tracking import Recorder, StorageWrites, storage_key, view_runs

BYTE_FLOATS = sorted(NON_FINITE_BITS, key=str)


def _param(t: torch.Tensor) -> nn.Parameter:
    return nn.Parameter(t, requires_grad=False)


@settings(max_examples=200, deadline=None)
@given(
    dtype=st.sampled_from(BYTE_FLOATS),
    data=st.binary(min_size=1, max_size=96),
    chunk=st.one_of(st.none(), st.integers(1, 40)),  # None: the whole-tensor (CUDA) path
    strided=st.booleans(),
)
def test_byte_float_finiteness_matches_the_bytewise_test(dtype, data, chunk, strided):
    """Every 1-byte float dtype, any bytes (both signs, NaN/Inf anywhere), any
    chunking, contiguous or strided: one verdict with the per-byte mask."""
    raw = torch.frombuffer(bytearray(data), dtype=torch.uint8).clone()
    t = raw.view(dtype)
    if strided and t.numel() >= 2:
        t = t[: t.numel() // 2 * 2].reshape(-1, 2)[:, 1]
    assert all_finite_fast(t, chunk_bytes=chunk) == (not bool(non_finite(t).any()))


def test_byte_float_finiteness_on_large_negative_fp8_weights():
    """FP8 weights have both signs: the second max runs, and a single NaN byte of
    either sign deep inside a multi-chunk tensor is found."""
    g = torch.Generator().manual_seed(0)
    w = torch.randn(3000, 700, generator=g).to(torch.float8_e4m3fn)
    assert all_finite_fast(w, chunk_bytes=1 << 16) and all_finite_fast(w, chunk_bytes=None)
    for bad in (0x7F, 0xFF):
        v = w.clone()
        v.view(torch.uint8)[2222, 333] = bad
        assert not all_finite_fast(v, chunk_bytes=1 << 16)
        assert not all_finite_fast(v, chunk_bytes=None)
    e5 = torch.randn(1000, 64, generator=g).to(torch.float8_e5m2)
    assert all_finite_fast(e5)
    e5.view(torch.uint8)[999, 63] = 0xFC  # -inf
    assert not all_finite_fast(e5)


def test_float16_overflowing_sum_is_still_proved_finite():
    t = torch.full((4096,), 60000.0, dtype=torch.float16)
    assert not torch.isfinite(t.sum())  # the sum overflows...
    assert all_finite_fast(t)  # ...the extremes do not
    t[17] = float("-inf")
    assert not all_finite_fast(t)


def test_fp8_weights_with_negative_values_partly_written():
    m = nn.Module()
    m.w = _param(torch.empty(6, 32, dtype=torch.float8_e4m3fn))
    src = torch.randn(6, 32).to(torch.float8_e4m3fn)
    with LoadGuard(m, policy="report") as g:
        m.w.data[:4].copy_(src[:4])
        m.w.data[5].copy_(src[5])
    f = g.report.findings[0]
    assert len(g.report.findings) == 1
    assert (f.problem, f.where[0], f.count) == (PARTLY_WRITTEN, ((4, 5),), 32)
    with LoadGuard(m, policy="report") as g:
        m.w.data.copy_(src)
    assert g.report.ok


def test_e5m2_written_infinity_is_non_finite():
    m = nn.Module()
    m.w = _param(torch.empty(4, 8, dtype=torch.float8_e5m2))
    src = torch.randn(4, 8).to(torch.float8_e5m2)
    src.view(torch.uint8)[2, 3] = 0xFC  # -inf
    with LoadGuard(m, policy="report") as g:
        m.w.data.copy_(src)
    assert [(f.problem, f.where) for f in g.report.findings] == [
        (NON_FINITE, (((2, 3),), ((3, 4),)))]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_scale_fast_path_never_hides_a_problem(dtype):
    """The one-pass scale check only accepts tensors wholly inside the bounds;
    zeros (plausible), poison, NaN and implausible values take the full check."""
    def run(values: list[float], written: slice = slice(None)) -> list[tuple[str, int]]:
        m = nn.Module()
        m.weight_scale = _param(torch.empty(len(values), dtype=dtype))
        with LoadGuard(m, policy="report") as g:
            m.weight_scale.data[written].copy_(torch.tensor(values)[written])
        return [(f.problem, f.count) for f in g.report.findings]

    assert run([1e-4, 3.0, 0.0, 0.5]) == []  # a zero is plausible
    assert run([1e-4, 3.0, 0.0, 0.5], slice(0, 2)) == [(PARTLY_WRITTEN, 2)]
    assert run([1e-4, float("nan"), 0.0, 0.5]) == [(NON_FINITE, 1)]
    assert run([1e-4, -2.0, 0.0, 0.5]) == [(IMPLAUSIBLE_SCALE, 1)]
    if dtype is torch.float32:
        assert run([1e-4, 1e-30, 1e20, 1e31]) == [(IMPLAUSIBLE_SCALE, 1)]  # bounds inclusive
        assert run([1e-43, 3e-4]) == [(IMPLAUSIBLE_SCALE, 1)]
    m = nn.Module()
    m.input_scale = _param(torch.empty((), dtype=dtype))  # 0-d, never written
    with LoadGuard(m, policy="report") as g:
        pass
    assert [(f.problem, f.count) for f in g.report.findings] == [(NEVER_WRITTEN, 1)]


def _byte_set(starts: np.ndarray, ends: np.ndarray) -> set[int]:
    return {b for s, e in zip(starts.tolist(), ends.tolist(), strict=True) for b in range(s, e)}


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.integers(1, 6), st.integers(0, 7),
                          st.integers(1, 8), st.booleans()), min_size=1, max_size=12))
def test_recorded_intervals_are_exactly_the_written_bytes(writes):
    """Contiguous writes (recorded as plain runs) and strided ones (numpy runs),
    mixed in any order, merge into exactly the bytes the views cover."""
    base = torch.zeros(6, 8, dtype=torch.int32)
    sw = StorageWrites()
    rec = Recorder({storage_key(base): sw})
    want: set[int] = set()
    for r0, nr, c0, nc, transpose in writes:
        view = base[r0:r0 + nr, c0:c0 + nc]
        if transpose:
            view = view.t()
        if view.numel() == 0:
            continue
        rec.record(view)
        starts, run = view_runs(view)
        want |= {int(s) + b for s in starts for b in range(run)}
    got_starts, got_ends = sw.intervals()
    assert _byte_set(got_starts, got_ends) == want
    assert np.all(got_starts[1:] > got_ends[:-1])  # sorted, disjoint, adjacent runs merged


def test_writes_into_other_storages_and_devices_are_not_recorded():
    guarded = torch.zeros(4, 4, dtype=torch.uint8)
    sw = StorageWrites()
    rec = Recorder({storage_key(guarded): sw})
    rec.record(torch.zeros(4, 4, dtype=torch.uint8))  # another storage
    rec.record(torch.empty(4, 4, dtype=torch.uint8, device="meta"))
    rec.record(guarded[1:3])
    starts, ends = sw.intervals()
    assert (starts.tolist(), ends.tolist()) == ([4], [12])


def test_adjacent_contiguous_writes_coalesce_into_one_run():
    q = torch.zeros(8, 4, dtype=torch.uint8)
    sw = StorageWrites()
    rec = Recorder({storage_key(q): sw})
    for row in (0, 1, 2, 5, 6):
        rec.record(q[row])
    assert sw.nbytes == 2 * 2 * 8  # two runs so far, 8 bytes per bound
    starts, ends = sw.intervals()
    assert (starts.tolist(), ends.tolist()) == ([0, 20], [12, 28])
