"""What the patches expect of vLLM: every class, function and signature they wrap or call.

A vLLM version the plugin runs on (``plugin=True`` in engines/registry.py) must satisfy
every line: the patched functions take the parameters the wrappers pass on, and the
methods specguard builds in their place accept the arguments ``methods.py`` gives them.
``missing()`` lists what the imported vLLM lacks; tests run it on vLLM 0.33 in-process
(tests/integrations/test_vllm_contract.py) and on 0.32 under its overlay
(tests/engines/vllm_032_probe.py) before a version is marked for the plugin.
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any

_Q = "vllm.model_executor.layers.quantization"
_GET_QUANT_METHOD = ("self", "layer", "prefix")

# Patched (plugin.py _HOOKS): vLLM calls them, the wrappers pass the call on, by these names.
PATCHED: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("vllm.models.deepseek_v4.quant_config", "DeepseekV4FP8Config.get_quant_method", _GET_QUANT_METHOD),
    ("vllm.models.deepseek_v41.quant_config", "DeepseekV4FP8Config.get_quant_method", _GET_QUANT_METHOD),
    ("vllm.models.deepseek_v41.quant_config", "DeepseekV4FP8Config._is_nvfp4_expert_layer", ("self", "prefix")),
    (f"{_Q}.compressed_tensors.compressed_tensors", "CompressedTensorsConfig.get_quant_method", _GET_QUANT_METHOD),
    (f"{_Q}.auto_gptq", "AutoGPTQConfig.get_quant_method", _GET_QUANT_METHOD),
    (f"{_Q}.fp8", "Fp8Config.get_quant_method", _GET_QUANT_METHOD),
    (f"{_Q}.modelopt", "ModelOptQuantConfigBase.get_quant_method", _GET_QUANT_METHOD),
    (f"{_Q}.modelopt", "ModelOptMixedPrecisionConfig.get_quant_method", _GET_QUANT_METHOD),
    (f"{_Q}.mxfp4", "Mxfp4Config.get_quant_method", _GET_QUANT_METHOD),
    ("vllm.config.vllm", "VllmConfig._get_quantization_config", ("model_config", "load_config")),
    ("vllm.model_executor.model_loader.base_loader", "BaseModelLoader.load_model",
     ("self", "vllm_config", "model_config")),
    ("vllm.model_executor.model_loader.default_loader", "DefaultModelLoader.load_weights",
     ("self", "model", "model_config")),
    ("vllm.model_executor.model_loader.default_loader", "filter_duplicate_safetensors_files",
     ("hf_weights_files", "hf_folder", "index_file")),
)
# Called by specguard (methods.build_method, routing, disk): how many positional arguments, which keywords.
CALLED: tuple[tuple[str, str, int, tuple[str, ...]], ...] = (
    ("vllm.model_executor.layers.fused_moe", "UnquantizedFusedMoEMethod", 1, ()),
    (f"{_Q}.mxfp4", "Mxfp4MoEMethod", 1, ("activation_key",)),
    (f"{_Q}.modelopt", "ModelOptNvFp4FusedMoE", 0, ("quant_config", "moe_config")),
    (f"{_Q}.modelopt", "ModelOptNvFp4Config", 0,
     ("is_checkpoint_nvfp4_serialized", "kv_cache_quant_algo", "exclude_modules", "group_size")),
    (f"{_Q}.fp8", "Fp8MoEMethod", 2, ()),
    (f"{_Q}.fp8", "Fp8LinearMethod", 1, ()),
    (f"{_Q}.fp8", "Fp8Config", 0, ("is_checkpoint_fp8_serialized", "weight_block_size")),
    ("vllm.model_executor.layers.linear", "UnquantizedLinearMethod", 0, ()),
    ("vllm.model_executor.models.utils", "WeightsMapper", 0, ("orig_to_new_prefix",)),
    (f"{_Q}.base_config", "QuantizationConfig.apply_vllm_mapper", 2, ()),
    ("vllm.config", "get_current_vllm_config_or_none", 0, ()),
)
# Read only: they have to exist.
READ: tuple[tuple[str, str], ...] = (
    ("vllm.model_executor.layers.fused_moe", "RoutedExperts"),
    ("vllm.model_executor.layers.linear", "LinearBase"),
    ("vllm.platforms", "current_platform"),
    (f"{_Q}.utils.quant_utils", "FP4_DTYPE"),
    (f"{_Q}.utils.quant_utils", "FP8_DTYPE"),
    (f"{_Q}.utils.quant_utils", "kMxfp8Static"),
    (f"{_Q}.utils.quant_utils", "kMxfp8Dynamic"),
)


def missing() -> list[str]:
    """Every expectation the imported vLLM does not meet, one line each (empty: all met)."""
    out = []
    for module, path, names in PATCHED:
        got, why = _signature(module, path)
        if got is None:
            out.append(f"{module}.{path}: {why}")
        elif tuple(p.name for p in got.parameters.values())[:len(names)] != names:
            out.append(f"{module}.{path}{got}: the plugin's wrapper takes {names}")
    for module, path, positional, keywords in CALLED:
        got, why = _signature(module, path)
        if got is None:
            out.append(f"{module}.{path}: {why}")
            continue
        try:
            got.bind(*[None] * positional, **dict.fromkeys(keywords))
        except TypeError as exc:
            out.append(f"{module}.{path}{got}: specguard calls it with {positional} positional "
                       f"argument(s) and {keywords}: {exc}")
    for module, path in READ:
        try:
            _resolve(module, path)
        except (ImportError, AttributeError) as exc:
            out.append(f"{module}.{path}: missing ({type(exc).__name__}: {exc})")
    return out


def _signature(module: str, path: str) -> tuple[inspect.Signature | None, str]:
    try:
        obj = _resolve(module, path)
    except (ImportError, AttributeError) as exc:
        return None, f"missing ({type(exc).__name__}: {exc})"
    fn = obj.__func__ if isinstance(obj, (staticmethod, classmethod)) else obj
    fn = getattr(fn, "__specguard_original__", fn)  # the plugin installed: vLLM's own
    fn = fn.__func__ if isinstance(fn, (staticmethod, classmethod)) else fn
    try:
        return inspect.signature(fn), ""
    except (TypeError, ValueError) as exc:
        return None, f"no signature ({exc})"


def _resolve(module: str, path: str) -> Any:
    obj: Any = importlib.import_module(module)
    for part in path.split("."):
        obj = inspect.getattr_static(obj, part) if isinstance(obj, type) else getattr(obj, part)
    return obj
