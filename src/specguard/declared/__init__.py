"""What a checkpoint's config claims for each module, one parser per stack.

Pure Python over config dicts; never reads files, never imports torch.
``parse_declared(config, hf_quant_config)`` picks the stack the way vLLM 0.33
does (config.json's ``quantization_config`` first, hf_quant_config.json only
without it) and returns a ``Declared`` whose ``scheme_for(name, kind=...)``
answers with that stack's own pattern semantics.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from specguard.declared.model import (
    CT_MATCH,
    FNMATCHCASE,
    GPTQ_DYNAMIC,
    GPTQ_IN_BLOCK,
    MODELOPT_EXCLUDE,
    NATIVE,
    QUANTIZED,
    SEMANTICS,
    TARGET,
    TRANSFORMERS_MATCH,
    UNQUANTIZED,
    VLLM_EXACT,
    VLLM_SUBSTRING,
    VLLM_SUFFIX,
    Declared,
    DeclaredScheme,
    Pattern,
    UnknownDeclared,
)

if TYPE_CHECKING:
    from specguard.declared.compressed_tensors import CompressedTensorsDeclared
    from specguard.declared.fp8 import Fp8Declared
    from specguard.declared.gptq_awq import IntGroupDeclared
    from specguard.declared.inc import IncDeclared
    from specguard.declared.modelopt import ModelOptDeclared
    from specguard.declared.mxfp4 import Mxfp4Declared
    from specguard.declared.quark import QuarkDeclared
    from specguard.declared.torchao import TorchAODeclared

from specguard.declared.validate import ConfigError, check_quant_config
from specguard.formats import scheme as s
from specguard.formats.scheme import Scheme
from specguard.layouts.registry import DEEPSEEK_V4_TYPES, text_config

_DTYPES = {"bfloat16": s.BF16, "float16": s.FP16, "half": s.FP16, "float32": s.FP32, "float": s.FP32}


def unquantized_scheme(config: Mapping[str, Any]) -> Scheme:
    """The float dtype a config declares for what it does not quantize."""
    cfg = text_config(config)
    dtype = cfg.get("torch_dtype") or cfg.get("dtype") or config.get("torch_dtype") or "bfloat16"
    fmt = _DTYPES.get(str(dtype).removeprefix("torch."), s.BF16)
    return Scheme(fmt, s.PLAIN)


def parse_declared(config: Mapping[str, Any], hf_quant_config: Mapping[str, Any] | None = None) -> Declared:
    """The claims of config.json (and hf_quant_config.json, if given).

    An unknown ``quant_method`` yields an ``UnknownDeclared`` whose claims are
    all ``unknown`` with a reason: specguard says so rather than guess.
    """
    plain = unquantized_scheme(config)
    cfg = text_config(config)
    # weight_utils.get_quant_config: quantization_config, text_config's, then compression_config
    qc = config.get("quantization_config") or cfg.get("quantization_config") or config.get("compression_config")
    notes: list[str] = []
    if qc is not None and not isinstance(qc, Mapping):
        check_quant_config(qc)  # raises: a quantization_config that is not an object
    if isinstance(qc, Mapping):
        origin = "config.json quantization_config"
        if hf_quant_config:
            notes.append("hf_quant_config.json is present but vLLM reads config.json's quantization_config")
    elif hf_quant_config:
        qc, origin = hf_quant_config, "hf_quant_config.json"
    else:
        return Declared(stack="none", quant_method=None, origin="config.json", unquantized=plain)
    check_quant_config(qc, "quantization_config" if origin.startswith("config.json") else "hf_quant_config.json")
    qc = dict(qc)
    method = str(qc.get("quant_method") or ("modelopt" if "quantization" in qc else "")).lower()
    model_type = str(cfg.get("model_type") or config.get("model_type") or "")
    common = {"origin": origin}
    if method in ("fp8", "deepseek_v4_fp8"):
        # DeepseekV4FP8Config.override_quantization_method: fp8 + a V4 model type.
        v4 = method == "deepseek_v4_fp8" or model_type in DEEPSEEK_V4_TYPES
        declared: Declared = _parser("fp8", "parse_fp8")(qc, dict(cfg), deepseek_v4=v4, **common)
    elif method.startswith("modelopt"):
        declared = _parser("modelopt", "parse_modelopt")(qc, **common)
    elif method in _PARSERS:
        declared = _parser(*_PARSERS[method])(qc, **common)
    else:
        declared = UnknownDeclared(stack="unknown", quant_method=method or None, origin=origin)
    return _with(declared, plain, notes)


# quant_method -> (module, parser): each stack's parser is imported when a config names it
# (a command reads one config: importing all nine cost ~15 ms of a remote audit's start).
_PARSERS = {
    "compressed-tensors": ("compressed_tensors", "parse_compressed_tensors"),
    "mxfp4": ("mxfp4", "parse_mxfp4"),
    "gptq": ("gptq_awq", "parse_gptq"),
    "awq": ("gptq_awq", "parse_awq"),
    "quark": ("quark", "parse_quark"),
    "torchao": ("torchao", "parse_torchao"),
    "auto-round": ("inc", "parse_inc"),  # inc.py INCConfig.override_quantization_method claims auto-round
    "inc": ("inc", "parse_inc"),
}
# The stacks' Declared classes, re-exported here and imported on first use.
_CLASSES = {
    "CompressedTensorsDeclared": "compressed_tensors", "Fp8Declared": "fp8", "IntGroupDeclared": "gptq_awq",
    "IncDeclared": "inc", "ModelOptDeclared": "modelopt", "Mxfp4Declared": "mxfp4", "QuarkDeclared": "quark",
    "TorchAODeclared": "torchao",
}


def _parser(module: str, name: str) -> Any:
    return getattr(importlib.import_module(f"specguard.declared.{module}"), name)


def __getattr__(name: str) -> Any:
    module = _CLASSES.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"specguard.declared.{module}"), name)


def _with(declared: Declared, plain: Scheme, notes: list[str]) -> Declared:
    from dataclasses import replace

    return replace(declared, unquantized=plain, notes=(*declared.notes, *notes))


__all__ = [
    "CT_MATCH", "FNMATCHCASE", "GPTQ_DYNAMIC", "GPTQ_IN_BLOCK", "MODELOPT_EXCLUDE", "NATIVE",
    "QUANTIZED", "SEMANTICS", "TARGET", "TRANSFORMERS_MATCH", "UNQUANTIZED", "VLLM_EXACT", "VLLM_SUBSTRING",
    "VLLM_SUFFIX", "CompressedTensorsDeclared", "ConfigError", "Declared", "DeclaredScheme", "Fp8Declared",
    "IncDeclared", "IntGroupDeclared", "ModelOptDeclared", "Mxfp4Declared", "Pattern", "QuarkDeclared",
    "TorchAODeclared", "UnknownDeclared",
    "parse_declared", "unquantized_scheme",
]
