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

import hashlib
import os
import re
import tempfile
from pathlib import Path

import msgspec

from specguard.errors import SpecguardError

VERSION = 2  # v2: checksummed
_MAGIC = b"specguard-remote\n"
_DIGEST = 32  # bytes of the BLAKE2b checksum after the magic


class Snapshot(msgspec.Struct, frozen=True):
    """The bytes one remote audit read."""

    index: bytes | None  # model.safetensors.index.json, None for a single-file repo
    configs: dict[str, bytes | None]  # config file name -> bytes, None where the repo has none
    shards: list[tuple[str, int, bytes]]  # (shard name, file size, header JSON bytes)


NO_CACHE = "set XDG_CACHE_HOME to a writable directory"


def cache_root() -> Path:
    """$XDG_CACHE_HOME/specguard, else ~/.cache/specguard; the sample checkpoint and the
    remote audits share it. SpecguardError when there is no home to put it in (without
    the check, ``~`` would stay literal and the cache would land in the working directory)."""
    base = os.environ.get("XDG_CACHE_HOME")
    if not base:
        home = os.path.expanduser("~")
        if home == "~" or not os.path.isabs(home):  # no HOME and no passwd entry
            raise SpecguardError(f"no home directory for specguard's cache; {NO_CACHE}")
        base = os.path.join(home, ".cache")
    return Path(base) / "specguard"


def snapshot_path(endpoint: str, repo_id: str, commit: str) -> Path | None:
    """One file per (server, repo, commit); the server by a short hash of its URL.
    None without a cache directory: every audit is then a miss."""
    try:
        root = cache_root()
    except SpecguardError:
        return None
    server = hashlib.sha256(endpoint.encode()).hexdigest()[:12]
    safe_repo = re.sub(r"[^\w.-]", "--", repo_id)
    return root / "remote" / server / safe_repo / f"{commit}.v{VERSION}.msgpack"


def seen(endpoint: str, repo_id: str) -> bool:
    """Whether any commit of this repo was cached (then a HEAD first can save the index)."""
    path = snapshot_path(endpoint, repo_id, "x")
    return path is not None and path.parent.is_dir() and any(path.parent.glob(f"*.v{VERSION}.msgpack"))


def load(path: Path | None) -> Snapshot | None:
    payload = load_checked(path)
    if payload is None:
        return None
    try:
        return msgspec.msgpack.decode(payload, type=Snapshot)
    except msgspec.DecodeError:
        return None


def load_checked(path: Path | None) -> memoryview | None:
    """A file's payload when its checksum holds; None when absent, unreadable or damaged."""
    if path is None:
        return None
    try:
        data = path.read_bytes()
    except OSError:
        return None
    payload = memoryview(data)[len(_MAGIC) + _DIGEST:]
    if not data.startswith(_MAGIC) or data[len(_MAGIC) : len(_MAGIC) + _DIGEST] != _checksum(payload):
        return None
    return payload


def _checksum(payload: bytes | memoryview) -> bytes:
    return hashlib.blake2b(payload, digest_size=_DIGEST).digest()


def save(path: Path | None, snapshot: Snapshot) -> None:
    save_checked(path, msgspec.msgpack.encode(snapshot))


def save_checked(path: Path | None, payload: bytes) -> None:
    """Written to a temporary file beside it, then renamed: readers see all or nothing.
    A cache that cannot be written (read-only home, no home) only costs the next audit its requests."""
    if path is None:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(_MAGIC + _checksum(payload) + payload)
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError:
        pass
