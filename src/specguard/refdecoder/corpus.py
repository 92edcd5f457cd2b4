"""Offline training text: the Python standard library's own source, as bytes.

Every machine with Python has it, so the engine trains and is tested without
downloading anything. The file list is deterministic (sorted relative paths)
and the held-out split is a property of each file's relative path (CRC-32),
so it is the same on every machine and Python version that has the file.
"""

from __future__ import annotations

import sysconfig
import zlib
from pathlib import Path

import numpy as np

HELD_OUT_MODULUS = 20  # about 5 % of files are held out
_SKIP_DIRS = frozenset({"site-packages", "dist-packages", "test", "tests", "__pycache__"})


def stdlib_dir() -> Path:
    """The running interpreter's standard-library directory."""
    return Path(sysconfig.get_paths()["stdlib"])


def corpus_files(root: Path) -> list[str]:
    """Sorted POSIX relative paths of the .py files under ``root`` (tests and site-packages excluded)."""
    files = []
    for path in root.rglob("*.py"):
        rel = path.relative_to(root)
        if _SKIP_DIRS.isdisjoint(rel.parts[:-1]) and path.is_file():
            files.append(rel.as_posix())
    return sorted(files)


def is_held_out(relpath: str) -> bool:
    return zlib.crc32(relpath.encode()) % HELD_OUT_MODULUS == 0


def read_split(root: Path) -> tuple[bytes, bytes, list[str]]:
    """(train bytes, held-out bytes, file list) of the corpus under ``root``."""
    files = corpus_files(root)
    if not files:
        raise FileNotFoundError(f"no .py files under {root}")
    train: list[bytes] = []
    held: list[bytes] = []
    for rel in files:
        (held if is_held_out(rel) else train).append((root / rel).read_bytes())
    return b"".join(train), b"".join(held), files


def held_out_sample(root: Path | None = None, max_bytes: int = 1 << 20) -> bytes:
    """Up to ``max_bytes`` of held-out text from the standard library (for tests and checks)."""
    root = root or stdlib_dir()
    chunks, total = [], 0
    for rel in corpus_files(root):
        if is_held_out(rel) and total < max_bytes:
            data = (root / rel).read_bytes()
            chunks.append(data)
            total += len(data)
    return b"".join(chunks)[:max_bytes]


def _byte_counts(data: bytes) -> np.ndarray:
    return np.bincount(np.frombuffer(data, dtype=np.uint8), minlength=256).astype(np.float64)


def unigram_bits_per_byte(train: bytes, test: bytes) -> float:
    """Cross-entropy (bits/byte) of ``test`` under add-one-smoothed byte frequencies of ``train``."""
    counts = _byte_counts(train) + 1.0
    logp = np.log2(counts / counts.sum())
    return float(-(_byte_counts(test) * logp).sum() / len(test))


def entropy_bits_per_byte(data: bytes) -> float:
    """Empirical byte entropy of ``data``: the best any unigram model can do on it."""
    p = _byte_counts(data)
    p = p[p > 0] / len(data)
    return float(-(p * np.log2(p)).sum())
