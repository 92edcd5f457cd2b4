"""The sample checkpoint (S1) in the user cache: $XDG_CACHE_HOME/specguard or ~/.cache/specguard."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

SAMPLE_SCENARIO = "s1"
SAMPLE_SEED = 0


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "specguard"


def ensure_sample() -> Path:
    """Path of the S1 sample; written atomically (temp dir + rename) when missing."""
    from specguard.factory import FACTORY_VERSION, write_scenario

    final = cache_root() / f"sample-{SAMPLE_SCENARIO}-v{FACTORY_VERSION}"
    if (final / "model.safetensors.index.json").is_file():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".sample-", dir=final.parent))
    try:
        write_scenario(SAMPLE_SCENARIO, tmp, seed=SAMPLE_SEED)
        try:
            tmp.rename(final)
        except OSError:  # another process won the race; its copy is identical
            if not (final / "model.safetensors.index.json").is_file():
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return final
