"""Strict safetensors header parsing: what the Rust reference accepts, nothing more.

Reads the 8-byte length and the JSON header only; never the tensor data.
"""

from __future__ import annotations

import math
import operator
import os
import struct
from dataclasses import dataclass
from itertools import chain, repeat
from operator import attrgetter, mul

import msgspec
import orjson

from specguard.checkpoint.dtypes import BITS
from specguard.checkpoint.errors import CheckpointError

MAX_HEADER = 100_000_000  # the safetensors reference's limit (bytes)


class TensorInfo(msgspec.Struct, gc=False, omit_defaults=True):
    """One tensor as its header describes it.

    The typed decoder builds these straight from the header's JSON (the first
    three fields are the entry's own keys), and the pass then fills in name,
    shard and where its data section starts: no second record per tensor. Not
    tracked by the cyclic collector (``gc=False``: it holds strings and ints).
    ``offsets`` are absolute in ``file``.
    """

    # The defaults stand for a missing key: each fails validation (no dtype, a negative
    # dimension, offsets that cannot tile from 0), sending the header to the dict path.
    dtype: str = ""
    shape: tuple[int, ...] = (-1,)
    data_offsets: tuple[int, int] = (-1, -1)  # relative to the data section, as stored
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
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            head = f.read(8)
            if len(head) < 8:
                raise CheckpointError(where, f"truncated: {size} bytes, shorter than the 8-byte header length")
            (n,) = struct.unpack("<Q", head)
            check_header_length(n, size, where)
            raw = f.read(n)
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


class _Metadata(msgspec.Struct, rename={"metadata": "__metadata__"}):
    metadata: dict[str, str] | None = None  # every other key is skipped unread


_DECODE_ENTRIES = msgspec.json.Decoder(dict[str, TensorInfo]).decode
_DECODE_METADATA = msgspec.json.Decoder(_Metadata).decode
_DTYPE, _SHAPE, _DATA_OFFSETS = attrgetter("dtype"), attrgetter("shape"), attrgetter("data_offsets")


def parse_header(raw: bytes, size: int, where: str, file: str | None = None) -> FileHeader:
    """Validate a header's JSON against the file size, as the reference does.

    ``where`` names the file in messages; ``file`` (default ``where``) is what
    each TensorInfo names as its shard.

    A typed decoder (msgspec) reads well-formed headers into structs, checking
    every type in C; what it rejects, or what fails a check after it, goes
    through the dict path, which accepts exactly the same headers and names
    the first bad entry (benchmarks/headers.py; tests/checkpoint/test_fuzz.py)."""
    data_start = 8 + len(raw)
    try:
        tensors = _DECODE_ENTRIES(raw)
        metadata = _DECODE_METADATA(raw).metadata or {} if "__metadata__" in tensors else {}
    except msgspec.DecodeError:
        pass
    else:
        tensors.pop("__metadata__", None)
        entries = list(tensors.values())
        dtypes, shapes = list(map(_DTYPE, entries)), list(map(_SHAPE, entries))
        if _valid(dtypes, shapes, list(map(_DATA_OFFSETS, entries)), size - data_start):
            file = file or where
            for name, t in tensors.items():  # the decoded entries become the records
                t.name = name
                t.file = file
                t.data_start = data_start
            return FileHeader(file, size, data_start, tensors, metadata)
    return _parse_dicts(raw, size, where, file)


def _parse_dicts(raw: bytes, size: int, where: str, file: str | None) -> FileHeader:
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        what = "not UTF-8" if "utf-8" in str(e).lower() else "not valid JSON"
        raise CheckpointError(where, f"header is {what} ({e})") from e
    if type(obj) is not dict:
        raise CheckpointError(where, f"header is a JSON {type(obj).__name__}, not an object")
    data_start = 8 + len(raw)
    metadata = _metadata(obj.pop("__metadata__", None), where)
    tensors = _fast_tensors(obj, data_start, size - data_start, file or where)
    if tensors is None:  # something is wrong: the careful pass names the entry
        tensors = _careful_tensors(obj, data_start, where)
        _check_layout(tensors, size - data_start, data_start, where)
        raise CheckpointError(where, "header failed validation")  # not reached: the careful pass raised
    return FileHeader(file or where, size, data_start, tensors, metadata)


def _fast_tensors(obj: dict, data_start: int, buffer: int, file: str) -> dict[str, TensorInfo] | None:
    """The types ``_careful_tensors`` checks, as whole-column operations
    (map/zip/set run in C), then ``_valid``; the records, or None when any fails."""
    entries = list(obj.values())
    try:
        dtypes = [e["dtype"] for e in entries]
        shapes = [e["shape"] for e in entries]
        offsets = [tuple(e["data_offsets"]) for e in entries]
        begins, ends = zip(*offsets, strict=True) if entries else ((), ())
    except (KeyError, TypeError, ValueError):
        return None
    if not set(map(type, dtypes)) <= {str} or not set(map(type, shapes)) <= {list}:
        return None
    if not set(map(type, chain.from_iterable(shapes))) <= {int}:
        return None
    if not set(map(type, begins)) | set(map(type, ends)) <= {int}:
        return None
    shapes = list(map(tuple, shapes))
    if not _valid(dtypes, shapes, offsets, buffer):
        return None
    return {
        name: TensorInfo(dtype, shape, offs, name, file, data_start)
        for name, dtype, shape, offs in zip(obj, dtypes, shapes, offsets, strict=True)
    }


