"""Shared test inputs: every layout with the options a producer uses."""

from __future__ import annotations

import numpy as np

from specguard.codecs.cases import CASES as SHARED
from specguard.codecs.cases import decode_options as dequant_opts  # noqa: F401  (the tests import it from here)

# (format, convention, quantize options, weight shape): the shared table (specguard/codecs/cases.py).
CASES = [(c.format, c.convention, dict(c.options), c.shape) for c in SHARED]


def case_id(case: tuple) -> str:
    fmt, conv, opts, shape = case
    extra = ",".join(f"{k}={v}" for k, v in opts.items() if k != "input_amax")
    return f"{fmt}-{conv}-{'x'.join(map(str, shape))}" + (f"-{extra}" if extra else "")


def weights(shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    """Gaussian rows of different magnitudes, a zero block and a denormal-sized block."""
    rng = np.random.default_rng(seed)
    w = rng.standard_normal(shape).astype(np.float32)
    w *= rng.uniform(0.01, 3.0, (*shape[:-1], 1)).astype(np.float32)
    w[..., 1, :32] = 0.0
    w[..., 2, 32:64] *= 1e-30
    return w
