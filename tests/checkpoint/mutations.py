"""Mutated safetensors headers for the differential fuzz against safetensors' own reader.

Shared by tests/checkpoint/test_fuzz.py (a bounded count in CI) and
scripts/fuzz_headers.py (the long run, benchmarks/results/fuzz_headers.txt).

A seed is a real header (producer fixtures in tests/data/producers, a factory
scenario's shard, tensor names of a published Qwen index) held as a tree whose
objects keep every (key, value) pair: repeats and odd number spellings survive
until the bytes are written. Each case applies one to three mutations, named by
kind, then sometimes a byte-level one; ``case`` returns the header bytes and the
file size to judge them against.
"""

from __future__ import annotations

import functools
import json
import math
import random
import re
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from specguard.checkpoint.dtypes import BITS

ROOT = Path(__file__).resolve().parents[2]
PRODUCERS = ROOT / "tests" / "data" / "producers"
QWEN_INDEX = ROOT / "tests" / "data" / "published" / "qwen3_5_dense_ct_mtpfile" / "index.mtp-entries.json"


class Obj(list):
    """A JSON object as its pairs, repeats allowed."""


class Num(str):
    """A number written exactly as given ("-0", "1e999", 400 digits)."""


class Bad(bytes):
    """Bytes written as they are inside a string (invalid UTF-8, raw control bytes)."""


class Raw(bytes):
    """A value written as these bytes (10,000 levels of nesting: no tree, no recursion)."""


_PLAIN = re.compile(r"[ !#-\[\]-~]*")  # printable ASCII but the quote and the backslash


def dump(v: object, indent: bool = False) -> bytes:
    sep = b",\n  " if indent else b","
    if type(v) is Obj:
        return b"{" + sep.join(dump(k) + b":" + dump(x, indent) for k, x in v) + b"}"
    if type(v) is list:
        return b"[" + b",".join(dump(x, indent) for x in v) + b"]"
    if type(v) is Num:
        return v.encode()
    if type(v) is Bad:
        return b'"' + v + b'"'
    if type(v) is Raw:
        return bytes(v)
    if type(v) is str:
        if _PLAIN.fullmatch(v):
            return b'"' + v.encode() + b'"'
        return json.dumps(v, ensure_ascii=False).encode("utf-8", "surrogatepass")
    if type(v) is int:
        return str(v).encode()
    return json.dumps(v).encode()


@dataclass
class Seed:
    name: str
    header: Obj  # metadata first when the file has it, as written
    buffer: int

    def __post_init__(self) -> None:
        # each untouched pair's bytes, by the identity of its value: a case copies only what it mutates
        self.written = {id(v): dump(k) + b":" + dump(v) for k, v in self.header}


def dump_header(h: Obj, seed: Seed, indent: bool = False) -> bytes:
    sep = b",\n  " if indent else b","
    written = seed.written
    return b"{" + sep.join(written.get(id(v)) or dump(k) + b":" + dump(v, indent) for k, v in h) + b"}"


def _tree(v: object) -> object:
    if isinstance(v, dict):
        return Obj((k, _tree(x)) for k, x in v.items())
    if isinstance(v, list):
        return [_tree(x) for x in v]
    return v


def read_seed(path: Path, name: str | None = None) -> Seed:
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    return Seed(name or path.parent.name, _tree(json.loads(raw[8:8 + n])), len(raw) - 8 - n)  # type: ignore[arg-type]


def shrunk(seed: Seed, rng: random.Random, entries: int = 12) -> Seed:
    """A window of up to ``entries`` consecutive entries of the seed (and its
    metadata), every dimension cut to 1, 2 or 4 and the offsets retiled: real
    names, dtypes, ranks and order, a data section of a few hundred bytes (the
    reference reader copies it). Sub-byte dtypes get a last dimension of 8."""
    out, pos = Obj(), 0
    pairs = [p for p in seed.header if p[0] != "__metadata__"]
    start = rng.randrange(max(1, len(pairs) - entries + 1))
    window = [p for p in seed.header if p[0] == "__metadata__"] + pairs[start:start + entries]
    for k, v in window:
        if k == "__metadata__" or type(v) is not Obj:
            out.append((k, v))
            continue
        e = dict(v)
        shape = [min(int(d), rng.choice((1, 2, 4))) for d in e["shape"]]
        bits = BITS[e["dtype"]]
        if math.prod(shape) * bits % 8:
            shape = [*shape[:-1], 8] if shape else [8]
        size = math.prod(shape) * bits // 8
        out.append((k, Obj([("dtype", e["dtype"]), ("shape", shape), ("data_offsets", [pos, pos + size])])))
        pos += size
    return Seed(seed.name + "/shrunk", out, pos)


