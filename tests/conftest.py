"""Shared fixtures: helpers that write real safetensors bytes."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest


def raw_safetensors(path: Path, header: object, data: bytes = b"", *, length: int | None = None) -> Path:
    """Write a file with an arbitrary (possibly hostile) header, byte for byte."""
    raw = header if isinstance(header, bytes) else json.dumps(header).encode()
    n = len(raw) if length is None else length
    path.write_bytes(struct.pack("<Q", n) + raw + data)
    return path


@pytest.fixture
def write_raw():
    return raw_safetensors
