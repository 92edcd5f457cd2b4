"""Fuzz the header parser: any bytes give a header or one CheckpointError, never anything else."""

from __future__ import annotations

import contextlib
import json
import struct

import numpy as np
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from specguard.checkpoint import CheckpointError
from specguard.checkpoint.header import parse_header, read_header

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


def _both(raw: bytes, size: int):
    """parse_header (typed decoder first) and the dict path alone: result or error line."""
    from specguard.checkpoint.header import _parse_dicts

    out = []
    for parse in (parse_header, lambda r, s, w: _parse_dicts(r, s, w, None)):
        try:
            h = parse(raw, size, "fuzz")
            out.append((h.tensors, h.metadata, h.data_start))
        except CheckpointError as e:
            out.append(str(e))
    return out


metadata = st.dictionaries(st.text(max_size=4), st.text(max_size=4) | st.integers(0, 3), max_size=2)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(st.sampled_from(["F32", "U8", "F4", "BF16", "Q9"]), st.lists(st.integers(-1, 5), max_size=3)),
             max_size=5),
    st.none() | metadata, st.integers(-1, 1), st.booleans(),
)
def test_typed_decoder_accepts_exactly_what_the_dict_path_accepts(tensors, meta, slack, reverse):
    """The msgspec path is a fast path only: same records, same metadata, same errors."""
    from specguard.checkpoint.dtypes import BITS

    header, pos = {}, 0
    for i, (dtype, shape) in enumerate(tensors):
        n = max(0, int(np.prod(shape or [1]) * BITS.get(dtype, 8)) // 8)
        header[f"t{i}"] = {"dtype": dtype, "shape": shape, "data_offsets": [pos, pos + n]}
        pos += n
    if reverse:
        header = dict(reversed(header.items()))
    if meta is not None:
        header = {"__metadata__": meta, **header}
    raw = json.dumps(header).encode()
    typed, dicts = _both(raw, 8 + len(raw) + pos + slack)
    event("accepted" if isinstance(typed, tuple) else "rejected")
    assert typed == dicts
