"""Scheme model, module grouping and classification from what is on disk."""

from specguard.formats.classify import Classified, classify_params
from specguard.formats.scheme import Scheme
from specguard.formats.table import Module, ModuleTable, classify

__all__ = ["Classified", "Module", "ModuleTable", "Scheme", "classify", "classify_params"]
