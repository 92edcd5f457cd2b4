"""Checksummed files under specguard's cache directory, and where a remote repo's go.

Standard library only: a replayed audit (commands/replay.py) reads its entry through
this module before anything that parses checkpoints is imported, and its first HEAD
(plainhead.py) asks ``seen`` before anything at all is: C modules only on that path
(no re, pathlib or hashlib's OpenSSL). Each file carries a
checksum of its bytes: a damaged entry (a flipped bit that still decodes, a file cut
short) is a miss, never an error.
"""

from __future__ import annotations

import os

from specguard.errors import SpecguardError

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy knows the name)
if TYPE_CHECKING:
    from pathlib import Path

_MAGIC = b"specguard-remote\n"
_DIGEST = 4  # bytes of the CRC-32 after the magic (little-endian)
VERSION = 3  # of a remote audit's headers (cache.py Snapshot); v2: checksummed; v3: by CRC-32

NO_CACHE = "set XDG_CACHE_HOME to a writable directory"


def cache_root() -> Path:
    """$XDG_CACHE_HOME/specguard, else ~/.cache/specguard; the sample checkpoint and the
    remote audits share it. SpecguardError when there is no home to put it in (without
    the check, ``~`` would stay literal and the cache would land in the working directory)."""
    from pathlib import Path

    return Path(_cache_dir())


def _cache_dir() -> str:
    base = os.environ.get("XDG_CACHE_HOME")
    if not base:
        home = os.path.expanduser("~")
        if home == "~" or not os.path.isabs(home):  # no HOME and no passwd entry
            raise SpecguardError(f"no home directory for specguard's cache; {NO_CACHE}")
        base = os.path.join(home, ".cache")
    return os.path.join(base, "specguard")


def repo_folder(endpoint: str, repo_id: str) -> Path | None:
    """The folder of one (server, repo): the server by a short hash of its URL. None
    without a cache directory."""
    from pathlib import Path

    folder = _repo_dir(endpoint, repo_id)
    return None if folder is None else Path(folder)


def _repo_dir(endpoint: str, repo_id: str) -> str | None:
    try:
        root = _cache_dir()
    except SpecguardError:
        return None
    return os.path.join(root, "remote", sha256_hex(endpoint.encode())[:12], safe_name(repo_id))


def safe_name(repo_id: str) -> str:
    """The repo id as one folder name: ``re.sub(r"[^\\w.-]", "--", repo_id)`` without re
    (a str pattern's ``\\w`` is str.isalnum() or "_")."""
    return "".join(c if c.isalnum() or c in "_.-" else "--" for c in repo_id)


def sha256_hex(data: bytes) -> str:
    """hashlib.sha256's hex digest, through CPython's own module where it has one: hashlib
    loads OpenSSL (~3 ms) before a replay's HEAD could leave (plainhead.py)."""
    try:
        from _sha256 import sha256  # type: ignore[import-not-found]  # CPython 3.11; 3.12+: _sha2
    except ImportError:
        try:
            from _sha2 import sha256  # type: ignore[import-not-found]
        except ImportError:
            from hashlib import sha256
    return str(sha256(data).hexdigest())


def snapshot_path(endpoint: str, repo_id: str, commit: str) -> Path | None:
    """One file per (server, repo, commit) ; None without a cache
    directory: every audit is then a miss."""
    folder = repo_folder(endpoint, repo_id)
    return None if folder is None else folder / f"{commit}.v{VERSION}.msgpack"


def seen(endpoint: str, repo_id: str) -> bool:
    """Whether any commit of this repo was cached (then a HEAD first can save the index)."""
    folder = _repo_dir(endpoint, repo_id)
    if folder is None:
        return False
    try:
        with os.scandir(folder) as entries:
            return any(e.name.endswith(f".v{VERSION}.msgpack") for e in entries)
    except OSError:  # absent (a first audit), or no folder
        return False


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
    """CRC-32: it catches every burst of damage up to 32 bits and all but 1 in 2**32 others, which
    is what a cache needs (no one forges its own cache), at ~8x BLAKE2b's speed: 3 ms instead of
    23 on a DeepSeek's 8 MB of headers, paid on every cold audit (benchmarks/remote.py)."""
    import zlib

    return zlib.crc32(payload).to_bytes(_DIGEST, "little")


def save_checked(path: Path | None, payload: bytes) -> None:
    """Written to a temporary file beside it, then renamed: readers see all or nothing.
    A cache that cannot be written (read-only home, no home) only costs the next audit its requests."""
    if path is None:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        # tempfile.mkstemp's way (O_EXCL, 0600) without importing tempfile and random (~4 ms)
        tmp = path.parent / f".tmp-{os.getpid()}-{os.urandom(8).hex()}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o600)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(_MAGIC + _checksum(payload))
                f.write(payload)  # not joined first: that copies 8 MB
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError:
        pass
