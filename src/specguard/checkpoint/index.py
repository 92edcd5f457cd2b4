"""What local and remote checkpoints share: the file names a checkpoint is
found by, the JSON loader for its index and configs, and the index checks that
tie the shards' own headers to the index's ``weight_map``.
"""

from __future__ import annotations

import operator
import os
from itertools import repeat
from pathlib import Path

import msgspec
import orjson

from specguard.checkpoint.errors import CheckpointError
from specguard.checkpoint.header import FileHeader, TensorInfo

INDEX = "model.safetensors.index.json"
SINGLE = "model.safetensors"
CONFIG = "config.json"
HF_QUANT_CONFIG = "hf_quant_config.json"
CONFIGS = (CONFIG, HF_QUANT_CONFIG)


def load_json(raw: bytes, where: str) -> dict:
    """An index or config file's bytes as a JSON object, or one line saying why not."""
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        raise CheckpointError(where, f"not readable JSON ({e})") from e
    if not isinstance(obj, dict):
        raise CheckpointError(where, "must hold a JSON object")
    return obj


def weight_map_of(index: object, where: str) -> dict[str, str]:
    """The index's weight_map, checked to map names to shard file names."""
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict) or not set(map(type, weight_map.values())) <= {str}:
        raise CheckpointError(where, "weight_map must map tensor names to shard file names")
    return weight_map


def index_metadata(index: dict) -> dict:
    meta = index.get("metadata")
    return meta if isinstance(meta, dict) else {}


class _Index(msgspec.Struct):
    weight_map: dict[str, str]
    metadata: object = None


_DECODE_INDEX = msgspec.json.Decoder(_Index).decode


def load_index(raw: bytes, where: str) -> tuple[dict[str, str], dict]:
    """An index's weight_map and metadata. The typed decoder checks the types in C
    (an index names every tensor: 100,000 entries); what it rejects goes through
    ``load_json`` and ``weight_map_of``, which say what is wrong."""
    try:
        index = _DECODE_INDEX(raw)
    except msgspec.DecodeError:
        obj = load_json(raw, where)
        return weight_map_of(obj, where), index_metadata(obj)
    return index.weight_map, index.metadata if isinstance(index.metadata, dict) else {}


def escapes(shard: str) -> bool:
    """An absolute path, a ``..`` part or a backslash: a name that leaves its folder."""
    return os.path.isabs(shard) or ".." in Path(shard).parts or "\\" in shard


def merge(headers: list[FileHeader], weight_map: dict[str, str] | None) -> dict[str, TensorInfo]:
    """Every shard's tensors in one map; with an index, each entry proved stored where it says."""
    tensors: dict[str, TensorInfo] = {}
    for h in headers:
        before = len(tensors)
        tensors.update(h.tensors)
        if len(tensors) != before + len(h.tensors):  # rare: find the name stored twice
            for name in h.tensors:
                other = next((g for g in headers if g is not h and name in g.tensors), None)
                if other is not None:
                    raise CheckpointError(f"{h.file} [{name}]", f"tensor also stored in {other.file}")
    if weight_map is not None:
        listed = weight_map.get
        exact = True  # every shard tensor is listed, at its own shard
        for h in headers:
            if not all(map(operator.eq, map(listed, h.tensors), repeat(h.file))):
                _stray(h, weight_map)  # a tensor the index places elsewhere or omits: allowed, see below
                exact = False
        # When every stored tensor is listed at its shard, equal counts prove the index lists
        # nothing else: the per-entry pass over the index is needed only otherwise.
        if not exact or len(weight_map) != len(tensors):
            for name, shard in weight_map.items():
                t = tensors.get(name)
                if t is None or t.file != shard:
                    raise CheckpointError(f"{shard} [{name}]", "index names this tensor but the shard lacks it")
    return tensors


def _stray(h: FileHeader, weight_map: dict[str, str]) -> None:
    """A shard tensor the index assigns to another shard. Loaders follow the
    index, so the copy in ``h`` is dead weight, not an error; but an index that
    assigns it to a shard lacking it is caught by the caller."""
    for name in h.tensors:
        shard = weight_map.get(name)
        if shard is not None and shard != h.file:
            raise CheckpointError(f"{shard} [{name}]", f"index places this tensor here but {h.file} stores it")
