"""Strict safetensors header parsing: what the reference reader accepts, nothing more.

Reads the 8-byte length and the JSON header only; never the tensor data.

The reference is safetensors 0.8 (Rust): ``serde_json`` reads the header into
``HashMetadata`` (``__metadata__`` plus a flattened map of ``TensorInfo``), then
``Metadata::validate`` checks the offsets. What that accepts, and so what this
module accepts:

- the header is UTF-8 and strict JSON (no NaN, no trailing bytes but
  whitespace), nested at most 127 levels (serde_json's recursion limit of 128
  counts the level that fails), every number finite as a double (``1e999``, or
  an integer of 400 digits, is an error even in a field nobody reads);
- the top level is an object; ``__metadata__`` appears at most once and is null
  or an object of strings (a key repeated there: the last wins);
- every other key is a tensor: an object with ``dtype``, ``shape`` and
  ``data_offsets`` each exactly once (other fields ignored), or the same three as
  a list; ``dtype`` one of the names in dtypes.BITS (or ``{"NAME": null}``, serde's
  map form of a unit variant); ``shape`` a list of u64; ``data_offsets`` two u64.
  An integer past u64 or ``-0`` is a double to serde_json, not an integer. A
  tensor key repeated: every copy must be a valid entry, the last one wins;
- sorted by offsets the tensors tile the data section from 0 with no hole or
  overlap; each spans exactly its dtype's bits times its shape's product, which
  must end on a byte and must not overflow u64 on the way (``[2**32, 2**32, 0]``
  overflows before it reaches the 0).

Two paths implement this. The fast path decodes a well-formed header with
msgspec into ``TensorInfo`` records (types checked in C) and checks their values
in one loop; whatever it cannot vouch for (a decode error, a check that fails,
or anything msgspec lets through that serde_json would not: see ``_fast``) goes
to the reference path, which follows the rules above step by step and names the
first bad entry.
tests/checkpoint/test_fuzz.py compares both with the installed safetensors;
scripts/fuzz_headers.py runs the long version (benchmarks/results/fuzz_headers.txt).
"""

from __future__ import annotations

import gc
import json
import math
import os
import re
import struct
from dataclasses import dataclass
from itertools import chain
from operator import attrgetter
from typing import TYPE_CHECKING, Literal

import msgspec

from specguard.checkpoint.dtypes import BITS
from specguard.checkpoint.errors import CheckpointError, named
from specguard.errors import shown

MAX_HEADER = 100_000_000  # the safetensors reference's limit (bytes)
MAX_DEPTH = 127  # deepest nesting serde_json reads (its limit, 128, is the first level refused)
U64 = 2**64 - 1
if TYPE_CHECKING:
    DtypeName = str
else:
    DtypeName = Literal[tuple(BITS)]  # the reference's Dtype names: msgspec checks them while decoding


class TensorInfo(msgspec.Struct, gc=False, omit_defaults=True):
    """One tensor as its header describes it.

    The typed decoder builds these straight from the header's JSON (the first
    three fields are the entry's own keys), and the pass then fills in name,
    shard and where its data section starts: no second record per tensor. Not
    tracked by the cyclic collector (``gc=False``: it holds strings and ints).
    ``offsets`` are absolute in ``file``.
    """

    # msgspec checks these types while decoding (a missing key, an unknown dtype, a
    # number that is not an integer fails it); the fast path proves the integers are
    # u64 (_fast: no negative number, and _fill_and_check bounds them), so the values
    # then fit the names below.
    dtype: DtypeName
    shape: tuple[int, ...]
    data_offsets: tuple[int, int]  # relative to the data section, as stored
    name: str = ""
    file: str = ""
    data_start: int = 0  # 8 + the header's length

    @property
    def offsets(self) -> tuple[int, int]:
        begin, end = self.data_offsets
        return self.data_start + begin, self.data_start + end

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.data_offsets[1] - self.data_offsets[0]


@dataclass(frozen=True, slots=True)
class FileHeader:
    """A parsed, validated header: tensors in header order plus ``__metadata__``."""

    file: str
    size: int
    data_start: int
    tensors: dict[str, TensorInfo]
    metadata: dict[str, str]