def qwen_seed() -> Seed:
    """Tensor names of a published Qwen3.5 index (tests/data/published), as one shard."""
    names = list(json.loads(QWEN_INDEX.read_text())["weight_map"])[:40]
    dtypes = ["BF16", "I32", "F32", "U8", "F8_E4M3", "F8_E8M0"]
    out, pos = Obj([("__metadata__", Obj([("format", "pt")]))]), 0
    for i, name in enumerate(names):
        dtype, shape = dtypes[i % len(dtypes)], [2, 1 + i % 3]
        size = 2 * (1 + i % 3) * BITS[dtype] // 8
        out.append((name, Obj([("dtype", dtype), ("shape", shape), ("data_offsets", [pos, pos + size])])))
        pos += size
    return Seed("qwen3.5-index-names", out, pos)


def seeds(extra: list[Path] = ()) -> list[Seed]:  # type: ignore[assignment]
    """Real headers: every producer fixture, ``extra`` files (a factory scenario's shards), Qwen names."""
    found = [read_seed(p) for p in sorted(PRODUCERS.glob("*/model.safetensors"))]
    found += [read_seed(p, f"factory/{p.parent.name}/{p.name}") for p in extra]
    found.append(qwen_seed())
    return found


# -- mutations: each takes (header, rng) and returns the new header (buffer changes via Case) --

DEEP = (125, 126, 127, 128, 129, 200, 1000, 5000, 100_000)
WEIRD_NUMBERS = ("-0", "-0.0", "1e999", "-1e999", "1e308", "1e-999", "9" * 400, "-" + "9" * 400,
                 str(2**64), str(2**64 - 1), str(2**63), "4.0", "4e0", "1E2", "-1", "0.5", "12345678901234567890123")
VALUES: tuple[object, ...] = (None, True, False, 0, 1, "", "x", [], Obj(), [1, 2], Obj([("a", "b")]), 1.5)


def _nested(depth: int, rng: random.Random) -> Raw:
    """``depth`` levels of arrays or objects, as bytes (100,000 levels)."""
    return _nesting(depth, rng.choice((b"0", b'"x"', b"null", b"")), rng.choice(("list", "obj", "mixed")))


@functools.cache
def _nesting(depth: int, leaf: bytes, kind: str) -> Raw:
    opens, closes = [], []
    for i in range(depth):
        as_obj = kind == "obj" or (kind == "mixed" and i % 2)
        opens.append(b'{"k":' if as_obj else b"[")
        closes.append(b"}" if as_obj else b"]")
    if leaf == b"" and opens[-1] != b"[":
        leaf = b"0"
    return Raw(b"".join(opens) + leaf + b"".join(reversed(closes)))


def _entries(h: Obj) -> list[int]:
    return [i for i, (k, v) in enumerate(h) if k != "__metadata__"]


def _pick_entry(h: Obj, rng: random.Random) -> tuple[int, object] | None:
    """An entry to mutate in place: a copy, put in the seed's entry's place."""
    idx = _entries(h)
    if not idx:
        return None
    i = rng.choice(idx)
    h[i] = (h[i][0], _copy(h[i][1]))
    return i, h[i][1]


def m_deep_nesting(h: Obj, rng: random.Random) -> Obj:
    depth = rng.choice(DEEP)
    where = rng.choice(("unknown field", "metadata value", "metadata", "shape", "top value", "dtype"))
    v = _nested(depth, rng)
    got = _pick_entry(h, rng)
    if where == "unknown field" and got and type(got[1]) is Obj:
        got[1].insert(rng.randrange(len(got[1]) + 1), ("extra", v))
    elif where == "metadata value":
        h.insert(0, ("__metadata__", Obj([("format", "pt"), ("deep", v)])))
    elif where == "metadata":
        h.insert(0, ("__metadata__", v))
    elif where in ("shape", "dtype") and got and type(got[1]) is Obj:
        got[1][:] = [(k, v if k == where else x) for k, x in got[1]]
    else:
        h.append(("deep", v))
    return h


