"""Strict safetensors header parsing: what the Rust reference accepts, nothing more.

Reads the 8-byte length and the JSON header only; never the tensor data.
"""

from __future__ import annotations

import json
import math
import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass

from specguard.checkpoint.dtypes import BITS
from specguard.checkpoint.errors import CheckpointError

MAX_HEADER = 100_000_000  # the safetensors reference's limit (bytes)


@dataclass(frozen=True, slots=True)
class TensorInfo:
    """One tensor as its header describes it. ``offsets`` are absolute in ``file``."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    file: str
    offsets: tuple[int, int]

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.offsets[1] - self.offsets[0]


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
    if n > MAX_HEADER:
        raise CheckpointError(where, f"header length {n} exceeds the {MAX_HEADER}-byte limit")
    if 8 + n > size:
        raise CheckpointError(where, f"header length {n} runs past the end of the file ({size} bytes)")


def parse_header(raw: bytes, size: int, where: str) -> FileHeader:
    """Validate a header's JSON against the file size, as the reference does."""
    try:
        obj = json.loads(raw)
    except UnicodeDecodeError as e:
        raise CheckpointError(where, f"header is not UTF-8 ({e.reason} at byte {e.start})") from e
    except ValueError as e:
        raise CheckpointError(where, f"header is not valid JSON ({e})") from e
    if not isinstance(obj, dict):
        raise CheckpointError(where, f"header is a JSON {type(obj).__name__}, not an object")
    data_start = 8 + len(raw)
    metadata = _metadata(obj.pop("__metadata__", None), where)
    tensors = {name: _tensor(name, entry, where, data_start) for name, entry in obj.items()}
    _check_layout(tensors, size - data_start, data_start, where)
    return FileHeader(where, size, data_start, tensors, metadata)


def _metadata(meta: object, where: str) -> dict[str, str]:
    if meta is None:
        return {}
    if not isinstance(meta, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in meta.items()
    ):
        raise CheckpointError(f"{where} [__metadata__]", "must be a map of strings to strings")
    return meta


def _tensor(name: str, entry: object, where: str, data_start: int) -> TensorInfo:
    # Hot path: one call per tensor, so checks are ordered cheapest first.
    if type(entry) is not dict:
        raise CheckpointError(f"{where} [{name}]", "entry is not a JSON object")
    try:
        dtype = entry["dtype"]
        shape = entry["shape"]
        begin, end = entry["data_offsets"]
    except (KeyError, TypeError, ValueError) as e:
        raise CheckpointError(
            f"{where} [{name}]", "entry needs dtype, shape and data_offsets [begin, end]"
        ) from e
    bits = BITS.get(dtype) if type(dtype) is str else None
    if bits is None:
        raise CheckpointError(f"{where} [{name}]", f"unknown dtype {dtype!r}")
    if type(shape) is not list or not all(type(d) is int and d >= 0 for d in shape):
        raise CheckpointError(f"{where} [{name}]", f"shape {shape!r} is not a list of non-negative integers")
    if type(begin) is not int or type(end) is not int or not 0 <= begin <= end:
        raise CheckpointError(f"{where} [{name}]", f"bad data_offsets {entry['data_offsets']!r}")
    total = math.prod(shape) * bits
    if total % 8:
        raise CheckpointError(f"{where} [{name}]", f"{dtype} {shape} does not end on a byte boundary")
    if end - begin != total >> 3:
        raise CheckpointError(
            f"{where} [{name}]",
            f"{dtype} {shape} needs {total >> 3} bytes but data_offsets span {end - begin}",
        )
    return TensorInfo(name, dtype, tuple(shape), where, (data_start + begin, data_start + end))


def _check_layout(tensors: dict[str, TensorInfo], buffer: int, data_start: int, where: str) -> None:
    """Entries sorted by offset must tile the buffer exactly: no hole, no overlap."""
    pos = data_start
    for t in sorted(tensors.values(), key=_begin):
        if t.offsets[0] != pos:
            what = "overlaps the previous tensor" if t.offsets[0] < pos else "leaves a hole before it"
            raise CheckpointError(f"{where} [{t.name}]", f"data_offsets {_rel(t, data_start)} {what}")
        pos = t.offsets[1]
    if pos - data_start != buffer:
        raise CheckpointError(
            where, f"tensors cover {pos - data_start} bytes but the data section holds {buffer}"
        )


def _begin(t: TensorInfo) -> int:
    return t.offsets[0]


def _rel(t: TensorInfo, data_start: int) -> list[int]:
    return [t.offsets[0] - data_start, t.offsets[1] - data_start]


def iter_headers(paths: list[tuple[str, str]]) -> Iterator[FileHeader]:
    """Headers of ``(path, display name)`` pairs, in order."""
    for path, display in paths:
        yield read_header(path, display)