def read_header(path: str | os.PathLike[str], display: str | None = None) -> FileHeader:
    """Read and validate the header of one safetensors file (no tensor bytes)."""
    where = display or os.fspath(path)
    try:  # a raw descriptor and two preads: no buffered file object per shard
        fd = os.open(path, os.O_RDONLY)
        try:
            size = os.fstat(fd).st_size
            head = os.pread(fd, 8, 0)
            if len(head) < 8:
                raise CheckpointError(where, f"truncated: {size} bytes, shorter than the 8-byte header length")
            (n,) = struct.unpack("<Q", head)
            check_header_length(n, size, where)
            raw = os.pread(fd, n, 8)
        finally:
            os.close(fd)
    except OSError as e:
        raise CheckpointError(where, f"cannot read: {e.strerror or e}") from e
    if len(raw) != n:
        raise CheckpointError(where, f"truncated header: {len(raw)} of {n} bytes")
    return parse_header(raw, size, where)


def check_header_length(n: int, size: int, where: str) -> None:
    # A safetensors file starts with the 8-byte length of a JSON header; any other
    # file (text, a pickle, an HTML error page) fails here first: say which it is not.
    if n > MAX_HEADER:
        raise CheckpointError(where, f"not a safetensors file (its first 8 bytes give a header length of {n}, "
                                     f"which exceeds the {MAX_HEADER}-byte limit)")
    if 8 + n > size:
        raise CheckpointError(where, f"not a safetensors file, or truncated (header length {n} runs past "
                                     f"the end of the file, {size} bytes)")


def parse_header(raw: bytes, size: int, where: str, file: str | None = None) -> FileHeader:
    """Validate a header's JSON against the file size, as the reference does.

    ``where`` names the file in messages; ``file`` (default ``where``) is what
    each TensorInfo names as its shard."""
    header = _fast(raw, size, file or where)
    if header is None:
        return _reference(raw, size, where, file or where)
    if not gc.isenabled():
        # The header pass pauses the collector (source.gc_paused), and msgspec tracks the
        # shape and data_offsets tuples it builds: collected now, while they are in cache,
        # the youngest generation is this shard's tuples and the collector untracks them
        # (tuples of ints); left to the end of the pass, one collection walks all of them
        # cold (benchmarks/headers.py: about 5 % of the pass on 100k tensors).
        gc.collect(0)
    return header


# -- the fast path -------------------------------------------------------------------------

_DECODE_ENTRIES = msgspec.json.Decoder(dict[str, TensorInfo]).decode
_DECODE_METADATA = msgspec.json.Decoder(dict[str, str]).decode
_DATA_OFFSETS = attrgetter("data_offsets")
# "-" right after "[", ",", ":" or whitespace: every negative number (and, rarely, a dash in a
# string, which the reference path then reads); led by the literal: 18x faster than a leading
# class on names that hold dashes
_NEGATIVE = re.compile(rb"-(?<=[\[,: \t\r\n]-)")
# Writers put __metadata__ first (safetensors' own serializer, checkpoint/writer.py).
_METADATA_FIRST = re.compile(rb'\{[ \t\r\n]*"__metadata__"[ \t\r\n]*:[ \t\r\n]*(?=\{)')
_NEXT_KEY = re.compile(rb'[ \t\r\n]*(?:,(?=[ \t\r\n]*")|(?=\}))')


