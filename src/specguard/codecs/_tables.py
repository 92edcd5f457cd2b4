"""Constants and 256-entry decode tables of the element types (from ml_dtypes).

Decoding goes through these tables in both back ends, so the same bytes decode
to the same float32 values by construction; the tables themselves are tested
against ml_dtypes' and torch's own dtypes.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

# E2M1 magnitudes for codes 0..7; bit 3 is the sign (OCP MX v1.0, NVFP4).
E2M1_MAGNITUDES = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0], dtype=np.float32)
E2M1_VALUES = np.concatenate([E2M1_MAGNITUDES, -E2M1_MAGNITUDES]).astype(np.float32)
E2M1_MAX = 6.0
E4M3_MAX = 448.0
E8M0_BIAS = 127
E8M0_NAN = 0xFF

# Decision points between consecutive E2M1 magnitudes. Round-to-nearest-even
# sends a tie to the even code: ``True`` marks thresholds whose upper code is
# even, where a tie rounds up (``>=``); elsewhere it rounds down (``>``).
E2M1_THRESHOLDS = ((0.25, False), (0.75, True), (1.25, False), (1.75, True),
                   (2.5, False), (3.5, True), (5.0, False))

_BYTES = np.arange(256, dtype=np.uint8)
E4M3_TABLE = _BYTES.view(ml_dtypes.float8_e4m3fn).astype(np.float32)
E8M0_TABLE = _BYTES.view(ml_dtypes.float8_e8m0fnu).astype(np.float32)
# One packed byte -> its two E2M1 values (low nibble first).
FP4_PAIR_TABLE = np.stack([E2M1_VALUES[_BYTES & 0xF], E2M1_VALUES[_BYTES >> 4]], axis=-1)
# The same pairs as one 64-bit word per byte: one gather yields two float32s.
FP4_PAIR64 = np.ascontiguousarray(FP4_PAIR_TABLE).view(np.int64).reshape(256)
# int4 nibbles (low first) of one byte as float32 (q - 8): compressed-tensors' and
# GPTQ's int32 words are little-endian byte sequences of such pairs.
INT4_PAIR_TABLE = np.stack([(_BYTES & 0xF).astype(np.float32) - 8,
                            (_BYTES >> 4).astype(np.float32) - 8], axis=-1)
INT4_PAIR64 = np.ascontiguousarray(INT4_PAIR_TABLE).view(np.int64).reshape(256)
# Two E4M3 bytes (read as one little-endian uint16) -> their two float32 values.
_U16 = np.arange(65536, dtype=np.uint32)
E4M3_PAIR64 = np.ascontiguousarray(
    np.stack([E4M3_TABLE[_U16 & 0xFF], E4M3_TABLE[_U16 >> 8]], axis=-1)).view(np.int64).reshape(-1)
