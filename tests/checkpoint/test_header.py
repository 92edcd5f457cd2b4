"""Header validation on real bytes: valid files pass, every malformation is one CheckpointError."""

from __future__ import annotations

import json
import struct

import ml_dtypes
import numpy as np
import pytest
from safetensors import SafetensorError, safe_open

from specguard.checkpoint import CheckpointError, read_header
from specguard.checkpoint.header import MAX_HEADER
from specguard.checkpoint.writer import save_file
from tests.checkpoint import mutations
from tests.conftest import raw_safetensors


def test_valid_file_round_trips_every_numpy_dtype(tmp_path):
    arrays = {
        "a.weight": np.arange(6, dtype=np.float32).reshape(2, 3),
        "b.scale": np.ones((2, 1), ml_dtypes.float8_e8m0fnu),
        "c.weight": np.zeros((4, 8), ml_dtypes.float8_e4m3fn),
        "d.bias": np.zeros(3, ml_dtypes.bfloat16),
        "e.qweight": np.zeros((2, 2), np.int32),
        "f.empty": np.zeros((0, 4), np.float16),
    }
    path = tmp_path / "m.safetensors"
    save_file(arrays, path, {"format": "pt"})
    h = read_header(path)
    assert h.metadata == {"format": "pt"}
    assert set(h.tensors) == set(arrays)
    with safe_open(path, "np") as f:  # the reference reader agrees on dtype and shape
        for name in f.keys():  # noqa: SIM118 (safe_open is not a dict)
            sl = f.get_slice(name)
            assert (sl.get_dtype(), list(sl.get_shape())) == (h.tensors[name].dtype, list(h.tensors[name].shape))
    t = h.tensors["b.scale"]
    assert t.nbytes == 2 and path.read_bytes()[t.offsets[0] : t.offsets[1]] == b"\x7f\x7f"


def test_sub_byte_dtype_counts_logical_elements(tmp_path):
    p = raw_safetensors(tmp_path / "f4.safetensors", {"w": {"dtype": "F4", "shape": [2, 8], "data_offsets": [0, 8]}},
                        b"\0" * 8)
    assert read_header(p).tensors["w"].nbytes == 8


def _one(dtype="F32", shape=(2,), offsets=(0, 8)):
    return {"t": {"dtype": dtype, "shape": list(shape), "data_offsets": list(offsets)}}


BAD = [
    ("truncated before the length", None, b"\x01\x02", "truncated"),
    ("length past the end", _one(), b"", "runs past the end"),
    ("unknown dtype", _one(dtype="F7"), b"\0" * 8, "unknown dtype 'F7'"),
    ("shape/offset mismatch", _one(shape=(3,)), b"\0" * 8, "needs 12 bytes"),
    ("negative dim", _one(shape=(-2,)), b"\0" * 8, "non-negative"),
    ("odd F4 count", _one(dtype="F4", shape=(3,), offsets=(0, 1)), b"\0", "byte boundary"),
    ("data section longer than the tensors", _one(), b"\0" * 12, "data section holds 12"),
    ("non-object JSON", [1, 2], b"", "not an object"),
    ("entry without offsets", {"t": {"dtype": "F32", "shape": [1]}}, b"\0" * 4, "needs dtype, shape"),
    ("metadata not str->str", {"__metadata__": {"a": 1}}, b"", "__metadata__"),
]


@pytest.mark.parametrize(("label", "header", "data", "needle"), BAD, ids=[b[0] for b in BAD])
def test_bad_headers_raise_one_line(tmp_path, label, header, data, needle):
    p = tmp_path / "bad.safetensors"
    if header is None:
        p.write_bytes(data)
    else:
        raw_safetensors(p, header, data, length=None if "past the end" not in label else 10_000)
    with pytest.raises(CheckpointError) as e:
        read_header(p)
    msg = str(e.value)
    assert needle in msg and "\n" not in msg and str(p) in msg


def test_overlap_and_hole_name_the_tensor(tmp_path):
    overlap = {
        "a": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]},
        "b": {"dtype": "U8", "shape": [4], "data_offsets": [2, 6]},
    }
    with pytest.raises(CheckpointError, match=r"\[b\].*overlaps"):
        read_header(raw_safetensors(tmp_path / "o.safetensors", overlap, b"\0" * 6))
    hole = {"a": {"dtype": "U8", "shape": [4], "data_offsets": [2, 6]}}
    with pytest.raises(CheckpointError, match=r"\[a\].*hole"):
        read_header(raw_safetensors(tmp_path / "h.safetensors", hole, b"\0" * 6))


