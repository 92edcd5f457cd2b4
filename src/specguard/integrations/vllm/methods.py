"""vLLM quant methods <-> specguard formats, for the vLLM versions the plugin runs on (0.32, 0.33).

Two directions: which format a method vLLM chose reads (``built_format``), and
which method reads a stored format (``build_method``). Imported only from the
patched functions, i.e. after vLLM itself has imported everything used here.
"""

from __future__ import annotations

from typing import Any

from specguard.formats import scheme as s
from specguard.formats.scheme import Scheme

EXPERTS, LINEAR = "experts", "linear"
UNQUANTIZED = "unquantized"  # format family of bf16 / fp16 / fp32

# Method class name -> format it reads. Class names, not classes: vLLM keeps
# them in modules whose import has side effects on some platforms.
_BY_CLASS = {
    "UnquantizedFusedMoEMethod": UNQUANTIZED,
    "UnquantizedLinearMethod": UNQUANTIZED,
    "Mxfp4MoEMethod": s.MXFP4,
    "CompressedTensorsW4A4Mxfp4MoEMethod": s.MXFP4,
    "CompressedTensorsW4A8Mxfp4MoEMethod": s.MXFP4,
    "ModelOptNvFp4FusedMoE": s.NVFP4,
    "CompressedTensorsW4A4Nvfp4MoEMethod": s.NVFP4,
    "ModelOptMxFp8FusedMoE": s.MXFP8,
    "CompressedTensorsW8A8Mxfp8MoEMethod": s.MXFP8,
}
# auto_gptq.py methods (MoeWNA16Method: its fallback when Marlin cannot take the layer):
# 4- or 8-bit integer groups, as their config's weight_bits says
_INT_GROUP_CLASSES = frozenset({"AutoGPTQLinearMethod", "AutoGPTQMoEMethod", "MoeWNA16Method"})
_FP8_CLASSES = frozenset({"Fp8MoEMethod", "Fp8LinearMethod", "CompressedTensorsW8A8Fp8MoEMethod"})
# compressed-tensors linear methods delegate to a per-layer scheme object.
_CT_SCHEMES = {
    "CompressedTensorsW4A4Fp4": s.NVFP4,
    "CompressedTensorsW4A4Mxfp4": s.MXFP4,
    "CompressedTensorsW8A8Mxfp8": s.MXFP8,
    "CompressedTensorsWNA16": s.INT4_GROUP,
}


def layer_kind(layer: Any) -> str | None:
    """``experts`` for a RoutedExperts layer, ``linear`` for a LinearBase layer, else None."""
    from vllm.model_executor.layers.fused_moe import RoutedExperts
    from vllm.model_executor.layers.linear import LinearBase

    if isinstance(layer, RoutedExperts):
        return EXPERTS
    if isinstance(layer, LinearBase):
        return LINEAR
    return None


FP8 = "fp8"  # per-tensor or per-channel: one family (built_format cannot tell them apart)


def family(fmt: str) -> str:
    """Formats one vLLM method reads interchangeably (bf16/fp16/fp32; FP8 tensor/channel)."""
    if fmt in s.UNQUANTIZED or fmt == UNQUANTIZED:
        return UNQUANTIZED
    return FP8 if fmt in (s.FP8_TENSOR, s.FP8_CHANNEL) else fmt


def built_format(method: Any, layer: Any) -> str | None:
    """The format the parameters of ``method`` expect, or None when not known here."""
    if method is None:
        return UNQUANTIZED
    name = type(method).__name__
    if name in _BY_CLASS:
        return _BY_CLASS[name]
    if name in _INT_GROUP_CLASSES:
        bits = getattr(getattr(method, "quant_config", None), "weight_bits", 4)
        return s.INT8_GROUP if bits == 8 else s.INT4_GROUP
    if name in _FP8_CLASSES:
        return s.FP8_BLOCK if getattr(method, "block_quant", False) else s.FP8_TENSOR
    if name == "CompressedTensorsLinearMethod":
        return _ct_scheme_format(getattr(layer, "scheme", None))
    if name == "ModelOptLinearMethod":
        return _modelopt_linear_format(method)
    return None


def _ct_scheme_format(scheme: Any) -> str | None:
    name = type(scheme).__name__
    if name == "CompressedTensorsW8A8Fp8":
        return s.FP8_BLOCK if getattr(scheme, "weight_block_size", None) else s.FP8_TENSOR
    return _CT_SCHEMES.get(name)