def m_duplicate_field(h: Obj, rng: random.Random) -> Obj:
    got = _pick_entry(h, rng)
    if got and type(got[1]) is Obj and got[1]:
        k, v = rng.choice(list(got[1]))
        if rng.random() < 0.5:
            v = rng.choice(("F32", "U8", [1], [0, 4], [0, 0]))
        got[1].insert(rng.randrange(len(got[1]) + 1), (k, v))
    return h


def _entry_shaped() -> Obj:
    """A value a tensor entry could have: as __metadata__, serde refuses it (not strings)."""
    return Obj([("dtype", "U8"), ("shape", [0]), ("data_offsets", [0, 0])])


def m_duplicate_metadata(h: Obj, rng: random.Random) -> Obj:
    meta = rng.choice((Obj([("format", "pt")]), None, Obj(), Obj([("a", "b")]), _entry_shaped()))
    h.insert(rng.randrange(len(h) + 1), ("__metadata__", meta))
    if rng.random() < 0.7:
        h.insert(rng.randrange(len(h) + 1), ("__metadata__", rng.choice((Obj([("format", "pt")]), None,
                                                                          _entry_shaped()))))
    return h


def m_repeat_key(h: Obj, rng: random.Random) -> Obj:
    got = _pick_entry(h, rng)
    if got:
        i, v = got
        copy = Obj(list(v)) if type(v) is Obj else v
        if type(copy) is Obj and rng.random() < 0.6:  # a copy that differs: bad dtype, other offsets, 0 bytes
            j = rng.randrange(len(copy)) if copy else 0
            if copy:
                k, _ = copy[j]
                copy[j] = (k, rng.choice(("Q9", "F32", [0], [0, 0], [1, 1], Num("-0"), [Num(str(2**64)), 0])))
        h.insert(rng.randrange(len(h) + 1), (h[i][0], copy))
    return h


def m_bad_utf8(h: Obj, rng: random.Random) -> Obj:
    junk = Bad(rng.choice((b"\xff", b"\xc3", b"\xed\xa0\x80", b"a\x80b", b"\xf4\x90\x80\x80", b"\x01", b"\n")))
    where = rng.choice(("unknown field", "metadata", "name"))
    got = _pick_entry(h, rng)
    if where == "unknown field" and got and type(got[1]) is Obj:
        got[1].append(("note", junk))
    elif where == "metadata":
        h.insert(0, ("__metadata__", Obj([("format", junk)])))
    elif got and type(h[got[0]][0]) is str:
        i, v = got
        h[i] = (Bad(h[i][0].encode() + junk), v)  # type: ignore[assignment]
    return h


def m_weird_number(h: Obj, rng: random.Random) -> Obj:
    num = Num(rng.choice(WEIRD_NUMBERS))
    got = _pick_entry(h, rng)
    if not got or type(got[1]) is not Obj:
        return h
    entry = got[1]
    where = rng.choice(("unknown field", "offset", "shape", "metadata"))
    if where == "unknown field":
        entry.append(("extra", rng.choice((num, [num], Obj([("n", num)])))))
    elif where == "metadata":
        h.insert(0, ("__metadata__", Obj([("n", num)])))
    else:
        key = "data_offsets" if where == "offset" else "shape"
        for j, (k, v) in enumerate(entry):
            if k == key and type(v) is list and v:
                v = list(v)
                v[rng.randrange(len(v))] = num
                entry[j] = (k, v)
    return h


def m_negative_zero(h: Obj, rng: random.Random) -> Obj:
    got = _pick_entry(h, rng)
    if got and type(got[1]) is Obj:
        for j, (k, v) in enumerate(got[1]):
            if k in ("data_offsets", "shape") and type(v) is list and v:
                v = [Num("-0") if x == 0 or rng.random() < 0.2 else x for x in v]
                got[1][j] = (k, v)
    return h