def _valid(dtypes: list[str], shapes: list[tuple[int, ...]], offsets: list[tuple[int, int]], buffer: int) -> bool:
    """All value checks of ``_careful_tensors`` + ``_check_layout`` on well-typed
    columns, as whole-column operations (map/zip/set run in C).

    The header pass is dominated by per-tensor Python overhead; this keeps it
    near the cost of decoding the JSON itself (benchmarks/headers.py).
    """
    if not set(dtypes) <= BITS.keys():
        return False
    if min(chain.from_iterable(shapes), default=0) < 0:
        return False
    begins, ends = zip(*offsets, strict=True) if offsets else ((), ())
    bits = list(map(mul, map(math.prod, shapes), map(BITS.__getitem__, dtypes)))
    # 8 x span == bits: whole bytes, and exactly the bytes dtype x shape needs (spans >= 0)
    if list(map(mul, map(operator.sub, ends, begins), repeat(8))) != bits:
        return False
    # Spans tiling [0, buffer) from 0 also proves every begin >= 0.
    if begins and (begins[0] != 0 or begins[1:] != ends[:-1]):  # not in offset order: sort first
        order = sorted(offsets)
        starts, stops = [b for b, _ in order], [e for _, e in order]
        if starts[0] != 0 or starts[1:] != stops[:-1]:
            return False
        last = stops[-1]
    else:
        last = ends[-1] if ends else 0
    return last == buffer


def _careful_tensors(obj: dict, data_start: int, where: str) -> dict[str, TensorInfo]:
    """Entry by entry, raising on the first bad one with a message that names it."""
    tensors: dict[str, TensorInfo] = {}
    bits_of = BITS.get
    for name, entry in obj.items():
        try:
            dtype = entry["dtype"]
            shape = entry["shape"]
            begin, end = entry["data_offsets"]
        except (KeyError, TypeError, ValueError):
            raise CheckpointError(
                f"{where} [{name}]", "entry needs dtype, shape and data_offsets [begin, end]"
            ) from None
        bits = bits_of(dtype) if type(dtype) is str else None
        if bits is None:
            raise CheckpointError(f"{where} [{name}]", f"unknown dtype {dtype!r}")
        if type(shape) is not list:
            raise CheckpointError(f"{where} [{name}]", f"shape {shape!r} is not a list")
        for d in shape:
            if type(d) is not int or d < 0:
                raise CheckpointError(f"{where} [{name}]", f"shape {shape!r} is not a list of non-negative integers")
        if type(begin) is not int or type(end) is not int or not 0 <= begin <= end:
            raise CheckpointError(f"{where} [{name}]", f"bad data_offsets {entry['data_offsets']!r}")
        total = math.prod(shape) * bits
        if total & 7:
            raise CheckpointError(f"{where} [{name}]", f"{dtype} {shape} does not end on a byte boundary")
        if end - begin != total >> 3:
            raise CheckpointError(
                f"{where} [{name}]",
                f"{dtype} {shape} needs {total >> 3} bytes but data_offsets span {end - begin}",
            )
        tensors[name] = TensorInfo(dtype, tuple(shape), (begin, end), name, where, data_start)
    return tensors


def _metadata(meta: object, where: str) -> dict[str, str]:
    if meta is None:
        return {}
    if not isinstance(meta, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in meta.items()
    ):
        raise CheckpointError(f"{where} [__metadata__]", "must be a map of strings to strings")
    return meta


def _check_layout(tensors: dict[str, TensorInfo], buffer: int, data_start: int, where: str) -> None:
    """Entries sorted by offset must tile the buffer exactly: no hole, no overlap."""
    pos = data_start
    for t in sorted(tensors.values(), key=_OFFSETS):
        if t.offsets[0] != pos:
            what = "overlaps the previous tensor" if t.offsets[0] < pos else "leaves a hole before it"
            raise CheckpointError(f"{where} [{t.name}]", f"data_offsets {_rel(t, data_start)} {what}")
        pos = t.offsets[1]
    if pos - data_start > buffer:
        raise CheckpointError(where, f"truncated: tensors cover {pos - data_start} bytes but the data section "
                                     f"holds only {buffer}")
    if pos - data_start != buffer:
        raise CheckpointError(
            where, f"tensors cover {pos - data_start} bytes but the data section holds {buffer}"
        )


_OFFSETS = attrgetter("data_offsets")  # (begin, end) sorts by begin


def _rel(t: TensorInfo, data_start: int) -> list[int]:
    return [t.offsets[0] - data_start, t.offsets[1] - data_start]
