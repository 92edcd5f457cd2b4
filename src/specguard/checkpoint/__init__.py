"""Checkpoint sources, header parsing and validation, index handling."""