def m_huge_dimension(h: Obj, rng: random.Random) -> Obj:
    """A tensor of 0 bytes with a dimension at or past 2**64, or whose running product
    overflows u64 before (or after) it reaches the 0."""
    shape = rng.choice(([0, 2**64 - 1], [0, 2**64], [2**64, 0], [2**32, 2**32, 0], [0, 2**32, 2**32],
                        [2**63, 2, 0], [2**62, 0], [2**61, 0], [2**32, 2**31, 0], [3, 2**63, 0], [2**70, 0],
                        [2**64 - 1, 0], [2**63, 0]))
    dtype = rng.choice(("F64", "U8", "F4", "BOOL", "C64"))
    entries = _entries(h)
    begin = 0 if not entries else rng.choice([0, *[_end(h[i][1]) for i in entries]])
    h.insert(rng.randrange(len(h) + 1), (f"zero.{rng.randrange(99)}", Obj(
        [("dtype", dtype), ("shape", shape), ("data_offsets", [begin, begin])])))
    return h


def _end(v: object) -> int:
    if type(v) is Obj:
        offs = dict(v).get("data_offsets")
        if type(offs) is list and len(offs) == 2 and type(offs[1]) is int:
            return offs[1]
    return 0


def m_entry_as_list(h: Obj, rng: random.Random) -> Obj:
    got = _pick_entry(h, rng)
    if got and type(got[1]) is Obj:
        d = dict(got[1])
        lst = [d.get("dtype"), d.get("shape"), d.get("data_offsets")]
        lst = rng.choice((lst, lst, lst[:2], [*lst, 0], [*lst, None]))
        h[got[0]] = (h[got[0]][0], lst)
    return h


def m_dtype_as_map(h: Obj, rng: random.Random) -> Obj:
    got = _pick_entry(h, rng)
    if got and type(got[1]) is Obj:
        for j, (k, v) in enumerate(got[1]):
            if k == "dtype":
                form = rng.choice((Obj([(v, None)]), Obj([(v, None)]), Obj([(v, 1)]), Obj([(v, None), ("X", None)]),
                                   Obj(), [v], Obj([(v, Obj())])))
                got[1][j] = (k, form)
    return h


def m_unknown_field(h: Obj, rng: random.Random) -> Obj:
    got = _pick_entry(h, rng)
    if got and type(got[1]) is Obj:
        got[1].insert(rng.randrange(len(got[1]) + 1), (rng.choice(("x", "offsets", "Dtype", "")), rng.choice(VALUES)))
    return h


def m_surrogate(h: Obj, rng: random.Random) -> Obj:
    esc = rng.choice(("\\ud800", "\\udc00", "\\ud83d\\ude00", "\\ud800\\u0041", "\\udbff\\udfff", "\\ud800\\ud800",
                      "\\u0000", "\\u005f", "\\n", "\\\"", "\\/", "\\x"))
    got = _pick_entry(h, rng)
    if not got:
        return h
    i, v = got
    where = rng.choice(("name", "unknown field", "metadata"))
    if where == "name" and type(h[i][0]) is str:
        h[i] = (Bad((h[i][0] + "\0").encode().replace(b"\0", esc.encode())), v)  # type: ignore[assignment]
    elif where == "unknown field" and type(v) is Obj:
        v.append(("s", Bad(esc.encode())))
    else:
        h.insert(0, ("__metadata__", Obj([("s", Bad(esc.encode()))])))
    return h


def m_escaped_key(h: Obj, rng: random.Random) -> Obj:
    """A field or ``__metadata__`` spelled with escapes: the same key to every JSON reader."""
    got = _pick_entry(h, rng)
    if rng.random() < 0.5 and got and type(got[1]) is Obj:
        got[1][:] = [(Bad(b"\\u0064type") if k == "dtype" else k, v) for k, v in got[1]]  # type: ignore[misc]
    else:
        meta = [i for i, (k, _) in enumerate(h) if k == "__metadata__"]
        if meta:
            h[meta[0]] = (Bad(b"\\u005f_metadata__"), h[meta[0]][1])  # type: ignore[assignment]
        else:
            h.insert(0, (Bad(b"\\u005f_metadata__"), Obj([("format", "pt")])))  # type: ignore[arg-type]
    return h