def _fast(raw: bytes, size: int, file: str) -> FileHeader | None:
    """The header when msgspec's reading of it provably equals the reference's, else None.

    msgspec is as strict as serde_json about JSON itself (UTF-8, escapes, surrogates,
    numbers, trailing bytes) and checks the types it decodes (TensorInfo's
    annotations; ``__metadata__``, split off first, as a map of strings, where a
    repeated key is the last one as in the reference); what it lets through that
    serde_json refuses is ruled out here, each with one C-speed test on the tensor
    entries (the bytes after ``__metadata__``):
    - ``__metadata__`` anywhere but first, or twice, decoded as a tensor: a key lookup;
    - a repeated field or tensor key, a second ``__metadata__``, an unknown field
      (msgspec skips those unchecked: invalid UTF-8, ``1e999``, 10,000 levels of
      nesting): each is one more object member than the decoded records hold, and
      every member has its colon, so the colon count is off (a colon inside a string
      only adds: the reference path takes it);
    - a negative integer (msgspec's int; serde's u64 refuses it) or ``-0`` (0 to
      msgspec, a double to serde_json): a byte search;
    - a dimension past u64, or a shape whose running product overflows u64:
      possible only in a tensor of 0 bytes (any other product, and every offset,
      is bounded by the file size), checked one by one.
    """
    try:
        metadata, entries, body = _split_metadata(raw)
        tensors = _DECODE_ENTRIES(entries)
    except (msgspec.DecodeError, RecursionError):
        return None
    if "__metadata__" in tensors:  # not first, or a second one, shaped like an entry: never a tensor
        return None
    # n top-level keys and three fields each; (memchr for one byte: a search only where a "-" is)
    if raw.count(b":", body) != 4 * len(tensors) or (raw.find(b"-", body) >= 0 and _NEGATIVE.search(raw, body)):
        return None
    data_start = 8 + len(raw)
    if not _fill_and_check(tensors, file, data_start, size - data_start):
        return None
    return FileHeader(file, size, data_start, tensors, metadata)


def _fill_and_check(tensors: dict[str, TensorInfo], file: str, data_start: int, buffer: int) -> bool:
    """Fill in each decoded record's name, shard and data start, and check what the
    reference checks of its values: one loop (Python 3.11 specializes the slot
    reads), cheaper than a pass per check (benchmarks/headers.py). Writers list the
    entries in offset order, each of a nonzero size: the loop checks that case;
    anything else (an entry out of order, of 0 bytes or of the wrong size) goes to
    ``_fill_and_check_any``."""
    bits_of, prod = BITS, math.prod  # (a subscript is faster than a bound method call)
    pos = 0
    for name, t in tensors.items():
        t.name = name
        t.file = file
        t.data_start = data_start
        begin, end = t.data_offsets
        # from where the previous one ends, 8 x span == bits: whole bytes, exactly what
        # dtype x shape needs (a product of 0 may hide an overflow: _overflows)
        if begin != pos or prod(t.shape) * bits_of[t.dtype] != (end - pos) * 8 or end == pos:
            return _fill_and_check_any(tensors, file, data_start, buffer)
        pos = end
    return pos == buffer  # tiling [0, buffer) from 0 also proves every offset is in it


def _fill_and_check_any(tensors: dict[str, TensorInfo], file: str, data_start: int, buffer: int) -> bool:
    """``_fill_and_check`` for entries in any order and of any size."""
    bits_of, prod = BITS, math.prod
    pos, in_order = 0, True
    for name, t in tensors.items():
        t.name = name
        t.file = file
        t.data_start = data_start
        begin, end = t.data_offsets
        bits = prod(t.shape) * bits_of[t.dtype]
        if bits != (end - begin) * 8 or (not bits and _overflows(t.shape)):
            return False
        if begin != pos:
            in_order = False
        pos = end
    if not in_order:
        pos = 0
        for begin, end in sorted(map(_DATA_OFFSETS, tensors.values())):
            if begin != pos:
                return False
            pos = end
    return pos == buffer


def _split_metadata(raw: bytes) -> tuple[dict[str, str], bytes, int]:
    """``__metadata__``, the header without it and where the tensor entries begin in
    ``raw``, when it comes first; else ``{}``, ``raw`` itself and 0. A ``__metadata__``
    anywhere else fails TensorInfo's decoding.

    The map of strings ends at its first ``}`` outside a string: cut at the first
    ``}`` of all, the slice decodes only when that one is it (a ``}`` inside a
    string leaves the slice an unterminated string)."""
    head = _METADATA_FIRST.match(raw)
    if head is None:
        return {}, raw, 0
    end = raw.find(b"}", head.end()) + 1
    metadata = _DECODE_METADATA(raw[head.end():end])  # raises unless exactly the map
    after = _NEXT_KEY.match(raw, end)
    if after is None:
        raise msgspec.DecodeError("no key or end of object after __metadata__")
    return metadata, b"".join((b"{", memoryview(raw)[after.end():])), after.end()


