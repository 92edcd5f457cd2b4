"""What a remote audit read, kept under the specguard cache directory keyed by
the resolved commit: a commit never changes, so a second audit of the same
revision needs only the request that resolves the revision.

The raw bytes are kept (index, configs, each shard's size and header JSON) and
parsed again on a hit, so a cached audit is validated exactly as a fresh one.
Each file carries a checksum of its bytes: a damaged entry (a flipped bit that
still decodes, a file cut short) is a miss, never an error, and the audit that
misses writes it again.
"""

from __future__ import annotations

from pathlib import Path

import msgspec

from specguard.checkpoint.kept import (
    NO_CACHE,
    VERSION,
    cache_root,
    load_checked,
    save_checked,
    seen,
    snapshot_path,
)

__all__ = ["NO_CACHE", "VERSION", "Snapshot", "cache_root", "load", "load_checked", "save", "save_checked", "seen",
           "snapshot_path"]

class Snapshot(msgspec.Struct, frozen=True):
    """The bytes one remote audit read."""

    index: bytes | None  # model.safetensors.index.json, None for a single-file repo
    configs: dict[str, bytes | None]  # config file name -> bytes, None where the repo has none
    shards: list[tuple[str, int, bytes]]  # (shard name, file size, header JSON bytes)


def load(path: Path | None) -> Snapshot | None:
    payload = load_checked(path)
    if payload is None:
        return None
    try:
        return msgspec.msgpack.decode(payload, type=Snapshot)
    except msgspec.DecodeError:
        return None


def save(path: Path | None, snapshot: Snapshot) -> None:
    save_checked(path, msgspec.msgpack.encode(snapshot))