def m_offsets(h: Obj, rng: random.Random) -> Obj:
    got = _pick_entry(h, rng)
    if got and type(got[1]) is Obj:
        for j, (k, v) in enumerate(got[1]):
            if k == "data_offsets" and type(v) is list and len(v) == 2 and all(type(x) is int for x in v):
                b, e = v
                d = rng.choice((-8, -1, 1, 2, 8, 64))
                v = rng.choice(([b + d, e + d], [b, e + d], [b + d, e], [e, b], [b, b], [e, e], [0, e - b],
                                [b, e, e], [b], []))
                got[1][j] = (k, [max(0, x) for x in v] if rng.random() < 0.8 else v)
    return h


def m_reorder(h: Obj, rng: random.Random) -> Obj:
    body = [p for p in h if p[0] != "__metadata__"]
    meta = [p for p in h if p[0] == "__metadata__"]
    rng.shuffle(body)
    h[:] = body
    for p in meta:
        h.insert(rng.randrange(len(h) + 1), p)
    return h


def m_shape(h: Obj, rng: random.Random) -> Obj:
    got = _pick_entry(h, rng)
    if got and type(got[1]) is Obj:
        for j, (k, v) in enumerate(got[1]):
            if k == "shape" and type(v) is list:
                v = rng.choice(([*v, 1], v[:-1], [*v, 0], [x * 2 for x in v], list(reversed(v)), [-1, *v],
                                [True], ["2"], [2.0], None, "x", Obj()))
                got[1][j] = (k, v)
    return h


def m_dtype(h: Obj, rng: random.Random) -> Obj:
    got = _pick_entry(h, rng)
    if got and type(got[1]) is Obj:
        for j, (k, _) in enumerate(got[1]):
            if k == "dtype":
                got[1][j] = (k, rng.choice((*BITS, "F8_E8M0FNU", "f32", "", "Q9", 1, None)))
    return h


def m_drop_field(h: Obj, rng: random.Random) -> Obj:
    got = _pick_entry(h, rng)
    if got and type(got[1]) is Obj and got[1]:
        del got[1][rng.randrange(len(got[1]))]
    return h


def m_metadata(h: Obj, rng: random.Random) -> Obj:
    meta = rng.choice((None, Obj(), Obj([("format", "pt")]), Obj([("a", 1)]), Obj([("a", "1"), ("a", "2")]),
                       [], "pt", Obj([("a", None)]), Obj([("a", ["b"])]), _entry_shaped()))
    h[:] = [p for p in h if p[0] != "__metadata__"]
    h.insert(rng.choice((0, len(h), rng.randrange(len(h) + 1))), ("__metadata__", meta))
    return h


def m_entry_type(h: Obj, rng: random.Random) -> Obj:
    got = _pick_entry(h, rng)
    if got:
        h[got[0]] = (h[got[0]][0], rng.choice(VALUES))
    return h


MUTATIONS: dict[str, Callable[[Obj, random.Random], Obj]] = {
    "deep nesting": m_deep_nesting, "duplicate field": m_duplicate_field,
    "duplicate __metadata__": m_duplicate_metadata, "repeated tensor key": m_repeat_key,
    "invalid UTF-8": m_bad_utf8, "1e999 and other numbers": m_weird_number, "-0": m_negative_zero,
    "dimension >= 2**64 / product overflow beside 0": m_huge_dimension, "entry as a list": m_entry_as_list,
    "dtype as a map": m_dtype_as_map, "unknown field": m_unknown_field, "surrogates and escapes": m_surrogate,
    "escaped key": m_escaped_key, "offsets": m_offsets, "key order": m_reorder, "shape": m_shape,
    "dtype": m_dtype, "missing field": m_drop_field, "metadata": m_metadata, "entry type": m_entry_type,
}


def _bytes_mutation(raw: bytes, rng: random.Random) -> tuple[bytes, str]:
    kind = rng.choice(("flip", "delete", "insert", "truncate", "trailing", "leading", "pretty"))
    if kind == "pretty":
        return raw, kind
    if kind == "trailing":
        return raw + rng.choice((b" ", b"\n\t\r ", b"\0", b"x", b",", b"}", b"  \x0b")), kind
    if kind == "leading":
        return rng.choice((b" ", b"\xef\xbb\xbf", b"\n", b"\x0c")) + raw, kind
    if not raw:
        return raw, kind
    i = rng.randrange(len(raw))
    if kind == "flip":
        return raw[:i] + bytes([raw[i] ^ (1 << rng.randrange(8))]) + raw[i + 1:], kind
    if kind == "delete":
        return raw[:i] + raw[i + 1:], kind
    if kind == "insert":
        return raw[:i] + bytes([rng.choice(b'{}[],:"\\-0 9e.\n\xff')]) + raw[i:], kind
    return raw[:i], kind


