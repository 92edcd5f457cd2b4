"""Scheme model, module grouping and classification from what is on disk."""

from specguard.formats.scheme import Scheme

__all__ = ["Scheme"]