def test_header_limit_and_non_utf8(tmp_path):
    p = tmp_path / "huge.safetensors"
    p.write_bytes(struct.pack("<Q", MAX_HEADER + 1) + b"{}")
    with pytest.raises(CheckpointError, match="limit"):
        read_header(p)
    with pytest.raises(CheckpointError, match="not UTF-8"):
        read_header(raw_safetensors(tmp_path / "u.safetensors", b'{"\xff": 1}'))


def test_unreadable_path_is_checkpoint_error(tmp_path):
    d = tmp_path / "dir.safetensors"
    d.mkdir()
    with pytest.raises(CheckpointError, match="cannot read"):
        read_header(d)


def _reference_accepts(path) -> bool:
    try:
        with safe_open(path, "np") as f:
            list(f.keys())
        return True
    except (SafetensorError, Exception):
        return False


def test_same_verdicts_as_the_reference_on_mutated_headers(tmp_path):
    """Flip / cut / extend real headers and compare accept/reject with safetensors' Rust reader."""
    save_file({"a": np.zeros((3, 4), np.float32), "b": np.zeros(5, np.uint8)}, tmp_path / "ok.safetensors")
    good = (tmp_path / "ok.safetensors").read_bytes()
    (n,) = struct.unpack("<Q", good[:8])
    header = json.loads(good[8 : 8 + n])
    rng = np.random.default_rng(0)
    mutations = []
    for _ in range(60):
        h = json.loads(json.dumps(header))
        name = rng.choice(["a", "b"])
        field = rng.choice(["dtype", "shape", "data_offsets"])
        if field == "dtype":
            h[name]["dtype"] = str(rng.choice(["F16", "I64", "U8", "F8_E8M0", "F4", "BOOL", "XX"]))
        elif field == "shape":
            h[name]["shape"] = [int(x) for x in rng.integers(0, 7, size=rng.integers(0, 3))]
        else:
            b = int(rng.integers(0, 60))
            h[name]["data_offsets"] = [b, b + int(rng.integers(0, 60))]
        mutations.append(h)
    data = good[8 + n :]
    disagreements = []
    for i, h in enumerate(mutations):
        p = raw_safetensors(tmp_path / f"m{i}.safetensors", h, data)
        try:
            read_header(p)
            ours = True
        except CheckpointError:
            ours = False
        if ours != _reference_accepts(p):
            disagreements.append((h, ours))
    assert not disagreements


