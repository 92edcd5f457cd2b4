"""Element-level helpers (numpy): E2M1 codes and FP4 packing, E8M0, E4M3.

Thin numpy entry points over the algorithms the codecs use, for the rest of
specguard (content checks, the guard, the engine).
"""

from __future__ import annotations

import numpy as np

from specguard.codecs import _core
from specguard.codecs._ops import NUMPY_OPS as _NP
from specguard.codecs._tables import (
    E2M1_MAX,
    E2M1_VALUES,
    E4M3_MAX,
    E4M3_TABLE,
    E8M0_BIAS,
    E8M0_NAN,
    E8M0_TABLE,
)

__all__ = [
    "E2M1_MAX", "E2M1_VALUES", "E4M3_MAX", "E4M3_TABLE", "E8M0_BIAS", "E8M0_NAN", "E8M0_TABLE",
    "cast_e4m3", "e2m1_codes", "e4m3_to_float", "e8m0_to_float", "float_to_e8m0",
    "fp4_to_float", "pack_fp4", "unpack_fp4",
]


def e2m1_codes(x: np.ndarray) -> np.ndarray:
    """Round values to E2M1 codes (uint8 0..15): nearest-even, saturating at +-6.

    A negative value that rounds to zero keeps its sign (code 8), as ml_dtypes,
    torch and compressed-tensors do.
    """
    return _core.e2m1_codes(_NP, np.asarray(x, dtype=np.float32))


def pack_fp4(codes: np.ndarray) -> np.ndarray:
    """Pack E2M1 codes two per byte along the last axis, the even element in the LOW nibble."""
    return _core.pack_fp4(_NP, np.asarray(codes, dtype=np.uint8) & 0xF)


def unpack_fp4(packed: np.ndarray) -> np.ndarray:
    """Inverse of :func:`pack_fp4`: uint8 codes, last axis doubled (U8 or I8 input)."""
    packed = np.asarray(packed).view(np.uint8)
    return np.stack([packed & 0xF, packed >> 4], axis=-1).reshape(
        *packed.shape[:-1], packed.shape[-1] * 2)


def fp4_to_float(packed: np.ndarray) -> np.ndarray:
    """Packed FP4 bytes (U8 or I8) -> float32 values, last axis doubled."""
    return _core.fp4_values(_NP, np.asarray(packed))


def e8m0_to_float(codes: np.ndarray) -> np.ndarray:
    """E8M0 bytes (U8 or F8_E8M0) -> float32 2**(e-127); 0xFF is NaN."""
    return _core.decode_e8m0(_NP, np.asarray(codes))


def float_to_e8m0(x: np.ndarray, rounding: str = "ceil") -> np.ndarray:
    """Power-of-two exponent of positive values as E8M0 codes (uint8).

    ``rounding``: "ceil" (smallest power of two >= x) or "floor" (largest <= x);
    clamped to [2**-127, 2**127]; NaN -> 0xFF.
    """
    return _core.e8m0_codes(_NP, np.asarray(x, dtype=np.float32), rounding)


def e4m3_to_float(data: np.ndarray) -> np.ndarray:
    """E4M3FN bytes (U8 or F8_E4M3) -> float32; 0x7F and 0xFF are NaN."""
    return _core.decode_e4m3(_NP, np.asarray(data))


def cast_e4m3(x: np.ndarray) -> np.ndarray:
    """float -> F8_E4M3 (ml_dtypes), nearest-even, saturating at +-448 (NaN stays NaN)."""
    return _core.cast_e4m3(_NP, np.asarray(x, dtype=np.float32))
