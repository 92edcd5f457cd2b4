"""safetensors dtype names, their bit widths and numpy (ml_dtypes) equivalents.

``NUMPY`` and ``FROM_NUMPY`` are built on first use: the header pass needs only
the bit widths, and numpy with ml_dtypes is most of a header-only command's
import time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

    NUMPY: dict[str, np.dtype]  # built by __getattr__ below on first use
    FROM_NUMPY: dict[np.dtype, str]

# Bits per element for every dtype the safetensors reference accepts (0.8).
BITS: dict[str, int] = {
    "BOOL": 8, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8, "F8_E8M0": 8,
    "F8_E4M3FNUZ": 8, "F8_E5M2FNUZ": 8, "I16": 16, "U16": 16, "F16": 16, "BF16": 16,
    "I32": 32, "U32": 32, "F32": 32, "C64": 64, "F64": 64, "I64": 64, "U64": 64,
    "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6,
}

# The dtypes with a numpy element type (``NUMPY``'s keys): all but the sub-byte ones.
WHOLE_BYTES = frozenset(d for d, bits in BITS.items() if bits % 8 == 0)
FLOAT8 = frozenset({"F8_E5M2", "F8_E4M3", "F8_E8M0", "F8_E4M3FNUZ", "F8_E5M2FNUZ"})
FLOAT_HIGH = frozenset({"F16", "BF16", "F32", "F64"})


def nbytes(dtype: str, numel: int) -> int | None:
    """Byte length of ``numel`` elements, or None when it does not end on a byte."""
    bits = BITS[dtype] * numel
    return bits // 8 if bits % 8 == 0 else None


def _numpy_dtypes() -> dict[str, np.dtype]:
    import ml_dtypes
    import numpy as np

    return {
        "BOOL": np.dtype(np.bool_), "U8": np.dtype(np.uint8), "I8": np.dtype(np.int8),
        "F8_E5M2": np.dtype(ml_dtypes.float8_e5m2), "F8_E4M3": np.dtype(ml_dtypes.float8_e4m3fn),
        "F8_E8M0": np.dtype(ml_dtypes.float8_e8m0fnu),
        "F8_E4M3FNUZ": np.dtype(ml_dtypes.float8_e4m3fnuz),
        "F8_E5M2FNUZ": np.dtype(ml_dtypes.float8_e5m2fnuz),
        "I16": np.dtype(np.int16), "U16": np.dtype(np.uint16), "F16": np.dtype(np.float16),
        "BF16": np.dtype(ml_dtypes.bfloat16), "I32": np.dtype(np.int32), "U32": np.dtype(np.uint32),
        "F32": np.dtype(np.float32), "C64": np.dtype(np.complex64), "F64": np.dtype(np.float64),
        "I64": np.dtype(np.int64), "U64": np.dtype(np.uint64),
    }
    # F4/F6 are sub-byte: numpy holds one element per byte, so they have no 1:1 buffer view.


def __getattr__(name: str) -> object:  # PEP 562: NUMPY / FROM_NUMPY on first use
    if name in ("NUMPY", "FROM_NUMPY"):
        numpy_of = _numpy_dtypes()
        globals().update(NUMPY=numpy_of, FROM_NUMPY={v: k for k, v in numpy_of.items()})
        return globals()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
