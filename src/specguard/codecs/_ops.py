"""The few array operations the codecs need, for numpy and for torch.

The algorithms in ``_core`` are written once against this interface, so the
two back ends run the same float32 operations in the same order and agree bit
for bit (division, multiplication and the FP8 cast are correctly rounded in
both; decoding goes through the same tables). Dtypes are named with the
safetensors labels ("F32", "U8", "F8_E4M3", ...).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from specguard.checkpoint.dtypes import FROM_NUMPY, NUMPY

Array = Any


class NumpyOps:
    """numpy + ml_dtypes; never imports torch."""

    name = "numpy"

    def dtype(self, x: Array) -> str:
        return FROM_NUMPY[np.asarray(x).dtype]

    def f32(self, x: Array) -> Array:
        return np.asarray(x).astype(np.float32, copy=False)

    def cast(self, x: Array, dtype: str) -> Array:
        return np.asarray(x).astype(NUMPY[dtype])

    def view(self, x: Array, dtype: str) -> Array:
        return np.asarray(x).view(NUMPY[dtype])

    def table(self, table: np.ndarray, like: Array | None = None) -> Array:
        return table

    def take(self, table: Array, index: Array, out: Array | None = None) -> Array:
        if out is None:
            return np.take(table, index, mode="clip")  # indices are bytes: always in range
        return np.take(table, index, out=out, mode="clip")  # "clip": no output buffering

    def amax(self, x: Array, axes: tuple[int, ...] | None = None) -> Array:
        return np.max(x, axis=axes) if axes is not None else np.max(x)

    def abs(self, x: Array) -> Array:
        return np.abs(x)

    def clip(self, x: Array, lo: float, hi: float) -> Array:
        return np.clip(x, lo, hi)

    def where(self, cond: Array, a: Array | float, b: Array | float) -> Array:
        return np.where(cond, a, b)

    def rint(self, x: Array) -> Array:
        return np.rint(x)

    def signbit(self, x: Array) -> Array:
        return np.signbit(x)

    def isnan(self, x: Array) -> Array:
        return np.isnan(x)

    def repeat(self, x: Array, n: int, axis: int) -> Array:
        return np.repeat(x, n, axis=axis)

    def stack_last(self, a: Array, b: Array) -> Array:
        return np.stack([a, b], axis=-1)

    def pad2(self, x: Array, rows: int, cols: int) -> Array:
        """Zero-pad the last two dims up to (rows, cols)."""
        pad = [(0, 0)] * (x.ndim - 2) + [(0, rows - x.shape[-2]), (0, cols - x.shape[-1])]
        return np.pad(x, pad)

    def zeros(self, shape: tuple[int, ...], dtype: str, like: Array | None = None) -> Array:
        return np.zeros(shape, dtype=NUMPY[dtype])

    def arange(self, n: int, dtype: str, like: Array | None = None) -> Array:
        return np.arange(n, dtype=NUMPY[dtype])

    def full(self, shape: tuple[int, ...], value: float, dtype: str, like: Array | None = None):
        return np.full(shape, value, dtype=NUMPY[dtype])

    def scalar(self, value: float, like: Array | None = None) -> Array:
        return np.float32(value)

    def mul_(self, a: Array, b: Array) -> Array:
        """a * b, reusing a's memory when a is a fresh temporary (numpy)."""
        return np.multiply(a, b, out=a)

    def item(self, x: Array) -> float:
        return float(np.asarray(x).reshape(-1)[0])


class TorchOps:
    """torch on one device; torch is imported when this class is instantiated.

    The decode tables are copied to the device once, up front, so a compiled
    kernel sees a constant dict (no recompilation when a table is first used).
    """

    name = "torch"

    def __init__(self, device: str = "cpu") -> None:
        import torch

        from specguard.codecs import _tables

        self.torch = torch
        t = torch
        self._dtypes = {
            "BOOL": t.bool, "U8": t.uint8, "I8": t.int8, "I16": t.int16, "I32": t.int32,
            "I64": t.int64, "F16": t.float16, "BF16": t.bfloat16, "F32": t.float32,
            "F64": t.float64, "F8_E4M3": t.float8_e4m3fn, "F8_E5M2": t.float8_e5m2,
            "F8_E8M0": t.float8_e8m0fnu,
        }
        self._names = {v: k for k, v in self._dtypes.items()}
        self.device = torch.device(device)
        tables = (_tables.E2M1_VALUES, _tables.E4M3_TABLE, _tables.E8M0_TABLE,
                  _tables.FP4_PAIR64, _tables.INT4_PAIR64)
        self._tables = {id(tb): torch.from_numpy(np.ascontiguousarray(tb)).to(self.device)
                        for tb in tables}

    def dtype(self, x: Array) -> str:
        return self._names[x.dtype]

    def torch_dtype(self, name: str) -> Any:
        return self._dtypes[name]

    def f32(self, x: Array) -> Array:
        return x.to(self.torch.float32)

    def cast(self, x: Array, dtype: str) -> Array:
        return x.to(self._dtypes[dtype])

    def view(self, x: Array, dtype: str) -> Array:
        return x.view(self._dtypes[dtype])

    def table(self, table: np.ndarray, like: Array | None = None) -> Array:
        return self._tables[id(table)]

    def take(self, table: Array, index: Array, out: Array | None = None) -> Array:
        return table[index.to(self.torch.int64)]

    def amax(self, x: Array, axes: tuple[int, ...] | None = None) -> Array:
        return self.torch.amax(x, dim=axes) if axes is not None else self.torch.amax(x)

    def abs(self, x: Array) -> Array:
        return self.torch.abs(x)

    def clip(self, x: Array, lo: float, hi: float) -> Array:
        return self.torch.clamp(x, lo, hi)

    def where(self, cond: Array, a: Array | float, b: Array | float) -> Array:
        return self.torch.where(cond, a, b)

    def rint(self, x: Array) -> Array:
        return self.torch.round(x)  # half to even, like np.rint

    def signbit(self, x: Array) -> Array:
        return self.torch.signbit(x)

    def isnan(self, x: Array) -> Array:
        return self.torch.isnan(x)

    def repeat(self, x: Array, n: int, axis: int) -> Array:
        return self.torch.repeat_interleave(x, n, dim=axis)

    def stack_last(self, a: Array, b: Array) -> Array:
        return self.torch.stack([a, b], dim=-1)

    def pad2(self, x: Array, rows: int, cols: int) -> Array:
        import torch.nn.functional as F

        return F.pad(x, (0, cols - x.shape[-1], 0, rows - x.shape[-2]))

    def zeros(self, shape: tuple[int, ...], dtype: str, like: Array | None = None) -> Array:
        device = like.device if like is not None else self.device
        return self.torch.zeros(shape, dtype=self._dtypes[dtype], device=device)

    def arange(self, n: int, dtype: str, like: Array | None = None) -> Array:
        device = like.device if like is not None else self.device
        return self.torch.arange(n, dtype=self._dtypes[dtype], device=device)

    def full(self, shape: tuple[int, ...], value: float, dtype: str, like: Array | None = None):
        device = like.device if like is not None else self.device
        return self.torch.full(shape, value, dtype=self._dtypes[dtype], device=device)

    def scalar(self, value: float, like: Array | None = None) -> Array:
        device = like.device if like is not None else self.device
        return self.torch.tensor(value, dtype=self.torch.float32, device=device)

    def mul_(self, a: Array, b: Array) -> Array:
        return a * b  # out-of-place: keeps the graph functional for torch.compile

    def item(self, x: Array) -> float:
        return float(x.reshape(-1)[0].item())


NUMPY_OPS = NumpyOps()
