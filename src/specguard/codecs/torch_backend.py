"""torch back end of the codecs: same algorithms, any device, bit-identical to numpy.

torch is imported on first use. Tensors use the dtypes safetensors' torch
loader gives (float8_e4m3fn, float8_e8m0fnu, uint8, int8, int32, ...).
``compile=True`` runs the bandwidth-bound decode-and-scale step under
``torch.compile`` (the small scale arithmetic stays eager, so the results
stay bit-identical).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from specguard.codecs import _core
from specguard.codecs.layouts import layout

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


def quantize(
    fmt: str,
    w: torch.Tensor,
    *,
    convention: str,
    group_size: int | None = None,
    block: tuple[int, int] | None = None,
    scale_dtype: str | None = None,
    scale_name: str | None = None,
    weight_dtype: str | None = None,
    scale_rule: str | None = None,
    input_amax: float | None = None,
    gptq_v2: bool = False,
) -> dict[str, torch.Tensor]:
    """Same as :func:`specguard.codecs.quantize`, on torch tensors (any device)."""
    opt = _core.Options(block=block, group_size=group_size, scale_dtype=scale_dtype,
                        scale_name=scale_name, weight_dtype=weight_dtype,
                        scale_rule=scale_rule, input_amax=input_amax, gptq_v2=gptq_v2)
    return _core.quantize(_ops(_device(w)), layout(fmt, convention), w, opt)


def dequantize(
    fmt: str,
    tensors: Mapping[str, torch.Tensor],
    *,
    convention: str,
    group_size: int | None = None,
    block: tuple[int, int] | None = None,
    scale_name: str | None = None,
    gptq_v2: bool = False,
    dtype: torch.dtype | None = None,
    compile: bool = False,
) -> torch.Tensor:
    """Same as :func:`specguard.codecs.dequantize`; float32 unless ``dtype`` is given
    (the float32 result rounded once, e.g. to bfloat16)."""
    tensors = dict(tensors)
    device = _device(tensors)
    xp = _ops(device)
    lay = layout(fmt, convention)
    opt = _core.Options(block=block, group_size=group_size, scale_name=scale_name,
                        gptq_v2=gptq_v2)
    if compile and lay.packing != "int4-gptq":
        d = _core.decode(xp, lay, tensors, opt)
        return _compiled(fmt, convention, d.block, d.shape, dtype, device)(d.elements, d.scale)
    out = _core.dequantize(xp, lay, tensors, opt)
    return out if dtype is None else out.to(dtype)


@lru_cache(maxsize=64)
def _compiled(fmt: str, convention: str, block: tuple[int, int], shape: tuple[int, ...],
              dtype: Any, device: str) -> Callable[[Any, Any], Any]:
    import torch

    xp = _ops(device)
    lay = layout(fmt, convention)

    def kernel(elements: Any, scale: Any) -> Any:
        out = _core.expand_multiply(xp, lay, _core.Decoded(elements, scale, block, shape))
        return out if dtype is None else out.to(dtype)

    return torch.compile(kernel, dynamic=False)