def _copy(v: object) -> object:
    """A deep copy without recursion limits (trees here are at most a few levels before mutation)."""
    if type(v) is Obj:
        return Obj((k, _copy(x)) for k, x in v)
    if type(v) is list:
        return [_copy(x) for x in v]
    return v


def case(seed: Seed, rng: random.Random) -> tuple[bytes, int, str]:
    """One mutated header: (header bytes, file size, the mutation kinds applied)."""
    h = Obj(seed.header)  # the pairs; entries are copied when a mutation picks them
    kinds = []
    for _ in range(rng.choice((1, 1, 1, 2, 3))):
        kind = rng.choice(list(MUTATIONS))
        h = MUTATIONS[kind](h, rng)  # type: ignore[arg-type]
        kinds.append(kind)
    raw = dump_header(h, seed, indent=rng.random() < 0.05)
    if rng.random() < 0.15:
        raw, k = _bytes_mutation(raw, rng)
        kinds.append(f"bytes:{k}")
    slack = 0 if rng.random() < 0.85 else rng.choice((-8, -1, 1, 8))
    return raw, 8 + len(raw) + max(0, seed.buffer + slack), "+".join(kinds)


def cases(seed_list: list[Seed], count: int, seed: int = 0, shrink: float = 0.97) -> Iterator[tuple[bytes, int, str]]:
    """``count`` cases, round-robin over the seeds; most from shrunk windows of them
    (a few entries, small data sections), the rest from the whole real header."""
    rng = random.Random(seed)
    small = [[shrunk(s, rng) for _ in range(4)] for s in seed_list]
    for i in range(count):
        k = i % len(seed_list)
        yield case(rng.choice(small[k]) if rng.random() < shrink else seed_list[k], rng)


# -- the judge --------------------------------------------------------------------------------

def reference(raw: bytes, size: int) -> list[tuple[str, str, list[int], int]] | None:
    """safetensors' own verdict (its Rust reader, via ``deserialize``): the tensors, or None."""
    from safetensors import SafetensorError, deserialize

    try:
        out = deserialize(struct.pack("<Q", len(raw)) + raw + bytes(size - 8 - len(raw)))
    except SafetensorError:
        return None
    return sorted((name, d["dtype"], list(d["shape"]), len(d["data"])) for name, d in out)


def judge(raw: bytes, size: int) -> tuple[str | None, bool]:
    """(None when specguard and safetensors agree on ``raw``, else what differs;
    whether safetensors accepts it).

    parse_header is the fast path, or the reference path where the fast path
    declines: both run on every case, so agreeing means the reference path gives
    safetensors' verdict (and its tensors, when it accepts), the fast path
    accepts only what safetensors accepts (the same tensors), and any refusal is
    one CheckpointError whose message is one line of bounded length."""
    from specguard.checkpoint.errors import CheckpointError
    from specguard.checkpoint.header import _fast, _reference

    want = reference(raw, size)
    ok = want is not None
    for label, parse in (("reference path", _reference), ("fast path", _fast)):
        try:
            h = parse(raw, size, "fuzz", "fuzz") if parse is _reference else parse(raw, size, "fuzz")
        except CheckpointError as e:
            if label == "fast path":
                return "fast path: raised instead of declining", ok
            msg = str(e)
            if "\n" in msg or len(msg) > 700:
                return f"{label}: message of {len(msg)} characters / {msg.count(chr(10)) + 1} lines", ok
            h = None
        except Exception as e:
            return f"{label}: crash {type(e).__name__}: {str(e)[:200]}", ok
        if h is None and label == "fast path":
            continue  # declining is the fast path's right
        got = None if h is None else sorted((t.name, t.dtype, list(t.shape), t.nbytes) for t in h.tensors.values())
        if (got is None) != (want is None):
            return f"{label}: {'looser' if want is None else 'stricter'} than safetensors", ok
        if got != want:
            return f"{label}: tensors differ from safetensors'", ok
    return None, ok