def _inspect_fails_with_one_short_line(path, capsys) -> str:
    from specguard.cli import main

    assert main(["inspect", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and len(err) < 1000, err[:300]
    return err


def test_hostile_names_and_values_are_escaped_and_shortened(tmp_path, capsys):
    """A newline in a tensor name stays one line; a 100 kB name or dtype is shortened;
    a value nested 10,000 deep is echoed without a RecursionError (issue 22)."""
    newline = {"a\nb": {"dtype": "U8", "shape": [4], "data_offsets": [0, 3]}}
    err = _inspect_fails_with_one_short_line(raw_safetensors(tmp_path / "nl.safetensors", newline, b"\0" * 3), capsys)
    assert "[a\\nb]" in err
    long_name = {"x" * 100_000: {"dtype": "U8", "shape": [4], "data_offsets": [0, 3]}}
    _inspect_fails_with_one_short_line(raw_safetensors(tmp_path / "long.safetensors", long_name, b"\0" * 3), capsys)
    long_dtype = {"t": {"dtype": "Q" * 100_000, "shape": [4], "data_offsets": [0, 4]}}
    _inspect_fails_with_one_short_line(raw_safetensors(tmp_path / "dt.safetensors", long_dtype, b"\0" * 4), capsys)
    deep = b'{"t":{"dtype":"U8","shape":' + b"[" * 500 + b"]" * 500 + b',"data_offsets":[0,0]}}'
    err = _inspect_fails_with_one_short_line(raw_safetensors(tmp_path / "deep.safetensors", deep), capsys)
    assert "[[[[...]]]]" in err
    deeper = b'{"t":{"dtype":"U8","shape":' + b"[" * 10_000 + b"]" * 10_000 + b',"data_offsets":[0,0]}}'
    err = _inspect_fails_with_one_short_line(raw_safetensors(tmp_path / "deeper.safetensors", deeper), capsys)
    assert "nested deeper than 127 levels" in err


def test_index_naming_a_hostile_tensor_is_one_line(tmp_path, capsys):
    save_file({"a": np.zeros(2, np.uint8)}, tmp_path / "model-1.safetensors")
    index = {"weight_map": {"a": "model-1.safetensors", "evil\nname" * 10_000: "model-1.safetensors"}}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    err = _inspect_fails_with_one_short_line(tmp_path, capsys)
    assert "evil\\nname" in err


def test_index_and_config_nested_100000_deep_are_one_line(tmp_path, capsys):
    save_file({"a": np.zeros(2, np.uint8)}, tmp_path / "model-1.safetensors")
    deep = "[" * 100_000 + "]" * 100_000
    (tmp_path / "model.safetensors.index.json").write_text(
        '{"weight_map": {"a": "model-1.safetensors"}, "metadata": {"x": ' + deep + "}}")
    assert "depth limit" in _inspect_fails_with_one_short_line(tmp_path, capsys)  # orjson's own limit
    (tmp_path / "model.safetensors.index.json").write_text(
        '{"weight_map": {"a": "model-1.safetensors"}, "metadata": {"x": ' + "[" * 500 + "]" * 500 + "}}")
    assert "nested deeper" in _inspect_fails_with_one_short_line(tmp_path, capsys)
    (tmp_path / "model.safetensors.index.json").unlink()
    (tmp_path / "config.json").write_text('{"x": ' + "[" * 900 + "]" * 900 + "}")
    assert "nested deeper" in _inspect_fails_with_one_short_line(tmp_path, capsys)


def _entries(*specs: tuple[str, str, list[int], list[int]]) -> bytes:
    return json.dumps({n: {"dtype": d, "shape": s, "data_offsets": o} for n, d, s, o in specs}).encode()


def test_fast_path_reads_what_writers_write_and_declines_the_rest():
    """The fast path (msgspec plus byte counts) vouches only for headers it provably reads
    as the reference does; everything else goes to the reference path, which decides."""
    from specguard.checkpoint.header import _fast, parse_header

    ok = _entries(("a", "F32", [2], [0, 8]), ("b", "U8", [4], [8, 12]))
    assert _fast(ok, 8 + len(ok) + 12, "f") is not None
    dashed = ok.replace(b'"a"', b'"a-b.c-0"')  # dashes in a name: still the fast path
    assert _fast(dashed, 8 + len(dashed) + 12, "f") is not None
    # __metadata__ first, a key repeated inside it: the last wins, as in the reference
    meta = b'{"__metadata__": {"k": "1", "k": "2"}, ' + ok[1:]
    h = _fast(meta, 8 + len(meta) + 12, "f")
    start = 8 + len(meta)
    assert h is not None and h.metadata == {"k": "2"} and h.tensors["b"].offsets == (start + 8, start + 12)
    # out of offset order, and a tensor of 0 bytes: the general loop accepts both
    odd = _entries(("b", "U8", [4], [8, 12]), ("z", "F32", [0, 3], [8, 8]), ("a", "F32", [2], [0, 8]))
    h = _fast(odd, 8 + len(odd) + 12, "f")
    assert h is not None and list(h.tensors) == ["b", "z", "a"] and h.tensors["z"].nbytes == 0
    declined = {
        "repeated field": ok.replace(b'"dtype": "F32"', b'"dtype": "F16", "dtype": "F32"'),
        "unknown field": ok.replace(b'"dtype": "F32"', b'"x": 1, "dtype": "F32"'),
        "negative dimension": _entries(("a", "F32", [-2], [0, 8]), ("b", "U8", [4], [8, 12])),
        "negative offset": _entries(("a", "F32", [2], [-8, 0]), ("b", "U8", [4], [0, 4])),
        "-0": ok.replace(b"[0, 8]", b"[-0, 8]"),
    }
    for label, raw in declined.items():
        size = 8 + len(raw) + 12
        assert _fast(raw, size, "f") is None, label
        try:  # the reference path decides, as safetensors' own reader does (it ignores an unknown field)
            tensors = parse_header(raw, size, "f").tensors.values()
            got = sorted((t.name, t.dtype, list(t.shape), t.nbytes) for t in tensors)
        except CheckpointError:
            got = None
        assert got == mutations.reference(raw, size), label


def test_paused_header_pass_leaves_no_tuple_for_the_collector(tmp_path):
    """Under the pass's paused collector each shard's shape and data_offsets tuples are
    collected while in cache (parse_header), not walked cold at the end of the pass."""
    import gc

    from specguard.checkpoint.source import gc_paused

    raw = _entries(*((f"t{i}", "F32", [3, 1000 + i], [12000 * i + 6 * i * (i - 1), 12000 * (i + 1) + 6 * i * (i + 1)])
                     for i in range(50)))
    p = tmp_path / "m.safetensors"
    p.write_bytes(struct.pack("<Q", len(raw)) + raw + bytes(12000 * 50 + 6 * 49 * 50))
    with gc_paused():
        h = read_header(p)
        tracked = [t for t in h.tensors.values() if gc.is_tracked(t.shape) or gc.is_tracked(t.data_offsets)]
    assert len(h.tensors) == 50 and not tracked
