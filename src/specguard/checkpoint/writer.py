"""Write safetensors files from numpy arrays (any ml_dtypes dtype).

Used by the factory and by tests. Never used on a user's checkpoint: specguard
only writes into directories it creates.
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from specguard.checkpoint.dtypes import FROM_NUMPY


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
    header: dict[str, object] = {}
    if metadata:
        header["__metadata__"] = dict(metadata)
    offset = 0
    blobs: list[bytes] = []
    for name in sorted(tensors):
        # np.ascontiguousarray would turn a 0-d array into shape (1,)
        arr = np.require(tensors[name], requirements="C")
        dtype = FROM_NUMPY.get(arr.dtype)
        if dtype is None:
            raise TypeError(f"{name}: no safetensors dtype for numpy dtype {arr.dtype}")
        data = arr.tobytes()
        header[name] = {
            "dtype": dtype,
            "shape": list(arr.shape),
            "data_offsets": [offset, offset + len(data)],
        }
        offset += len(data)
        blobs.append(data)
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)  # align the buffer start, as the reference does
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        for data in blobs:
            f.write(data)


def save_index(
    weight_map: Mapping[str, str], directory: str | os.PathLike[str], total_size: int
) -> None:
    """Write ``model.safetensors.index.json`` for a sharded checkpoint."""
    index = {"metadata": {"total_size": total_size}, "weight_map": dict(sorted(weight_map.items()))}
    Path(directory, "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")