def _modelopt_linear_format(method: Any) -> str | None:
    from vllm.model_executor.layers.quantization.utils.quant_utils import (
        FP4_DTYPE,
        FP8_DTYPE,
        kMxfp8Static,
    )

    weight = getattr(getattr(method, "spec", None), "weight", None)
    if weight is None:
        return None
    if weight == kMxfp8Static:
        return s.MXFP8
    if weight.dtype == FP4_DTYPE:
        return s.NVFP4 if weight.scale.group_shape.col == 16 else s.MXFP4
    if weight.dtype == FP8_DTYPE:
        return s.FP8_BLOCK if weight.scale.group_shape.row > 1 else s.FP8_TENSOR
    return None


def build_method(stored: Scheme, kind: str, config: Any, layer: Any, prefix: str) -> Any | None:
    """A vLLM method whose parameters match ``stored``; None when there is none here."""
    fmt = family(stored.format)
    if kind == EXPERTS:
        return _experts_method(stored, fmt, config, layer)
    if kind == LINEAR:
        return _linear_method(stored, fmt, config)
    return None


def _experts_method(stored: Scheme, fmt: str, config: Any, layer: Any) -> Any | None:
    if fmt == UNQUANTIZED:
        from vllm.model_executor.layers.fused_moe import UnquantizedFusedMoEMethod

        return UnquantizedFusedMoEMethod(layer.moe_config)
    if fmt == s.MXFP4:
        from vllm.model_executor.layers.quantization.mxfp4 import Mxfp4MoEMethod

        # The DeepSeek-V4 configs build their native MXFP4 experts this way (per version).
        key = _deepseek_v4_activation() if _is_deepseek_v4(config) else None
        return Mxfp4MoEMethod(layer.moe_config, activation_key=key)
    if fmt == s.NVFP4 and stored.convention in (None, s.MODELOPT):
        from vllm.model_executor.layers.quantization.modelopt import ModelOptNvFp4FusedMoE

        return ModelOptNvFp4FusedMoE(quant_config=_nvfp4_config(config), moe_config=layer.moe_config)
    if fmt == s.FP8_BLOCK and stored.block and _vllm_fp8_names(stored):
        from vllm.model_executor.layers.quantization.fp8 import Fp8MoEMethod

        return Fp8MoEMethod(_fp8_block_config(config, stored.block), layer)
    return None


def _linear_method(stored: Scheme, fmt: str, config: Any) -> Any | None:
    if fmt == UNQUANTIZED:
        from vllm.model_executor.layers.linear import UnquantizedLinearMethod

        return UnquantizedLinearMethod()
    if fmt == s.FP8_BLOCK and stored.block and _vllm_fp8_names(stored):
        from vllm.model_executor.layers.quantization.fp8 import Fp8LinearMethod

        return Fp8LinearMethod(_fp8_block_config(config, stored.block))
    return None


def _vllm_fp8_names(stored: Scheme) -> bool:
    """Fp8Config's methods name the block scale ``weight_scale_inv``: DeepSeek's names
    (``weight_scale_inv``, or the bare ``.scale`` vLLM's DeepSeek loaders rename to it)."""
    return stored.block is not None and stored.convention == s.DEEPSEEK


def _is_deepseek_v4(config: Any) -> bool:
    return type(config).__name__ == "DeepseekV4FP8Config"


def _deepseek_v4_activation() -> Any:
    """The activation key the running vLLM's DeepSeek-V4 configs give their MXFP4 experts."""
    from vllm.model_executor.layers.quantization.utils import quant_utils

    from specguard.engines.registry import engine
    from specguard.integrations.vllm.settings import running_engine

    name = getattr(engine(running_engine()).model, "deepseek_v4_mxfp4_activation", None)
    return getattr(quant_utils, name) if name else None


def _nvfp4_config(config: Any) -> Any:
    """The target's own NVFP4 sub-config where it has one (DeepSeek-V4), else a ModelOpt one."""
    if hasattr(config, "_get_nvfp4_config"):
        return config._get_nvfp4_config()
    from vllm.model_executor.layers.quantization.modelopt import ModelOptNvFp4Config

    return ModelOptNvFp4Config(
        is_checkpoint_nvfp4_serialized=True, kv_cache_quant_algo=None, exclude_modules=[],
        group_size=16,
    )


def _fp8_block_config(config: Any, block: tuple[int, int]) -> Any:
    """``config`` itself when it already is an FP8 config with this block, else a fresh one."""
    from vllm.model_executor.layers.quantization.fp8 import Fp8Config

    if isinstance(config, Fp8Config) and list(config.weight_block_size or ()) == list(block):
        return config
    return Fp8Config(is_checkpoint_fp8_serialized=True, weight_block_size=list(block))
