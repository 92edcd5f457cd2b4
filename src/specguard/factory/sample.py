"""The sample checkpoint (S1) in the user cache: $XDG_CACHE_HOME/specguard or ~/.cache/specguard."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from specguard.checkpoint.cache import NO_CACHE, cache_root
from specguard.errors import SpecguardError

SAMPLE_SCENARIO = "s1"
SAMPLE_SEED = 0


def ensure_sample() -> Path:
    """Path of the S1 sample; written atomically (temp dir + rename) when missing."""
    from specguard.factory import FACTORY_VERSION, write_scenario

    final = cache_root() / f"sample-{SAMPLE_SCENARIO}-v{FACTORY_VERSION}"
    try:
        if (final / "model.safetensors.index.json").is_file():
            return final
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".sample-", dir=final.parent))
    except OSError as e:
        raise SpecguardError(f"cannot write the sample checkpoint under {final.parent} "
                             f"({e.strerror or e}); {NO_CACHE}") from e
    try:
        write_scenario(SAMPLE_SCENARIO, tmp, seed=SAMPLE_SEED)
        try:
            tmp.rename(final)
        except OSError:  # another process won the race; its copy is identical
            if not (final / "model.safetensors.index.json").is_file():
                raise
    except OSError as e:  # a full disk, a file-size limit: write() names no file, so say where
        raise SpecguardError(f"cannot write the sample checkpoint into {final.parent} "
                             f"({e.strerror or e}); {NO_CACHE}") from e
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return final
