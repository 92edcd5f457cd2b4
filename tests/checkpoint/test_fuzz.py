"""Fuzz the header parser: any bytes give a header or one CheckpointError, never anything else."""

from __future__ import annotations

import contextlib
import json
import struct
from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specguard.checkpoint import CheckpointError
from specguard.checkpoint.header import parse_header, read_header
from tests.checkpoint import mutations

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=20,
)
entries = st.fixed_dictionaries(
    {"dtype": st.sampled_from(["F32", "U8", "F4", "F8_E8M0", "BF16", "Q9"]),
     "shape": st.lists(st.integers(-2, 9), max_size=3),
     "data_offsets": st.lists(st.integers(-2, 300), min_size=0, max_size=3)},
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=200), st.integers(0, 400))
def test_random_bytes(raw, size):
    try:
        parse_header(raw, size, "fuzz")
    except CheckpointError as e:
        assert "\n" not in str(e)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.text(max_size=5), entries | json_values, max_size=5), st.integers(0, 300))
def test_structured_headers(header, size):
    raw = json.dumps(header).encode()
    try:
        h = parse_header(raw, 8 + len(raw) + size, "fuzz")
    except CheckpointError:
        return
    # Accepted headers satisfy the reference's invariants.
    spans = sorted(t.offsets for t in h.tensors.values())
    pos = 8 + len(raw)
    for b, e in spans:
        assert b == pos
        pos = e
    assert pos == 8 + len(raw) + size


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=64), st.integers(0, 2**64 - 1))
def test_files_with_any_length_prefix(tmp_path_factory, body, n):
    p = tmp_path_factory.mktemp("fz") / "x.safetensors"
    p.write_bytes(struct.pack("<Q", n) + body)
    with contextlib.suppress(CheckpointError):
        read_header(p)


@pytest.fixture(scope="module")
def fuzz_seeds(tmp_path_factory):
    """Real headers: producer fixtures, the factory's S1 shards, a published Qwen index's names."""
    from specguard.factory import write_scenario

    s1 = tmp_path_factory.mktemp("fuzz") / "s1"
    write_scenario("s1", s1, seed=0)
    return mutations.seeds(sorted(s1.glob("*.safetensors")))


def test_differential_against_safetensors(fuzz_seeds):
    """2,000 mutated real headers, every mutation kind of issue 22 among them: the same
    verdict and tensors as safetensors' own reader, no crash, one line per refusal.
    (scripts/fuzz_headers.py runs 1,000,000: benchmarks/results/fuzz_headers.txt.)"""
    kinds, accepted, problems = Counter(), 0, []
    for raw, size, kind in mutations.cases(fuzz_seeds, 2000, seed=22):
        kinds.update(kind.split("+"))
        problem, ok = mutations.judge(raw, size)
        accepted += ok
        if problem:
            problems.append((problem, kind, raw[:160]))
    assert not problems
    assert set(mutations.MUTATIONS) <= set(kinds)  # every kind ran
    assert 100 < accepted < 1900  # both verdicts are exercised


@pytest.mark.parametrize(("label", "header", "accepted"), [
    ("nesting 127 levels in an ignored field", b'{"a":{"dtype":"U8","shape":[0],"data_offsets":[0,0],"x":'
     + b"[" * 125 + b"]" * 125 + b"}}", True),
    ("nesting 128 levels", b'{"a":{"dtype":"U8","shape":[0],"data_offsets":[0,0],"x":'
     + b"[" * 126 + b"]" * 126 + b"}}", False),
    ("nesting 100,000 levels", b'{"a":{"dtype":"U8","shape":[0],"data_offsets":[0,0],"x":'
     + b"[" * 100_000 + b"]" * 100_000 + b"}}", False),
    ("nesting 100,000 levels of objects in __metadata__", b'{"__metadata__":' + b'{"k":' * 100_000 + b"0"
     + b"}" * 100_000 + b"}", False),
    ("duplicate field", b'{"a":{"dtype":"U8","dtype":"U8","shape":[0],"data_offsets":[0,0]}}', False),
    ("duplicate __metadata__", b'{"__metadata__":{},"__metadata__":{},"a":{"dtype":"U8","shape":[0],'
     b'"data_offsets":[0,0]}}', False),
    ("repeated key, first copy ill-typed", b'{"a":{"dtype":"Q9","shape":[0],"data_offsets":[0,0]},'
     b'"a":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}}', False),
    ("repeated key, first copy of a wrong size", b'{"a":{"dtype":"U8","shape":[9],"data_offsets":[0,0]},'
     b'"a":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}}', True),
    ("invalid UTF-8 in an ignored field", b'{"a":{"dtype":"U8","shape":[0],"data_offsets":[0,0],"x":"\xff"}}',
     False),
    ("1e999 in an ignored field", b'{"a":{"dtype":"U8","shape":[0],"data_offsets":[0,0],"x":1e999}}', False),
    ("-0 offset", b'{"a":{"dtype":"U8","shape":[0],"data_offsets":[-0,0]}}', False),
    ("dimension 2**64", b'{"a":{"dtype":"U8","shape":[0,18446744073709551616],"data_offsets":[0,0]}}', False),
    ("dimension 2**64 - 1", b'{"a":{"dtype":"U8","shape":[0,18446744073709551615],"data_offsets":[0,0]}}', True),
    ("product overflows before a 0", b'{"a":{"dtype":"U8","shape":[4294967296,4294967296,0],'
     b'"data_offsets":[0,0]}}', False),
    ("a 0 before the overflow", b'{"a":{"dtype":"U8","shape":[0,4294967296,4294967296],"data_offsets":[0,0]}}',
     True),
    ("entry as a list", b'{"a":["U8",[0],[0,0]]}', True),
    ("a second __metadata__ shaped like an entry", b'{"__metadata__":{},"a":{"dtype":"U8","shape":[0],'
     b'"data_offsets":[0,0]},"__metadata__":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}}', False),
    ("__metadata__ last, shaped like an entry", b'{"a":{"dtype":"U8","shape":[0],"data_offsets":[0,0]},'
     b'"__metadata__":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}}', False),
    ("dtype as a map", b'{"a":{"dtype":{"U8":null},"shape":[0],"data_offsets":[0,0]}}', True),
])
def test_issue_22_cases(label, header, accepted):
    """The classes issue 22 found, each judged by safetensors itself, then by specguard."""
    size = 8 + len(header)
    assert (mutations.reference(header, size) is not None) == accepted, "the reference changed its mind"
    problem, _ = mutations.judge(header, size)
    assert problem is None
