"""Write safetensors files from numpy arrays (any ml_dtypes dtype).

The one writer: the factory and tests write arrays (``save_file``), ``specguard
fix`` streams a rewritten shard (``write_file``). Never used on a user's
checkpoint: specguard only writes into directories it creates.
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np

from specguard.checkpoint.dtypes import FROM_NUMPY


class HeaderEntry(Protocol):
    """One tensor as the header lists it; its bytes come separately, in order."""

    @property
    def name(self) -> str: ...
    @property
    def dtype(self) -> str: ...
    @property
    def shape(self) -> tuple[int, ...]: ...
    @property
    def nbytes(self) -> int: ...


@dataclass(frozen=True)
class Tensor:
    name: str
    dtype: str
    shape: tuple[int, ...]
    nbytes: int


def write_file(
    path: str | os.PathLike[str],
    entries: Sequence[HeaderEntry],
    pieces: Iterable[bytes],
    metadata: Mapping[str, str] | None = None,
) -> int:
    """Write a safetensors file whose header lists ``entries`` in their order and
    whose data section is ``pieces`` concatenated (streamed: a caller can produce
    them one at a time). Returns the file's size; fewer or more bytes than the
    header promised raise ``ValueError``."""
    header: dict[str, object] = {}
    if metadata:
        header["__metadata__"] = dict(metadata)
    offset = 0
    for e in entries:
        header[e.name] = {"dtype": e.dtype, "shape": list(e.shape), "data_offsets": [offset, offset + e.nbytes]}
        offset += e.nbytes
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)  # align the buffer start, as the reference does
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    written = 0
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        for piece in pieces:
            written += len(piece)
            if written > offset:
                break
            f.write(piece)
    if written != offset:
        raise ValueError(f"{path}: the header promised {offset} data bytes, {written} were given")
    return 8 + len(raw) + offset


def save_file(
    tensors: Mapping[str, np.ndarray],
    path: str | os.PathLike[str],
    metadata: Mapping[str, str] | None = None,
) -> None:
    """Write ``tensors`` to ``path`` in the safetensors layout (sorted by name).

    The dtype label comes from the array's numpy dtype: uint8 -> U8,
    ml_dtypes.float8_e8m0fnu -> F8_E8M0, ml_dtypes.bfloat16 -> BF16, ...
    Packed FP4 is stored as U8 bytes, as ModelOpt and compressed-tensors do.
    Shapes are kept as given: a 0-d array is written with shape ``[]`` (ModelOpt's
    scalar ``weight_scale_2`` / ``input_scale``), not widened to ``[1]``.
    """
    # np.ascontiguousarray would turn a 0-d array into shape (1,)
    arrays = {name: np.require(tensors[name], requirements="C") for name in sorted(tensors)}
    entries = []
    for name, arr in arrays.items():
        dtype = FROM_NUMPY.get(arr.dtype)
        if dtype is None:
            raise TypeError(f"{name}: no safetensors dtype for numpy dtype {arr.dtype}")
        entries.append(Tensor(name, dtype, arr.shape, arr.nbytes))
    write_file(path, entries, (arr.tobytes() for arr in arrays.values()), metadata)


def save_index(
    weight_map: Mapping[str, str], directory: str | os.PathLike[str], total_size: int
) -> None:
    """Write ``model.safetensors.index.json`` for a sharded checkpoint."""
    index = {"metadata": {"total_size": total_size}, "weight_map": dict(sorted(weight_map.items()))}
    Path(directory, "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")
