"""What local and remote checkpoints share: the file names a checkpoint is
found by, the JSON loader for its index and configs, and the index checks that
tie the shards' own headers to the index's ``weight_map``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import msgspec
import orjson

from specguard.checkpoint.errors import CheckpointError, named
from specguard.checkpoint.header import FileHeader, TensorInfo

INDEX = "model.safetensors.index.json"
SINGLE = "model.safetensors"
CONFIG = "config.json"
HF_QUANT_CONFIG = "hf_quant_config.json"
CONFIGS = (CONFIG, HF_QUANT_CONFIG)


MAX_DEPTH = 127  # the nesting a safetensors header may have (checkpoint/header.py): configs get the same


def load_json(raw: bytes, where: str) -> dict:
    """An index or config file's bytes as a JSON object, or one line saying why not.

    Nesting is capped at MAX_DEPTH levels: orjson reads 1,024, deeper than Python's
    own recursion limit, and a config that deep would break whatever walks it later."""
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        raise CheckpointError(where, f"not readable JSON ({e})") from e
    if not isinstance(obj, dict):
        raise CheckpointError(where, "must hold a JSON object")
    check_depth(obj, where)
    return obj


def check_depth(obj: object, where: str, limit: int = MAX_DEPTH) -> None:
    """Refuse JSON nested deeper than ``limit`` levels, walking it without recursion."""
    stack = [(obj, 1)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, dict):
            v = v.values()
        elif not isinstance(v, list):
            continue
        if d > limit:
            raise CheckpointError(where, f"nested deeper than {limit} levels")
        stack += ((x, d + 1) for x in v if isinstance(x, (dict, list)))


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


def load_index(raw: bytes, where: str, shards: tuple[str, ...] = ()) -> tuple[dict[str, str], dict]:
    """An index's weight_map and metadata. The typed decoder checks the types in C
    (an index names every tensor: 100,000 entries); what it rejects goes through
    ``load_json`` and ``weight_map_of``, which say what is wrong.

    ``shards``: the shard names the directory holds, when known. The weight_map's
    values are then decoded as one of them (a Literal: no string per entry, and
    every value is the very object ``merge`` compares with); an index naming any
    other file is decoded again as plain strings."""
    try:
        index = _index_decoder(shards)(raw) if shards else _DECODE_INDEX(raw)
    except (msgspec.DecodeError, RecursionError):  # msgspec recurses into ``metadata``
        if shards:
            return load_index(raw, where)
        obj = load_json(raw, where)
        return weight_map_of(obj, where), index_metadata(obj)
    check_depth(index.metadata, where, MAX_DEPTH - 1)
    return index.weight_map, index.metadata if isinstance(index.metadata, dict) else {}


def _index_decoder(shards: tuple[str, ...]) -> Callable[[bytes], Any]:
    """A decoder whose weight_map values must be one of ``shards`` (fields as _Index's)."""
    fields: list[tuple[str, Any, Any]] = [("weight_map", dict[str, Literal[shards]], msgspec.NODEFAULT),  # type: ignore[valid-type]
                                          ("metadata", object, None)]
    return msgspec.json.Decoder(msgspec.defstruct("_ShardIndex", fields)).decode


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
                    raise CheckpointError(named(h.file, name), f"tensor also stored in {other.file}")
    if weight_map is not None:
        listed = weight_map.get
        exact = True  # every shard tensor is listed, at its own shard
        for h in headers:
            # list.count compares by identity first: load_index gives every value as the shard's own object
            if list(map(listed, h.tensors)).count(h.file) != len(h.tensors):
                _stray(h, weight_map)  # a tensor the index places elsewhere or omits: allowed, see below
                exact = False
        # When every stored tensor is listed at its shard, equal counts prove the index lists
        # nothing else: the per-entry pass over the index is needed only otherwise.
        if not exact or len(weight_map) != len(tensors):
            for name, shard in weight_map.items():
                t = tensors.get(name)
                if t is None or t.file != shard:
                    raise CheckpointError(named(shard, name), "index names this tensor but the shard lacks it")
    return tensors


def _stray(h: FileHeader, weight_map: dict[str, str]) -> None:
    """A shard tensor the index assigns to another shard. Loaders follow the
    index, so the copy in ``h`` is dead weight, not an error; but an index that
    assigns it to a shard lacking it is caught by the caller."""
    for name in h.tensors:
        shard = weight_map.get(name)
        if shard is not None and shard != h.file:
            raise CheckpointError(named(shard, name), f"index places this tensor here but {h.file} stores it")
