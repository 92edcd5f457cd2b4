"""Checkpoint sources, header parsing and validation, index handling."""

from specguard.checkpoint.errors import CheckpointError
from specguard.checkpoint.header import FileHeader, TensorInfo, read_header
from specguard.checkpoint.source import Checkpoint, open_checkpoint

__all__ = ["Checkpoint", "CheckpointError", "FileHeader", "TensorInfo", "open_checkpoint", "read_header"]
