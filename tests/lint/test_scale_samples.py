"""The scale samples lint's content rules read (lint/content.py): per-tensor scales whole, each
block scale's ``BLOCK_SAMPLE`` bytes at its head or its tail, whichever shares one read with a
neighbour. Checked on ModelOpt's own NVFP4 export (written by safetensors: a dtype's tensors side
by side in name order) against the bytes safetensors itself returns."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors import safe_open

from specguard.lint.content import BLOCK_SAMPLE, _tail_offset, read_scales
from specguard.resolve import Resolver

FIXTURE = Path(__file__).resolve().parents[1] / "data" / "producers" / "mo_nvfp4"


def _stored(name: str) -> bytes:
    with safe_open(FIXTURE / "model.safetensors", framework="pt") as f:
        t = f.get_tensor(name)
    return t.reshape(-1).view(torch.uint8).numpy().tobytes()


@pytest.fixture(scope="module")
def samples():
    Resolver.clear_cache()
    return read_scales(Resolver.open(FIXTURE))


def test_every_sample_is_the_stored_bytes_at_the_head_or_the_tail(samples):
    seen = {"head": 0, "tail": 0}
    for col in samples.columns:
        ends = np.cumsum(col.counts)
        for i, tensor in enumerate(col.idx.tolist()):
            name = samples.names_of([tensor])[0]
            got = col.values[ends[i] - col.counts[i]:ends[i]].astype(np.float32)
            if col.table is None:  # a wider dtype: per-tensor F32 scales here, read whole
                assert samples.per_tensor[tensor] and got.tobytes() == _stored(name), name
                continue
            stored = np.frombuffer(_stored(name), dtype=np.uint8)
            n = BLOCK_SAMPLE // stored.itemsize
            head, tail = col.table[stored[:n]], col.table[stored[-n:]]
            where = "head" if got.tobytes() == head.tobytes() else "tail"
            assert got.tobytes() == (head if where == "head" else tail).tobytes(), name
            seen[where] += 1
    assert seen["head"] and seen["tail"], seen  # adjacent block scales: taken in pairs, tail then head


def test_touching_samples_are_read_together(samples, monkeypatch):
    """Each pair of adjacent block scales is one ``pread`` (the per-tensor F32 scales lie side by
    side: one more), not one per block scale."""
    calls = []
    real = os.pread

    def counted(fd: int, n: int, at: int) -> bytes:
        calls.append(n)
        return real(fd, n, at)

    Resolver.clear_cache()
    r = Resolver.open(FIXTURE)
    assert r.table  # headers read and classified first: only the sampling's reads are counted
    monkeypatch.setattr(os, "pread", counted)
    again = read_scales(r)
    blocks = int((~again.per_tensor).sum())
    assert blocks >= 20
    assert len(calls) <= blocks // 2 + 2, (len(calls), blocks)
    assert calls.count(2 * BLOCK_SAMPLE) >= blocks // 2 - 1


def test_tail_offsets_pair_a_run_of_block_scales():
    # five block scales of 1,000 bytes side by side, then a gap, then a block scale and the two
    # per-tensor scales written right after it (a writer that keeps a module's tensors together)
    begin = np.array([0, 1000, 2000, 3000, 4000, 9000, 10000, 10004])
    size = np.array([1000] * 6 + [4, 4])
    want = np.array([64] * 6 + [4, 4])
    whole = size == want
    shard = np.zeros(8, dtype=np.int64)
    got = _tail_offset(shard, begin, size, want, whole)
    assert got.tolist() == [936, 0, 936, 0, 0, 936, 0, 0]
    # asked in any order: the same answer per scale
    order = np.array([7, 3, 0, 5, 1, 6, 4, 2])
    assert _tail_offset(shard[order], begin[order], size[order], want[order], whole[order]).tolist() \
        == got[order].tolist()
    # the same offsets in another shard never touch this one's
    two = np.array([0, 0, 0, 1, 1, 1, 1, 1])
    assert _tail_offset(two, begin, size, want, whole).tolist() == [936, 0, 0, 936, 0, 936, 0, 0]


def test_sibling_outliers_at_float32s_edge_without_warnings(tmp_path):
    """Experts' global scales near float32's maximum and one far below them: the outlier is named
    (SG401), and nothing reaches the user's stderr as a numpy RuntimeWarning (the bounds overflow)."""
    import shutil
    import struct
    import warnings

    from specguard.checkpoint.header import read_header
    from specguard.lint import lint

    d = tmp_path / "edge"
    shutil.copytree(FIXTURE, d, ignore=shutil.ignore_patterns("expected.json", "vllm.json"))
    header = read_header(d / "model.safetensors")
    names = sorted(n for n in header.tensors if ".mlp.experts." in n and n.endswith(".weight_scale_2"))
    assert len(names) >= 4
    with open(d / "model.safetensors", "r+b") as f:
        for name in names:
            f.seek(header.tensors[name].offsets[0])
            f.write(struct.pack("<f", 1e30 if name == names[0] else 3e38))
    Resolver.clear_cache()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        findings = lint([Resolver.open(d)], select_codes=["SG401"]).findings
    outliers = [f for f in findings if "differ from their sibling weight_scale_2s" in f.message]
    assert [len(f.modules) for f in outliers] == [1]
    assert outliers[0].modules[0].endswith(names[0])


@pytest.mark.parametrize("fixture", sorted(p.name for p in FIXTURE.parent.iterdir() if p.is_dir()))
def test_each_modules_plan_is_what_its_records_say(fixture):
    """The sampler takes each scale's dtype and size from its module's plan (one per signature,
    formats/table.py ``ScalePlan``): on every producer's real export, each module's plan names
    exactly its scale tensors numpy reads, with each one's dtype and byte span as stored."""
    from specguard.checkpoint import open_checkpoint
    from specguard.checkpoint.dtypes import WHOLE_BYTES
    from specguard.formats import classify
    from specguard.formats.modules import SCALE_PARAMS

    table = classify(open_checkpoint(FIXTURE.parent / fixture))
    planned = 0
    for m in table:
        scales = {p: t for p, t in m.params.items() if p in SCALE_PARAMS and t.dtype in WHOLE_BYTES}
        if m.scales is None:
            assert not scales, m.name
            continue
        planned += 1
        assert list(m.scales.params) == list(scales), m.name
        assert list(m.scales.dtypes) == [t.dtype for t in scales.values()], m.name
        assert list(m.scales.nbytes) == [t.nbytes for t in scales.values()], m.name
    assert planned or fixture.startswith(("bnb_", "quanto_", "torchao_")), fixture
