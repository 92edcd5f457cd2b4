"""Checkpoint sources, header parsing and validation, index handling.

The names below load on first use: a replayed remote audit (commands/replay.py) reads
its kept output through kept.py without importing the header parser."""

from __future__ import annotations

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy knows the name)
if TYPE_CHECKING:
    from typing import Any

    from specguard.checkpoint.errors import CheckpointError
    from specguard.checkpoint.header import FileHeader, TensorInfo, read_header
    from specguard.checkpoint.source import Checkpoint, open_checkpoint

__all__ = ["Checkpoint", "CheckpointError", "FileHeader", "TensorInfo", "open_checkpoint", "read_header"]
_HOME = {"CheckpointError": "errors", "FileHeader": "header", "TensorInfo": "header", "read_header": "header",
         "Checkpoint": "source", "open_checkpoint": "source"}


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib import import_module

    value = getattr(import_module(f"{__name__}.{_HOME[name]}"), name)
    globals()[name] = value
    return value
