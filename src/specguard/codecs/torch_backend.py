"""torch back end of the codecs: same algorithms, any device, bit-identical to numpy.

torch is imported on first use. Tensors use the dtypes safetensors' torch
loader gives (float8_e4m3fn, float8_e8m0fnu, uint8, int8, int32, ...).
``compile=True`` runs the decode-and-scale pass under ``torch.compile``; the
only scale arithmetic (a global scale applied to a 256-entry per-byte table)
stays eager, so the compiled result is bit-identical too (checked by
benchmarks/codecs.py on the GPU).
"""

from __future__ import annotations

import types
from collections.abc import Callable, Mapping
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from specguard.codecs import _core
from specguard.codecs.packing import layout

if TYPE_CHECKING:
    import torch

__all__ = ["dequantize", "quantize"]


@lru_cache(maxsize=16)
def _ops(device: str = "cpu") -> Any:
    """One TorchOps per device, holding that device's decode tables."""
    from specguard.codecs._ops import TorchOps

    return TorchOps(device)


def _device(tensors: Any) -> str:
    first = tensors if not isinstance(tensors, Mapping) else next(iter(tensors.values()))
    return str(first.device)


def quantize(fmt: str, w: torch.Tensor, *, convention: str, **options: Any) -> dict[str, torch.Tensor]:
    """Same as :func:`specguard.codecs.quantize`, on torch tensors (any device)."""
    return _core.quantize(_ops(_device(w)), layout(fmt, convention), w, _core.Options(**options))


def dequantize(
    fmt: str,
    tensors: Mapping[str, torch.Tensor],
    *,
    convention: str,
    dtype: torch.dtype | None = None,
    compile: bool = False,
    **options: Any,
) -> torch.Tensor:
    """Same as :func:`specguard.codecs.dequantize`; float32 unless ``dtype`` is given
    (the float32 result rounded once, e.g. to bfloat16)."""
    tensors = dict(tensors)
    device = _device(tensors)
    xp = _ops(device)
    lay = layout(fmt, convention)
    opt = _core.Options(**options)
    if compile and lay.packing == "int4-gptq":
        names = (lay.weight, opt.scale_name or lay.scale[0], "qzeros", "g_idx")
        shapes = tuple(tuple(tensors[n].shape) if n in tensors else None for n in names)
        kernel = _compiled_gptq(fmt, convention, opt, shapes, dtype, device)
        return kernel(*(tensors.get(n) for n in names))
    if compile:
        d = _core.decode(xp, lay, tensors, opt)
        kernel = _compiled(fmt, convention, d.block, d.shape, dtype, device, d.table is not None)
        return kernel(d.elements, d.scale_src, d.table)
    out = _core.dequantize(xp, lay, tensors, opt)
    return out if dtype is None else out.to(dtype)


@lru_cache(maxsize=64)
def _compiled_gptq(fmt: str, convention: str, opt: _core.Options, shapes: tuple, dtype: Any,
                   device: str) -> Callable[..., Any]:
    xp = _ops(device)
    lay = layout(fmt, convention)
    names = (lay.weight, opt.scale_name or lay.scale[0], "qzeros", "g_idx")

    def kernel(*arrays: Any) -> Any:
        out = _core.dequantize(xp, lay, {n: a for n, a in zip(names, arrays, strict=True)
                                         if a is not None}, opt)
        return out if dtype is None else out.to(dtype)

    return _fresh_compile(kernel)


@lru_cache(maxsize=64)
def _compiled(fmt: str, convention: str, block: tuple[int, int], shape: tuple[int, ...],
              dtype: Any, device: str, has_table: bool) -> Callable[[Any, Any, Any], Any]:
    xp = _ops(device)
    lay = layout(fmt, convention)

    def kernel(elements: Any, scale_src: Any, table: Any) -> Any:
        d = _core.Decoded(elements, scale_src, table if has_table else None, block, shape)
        out = _core.expand_multiply(xp, lay, d)
        return out if dtype is None else out.to(dtype)

    return _fresh_compile(kernel)


_VARIANTS: list[str] = []


def _fresh_compile(fn: Callable[..., Any]) -> Callable[..., Any]:
    """torch.compile ``fn`` under a code object of its own: Dynamo caches compiled
    graphs per code object (8 at most), and every (format, shape) is a variant."""
    import torch

    name = f"dequantize_{len(_VARIANTS)}"
    _VARIANTS.append(name)
    code = fn.__code__.replace(co_name=name, co_qualname=name)
    fresh = types.FunctionType(code, fn.__globals__, name, None, fn.__closure__)
    return torch.compile(fresh, dynamic=False)