def _overflows(shape: tuple[int, ...] | list[int], bits: int = 1) -> bool:
    """A dimension past u64, or the reference's running product of the shape (u64,
    checked at every step, then times the dtype's bits) overflowing before it ends."""
    n = 1
    for d in shape:
        if d > U64:
            return True
        n *= d
        if n > U64:
            return True
    return n * bits > U64


# -- the reference path --------------------------------------------------------------------

class _Object(list):
    """A JSON object as its (key, value) pairs, in order: repeats stay visible."""


def _double(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise ValueError(f"number out of range ({shown(text)})")
    return value


def _integer(text: str) -> int | float:
    """An integer as serde_json reads it: a u64 or i64, else a double (``-0`` included)."""
    if len(text) > 21:  # past any u64 / i64
        return _double(text)
    value = int(text)
    if value > U64 or value < -(2**63) or (value == 0 and text[0] == "-"):
        return _double(text)
    return value


def _no_constant(text: str) -> float:
    raise ValueError(f"{text} is not JSON")


_DECODER = json.JSONDecoder(object_pairs_hook=_Object, parse_int=_integer, parse_float=_double,
                            parse_constant=_no_constant)
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89abcdefABCDEF]")
_SURROGATE = re.compile("[\ud800-\udfff]")
_FIELDS = ("dtype", "shape", "data_offsets")


class _Refused(Exception):
    """What is wrong with one entry; the caller names the entry (only then: the names
    of 100,000 good entries are never escaped for a message)."""


