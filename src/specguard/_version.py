"""The installed distribution's version (pyproject.toml is the one place it is written)."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("specguard")
except PackageNotFoundError:  # a source tree on sys.path without an install
    __version__ = "0+unknown"
