"""Offline training text: the Python standard library's own source, as bytes.

Every machine with Python has it, so the engine trains without downloading
anything. The file list is deterministic (sorted relative paths) and the
held-out split is a property of each file's relative path (CRC-32).

The prompts every figure is measured on do not come from the host's library:
its files differ between Python versions (a 3.12 library cut other prompts than
the 3.11.7 one the model was trained on, and the same benchmark gave other
figures). The held-out split of the training run ships with the weights
(``data/refdecoder/held_out.txt.gz``, checked against ``HELD_OUT_SHA256``).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import sysconfig
import zlib
from functools import cache
from importlib import resources
from pathlib import Path

import numpy as np

HELD_OUT_MODULUS = 20  # about 5 % of files are held out
# the held-out split of CPython 3.11.7's library, as train_log.txt records it (5f792399f7bb9ab2)
HELD_OUT_SHA256 = "5f792399f7bb9ab29d798ec1dba35f96751ffc740f1b714c365888c2dcd307f0"
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


@cache
def packaged_held_out() -> bytes:
    """The held-out split the shipped model was trained without, as shipped."""
    path = resources.files("specguard") / "data" / "refdecoder" / "held_out.txt.gz"
    text = gzip.decompress(path.read_bytes())
    if hashlib.sha256(text).hexdigest() != HELD_OUT_SHA256:
        raise ValueError(f"{path}: not the held-out split of the training run (sha256 differs)")
    return text


def prompts_sha256(prompts: list[list[int]]) -> str:
    """The 16-hex-digit digest every result records: equal digests, equal prompts."""
    return hashlib.sha256(json.dumps(prompts, separators=(",", ":")).encode()).hexdigest()[:16]


def held_out_sample(root: Path | None = None, max_bytes: int = 1 << 20) -> bytes:
    """Up to ``max_bytes`` of held-out text: the shipped split, or (``root``) that of a
    standard-library copy (a retraining's corpus)."""
    if root is None:
        return packaged_held_out()[:max_bytes]
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