def _reference(raw: bytes, size: int, where: str, file: str) -> FileHeader:
    """The reference reader's steps in order; the first failure names its entry."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise CheckpointError(where, f"header is not UTF-8 (byte {e.start})") from None
    try:
        obj = _DECODER.decode(text)
    except RecursionError:
        raise CheckpointError(where, f"header is nested deeper than {MAX_DEPTH} levels") from None
    except ValueError as e:  # JSONDecodeError, a number out of range, NaN
        raise CheckpointError(where, f"header is not valid JSON ({e})") from None
    if _SURROGATE_ESCAPE.search(text) and _has_surrogate(obj):
        raise CheckpointError(where, "header is not valid JSON (an unpaired UTF-16 surrogate escape)")
    if type(obj) is not _Object:
        raise CheckpointError(where, f"header is a JSON {_json_type(obj)}, not an object")
    data_start = 8 + len(raw)
    metadata: dict[str, str] | None = None
    tensors: dict[str, TensorInfo] = {}
    name = ""
    try:
        for name, value in obj:
            if name != "__metadata__":
                tensors[name] = _entry(value, name, file, data_start)
            elif metadata is None:
                metadata = _metadata_of(value)
            else:
                raise _Refused("appears twice")
        for t in tensors.values():
            name = t.name  # for the message
            _check_size(t)
    except _Refused as e:
        raise CheckpointError(named(where, name), str(e)) from None
    _check_layout(tensors, size - data_start, where)
    return FileHeader(file, size, data_start, tensors, metadata or {})


def _json_type(value: object) -> str:
    return {_Object: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}.get(
        type(value), "number")


def _has_surrogate(obj: object) -> bool:
    """Any string holding half of a UTF-16 pair: json keeps it, serde_json refuses it."""
    stack = [obj]
    while stack:
        v = stack.pop()
        if type(v) is str:
            if _SURROGATE.search(v):
                return True
        elif type(v) is _Object:
            stack += chain.from_iterable(v)
        elif type(v) is list:
            stack += v
    return False


def _metadata_of(value: object) -> dict[str, str]:
    if value is None:
        return {}
    if type(value) is not _Object or not all(type(v) is str for _, v in value):
        raise _Refused("must be null or a map of strings to strings")
    return dict(value)  # a key given twice: the last wins, as in the reference


def _u64s(values: list) -> bool:
    return all(type(v) is int and 0 <= v <= U64 for v in values)


def _entry(value: object, name: str, file: str, data_start: int) -> TensorInfo:
    """One tensor entry, typed as serde reads a ``TensorInfo`` (_check_size checks the values)."""
    dtype, shape, offsets = _fields(value)
    if type(dtype) is _Object and len(dtype) == 1 and dtype[0][1] is None:  # {"F32": null}: a unit variant
        dtype = dtype[0][0]
    if type(dtype) is not str or dtype not in BITS:
        raise _Refused(f"unknown dtype {shown(dtype)}")
    if type(shape) is not list or not _u64s(shape):
        raise _Refused(f"shape {shown(shape)} is not a list of non-negative integers below 2**64")
    if type(offsets) is not list or len(offsets) != 2 or not _u64s(offsets):
        raise _Refused(f"bad data_offsets {shown(offsets)}")
    return TensorInfo(dtype, tuple(shape), (offsets[0], offsets[1]), name, file, data_start)


def _check_size(t: TensorInfo) -> None:
    """The value checks of one tensor (the reference makes them only on the copy of a
    repeated key that wins: the others need only be well typed)."""
    begin, end = t.data_offsets
    if begin > end:
        raise _Refused(f"data_offsets [{begin}, {end}] end before they begin")
    bits = BITS[t.dtype]
    if _overflows(t.shape, bits):
        raise _Refused(f"{t.dtype} {shown(list(t.shape))}: the size overflows 64 bits")
    total = math.prod(t.shape) * bits
    if total & 7:
        raise _Refused(f"{t.dtype} {shown(list(t.shape))} does not end on a byte boundary")
    if end - begin != total >> 3:
        raise _Refused(f"{t.dtype} {shown(list(t.shape))} needs {total >> 3} bytes but data_offsets "
                       f"span {end - begin}")


_NEEDS = "entry needs dtype, shape and data_offsets [begin, end]"


def _fields(value: object) -> list:
    """dtype, shape and data_offsets of an entry: an object (each field once, others
    ignored but nested at most MAX_DEPTH levels) or a list of exactly the three."""
    if type(value) is list:
        if len(value) != 3:
            raise _Refused(f"{_NEEDS} (a list of {len(value)})")
        return value
    if type(value) is not _Object:
        raise _Refused(f"{_NEEDS} (a JSON {_json_type(value)})")
    found: dict[str, object] = {}
    for key, v in value:
        if key in _FIELDS:
            if key in found:
                raise _Refused(f"field {key} appears twice")
            found[key] = v
        elif type(v) in (list, _Object) and _depth(v) > MAX_DEPTH - 2:  # below the header and the entry
            raise _Refused(f"field {shown(key)} is nested deeper than {MAX_DEPTH} levels in all")
    if len(found) != 3:
        raise _Refused(_NEEDS)
    return [found[k] for k in _FIELDS]


def _depth(value: object) -> int:
    """Levels of arrays and objects in ``value`` (0 for a scalar), without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        v, d = stack.pop()
        if type(v) is _Object:
            deepest = max(deepest, d)
            stack += ((x, d + 1) for _, x in v)
        elif type(v) is list:
            deepest = max(deepest, d)
            stack += ((x, d + 1) for x in v)
    return deepest


def _check_layout(tensors: dict[str, TensorInfo], buffer: int, where: str) -> None:
    """Entries sorted by offset must tile the buffer exactly: no hole, no overlap."""
    pos = 0
    for t in sorted(tensors.values(), key=_DATA_OFFSETS):
        begin, end = t.data_offsets
        if begin != pos:
            what = "overlaps the previous tensor" if begin < pos else "leaves a hole before it"
            raise CheckpointError(named(where, t.name), f"data_offsets [{begin}, {end}] {what}")
        pos = end
    if pos > buffer:
        raise CheckpointError(where, f"truncated: tensors cover {pos} bytes but the data section holds only {buffer}")
    if pos != buffer:
        raise CheckpointError(where, f"tensors cover {pos} bytes but the data section holds {buffer}")
