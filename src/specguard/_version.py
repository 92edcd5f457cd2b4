"""specguard's version: the one place it is written (pyproject.toml reads it at build time,
so the installed metadata agrees; a literal, so `specguard --version` imports nothing)."""

__version__ = "0.1.0"
