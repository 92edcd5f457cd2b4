"""Where vLLM 0.33 refuses a checkpoint before it serves a token, and why.

Each rule restates one check in vLLM 0.33.0's source (site-packages/vllm):

- ``config/model.py ModelConfig._verify_quantization``: a ``quant_method`` that is
  neither in ``QUANTIZATION_METHODS`` (model_executor/layers/quantization/__init__.py)
  nor claimed by an ``override_quantization_method`` raises ``Unknown quantization
  method``. The only override that claims a name outside the list is INC's
  (inc/inc.py: ``quant_method == "auto-round"``).
- ``quantization/modelopt.py ModelOptQuantConfigBase.from_config``: a ``quant_algo``
  outside ``QUANT_ALGOS`` raises ``ModelOpt currently only supports: ...``.
- ``models/utils.py AutoWeightsLoader._load_module`` (and every model's own
  ``load_weights``, through ``params_dict[name]``): a checkpoint tensor with no
  parameter of that name raises ``There is no module or parameter named ...``.
  Without a quantization config every layer is unquantized and has only
  ``weight`` (and ``bias``): the flattened names of bitsandbytes, optimum-quanto
  and torchao (``weight.absmax``, ``weight._data``, ``_weight_qdata``) have none.
- ``quantization/fp8.py Fp8Config.from_config``: ``activation_scheme`` is read
  without a default; ``__init__`` rejects other schemes, and block FP8 with a
  static one.
- ``quantization/inc/inc.py INCConfig`` (auto-round): unsupported bits, data
  type or ``packing_format`` (``auto_round:fp8_static``), block FP8 without a
  2-D ``group_size``; its FP8 scheme cannot build MoE layers.
- ``models/deepseek_v2.py``: without ``topk_method: noaux_tc`` the router has no
  ``e_score_correction_bias`` parameter for a stored one.
- ``quantization/torchao.py TorchAOLinearMethod.create_weights``: a serialized
  torchao checkpoint gets one torchao tensor subclass for a merged layer
  (``qkv_proj``, ``gate_up_proj``: ``sum(output_partition_sizes)`` rows), and the
  layer's weight loader copies each stored shard into a narrow of it
  (``linear.py`` ``weight_loader``); torchao's ``copy_`` (torchao 0.18
  ``utils.py``) refuses the shard: ``Not supported args for copy_ due to metadata
  mismatch``. Checked by loading the producer fixtures with vLLM's own loader
  (tests/data/producers/torchao_*/vllm.json).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from specguard.engines import NOT_MODELLED, EngineChoice, Refusal
from specguard.formats import scheme as s
from specguard.formats.scheme import Scheme
from specguard.formats.table import Module
from specguard.layouts import Layout
from specguard.layouts import roles as r

# model_executor/layers/quantization/__init__.py QuantizationMethods (the Literal).
QUANTIZATION_METHODS = frozenset({
    "awq", "auto_awq", "fp8", "fbgemm_fp8", "fp_quant", "modelopt", "modelopt_fp4", "modelopt_mxfp8",
    "modelopt_mixed", "auto_gptq", "gptq", "gptq_marlin", "awq_marlin", "humming", "compressed-tensors",
    "experts_int8", "quark", "moe_wna16", "torchao", "inc", "mxfp4", "gpt_oss_mxfp4", "deepseek_v4_fp8",
    "online", "fp8_per_tensor", "fp8_per_block", "fp8_per_channel", "int8_per_channel_weight_only",
    "nvfp4_per_token", "mxfp8",
})
# get_quantization_config's method_to_config: the class vLLM builds for each quant_method (the
# online shorthands fp8_per_tensor ... nvfp4_per_token get OnlineQuantizationConfig).
QUANT_CONFIG_CLASS = {
    "awq": "AutoAWQConfig", "awq_marlin": "AutoAWQConfig", "auto_awq": "AutoAWQConfig", "fp8": "Fp8Config",
    "fbgemm_fp8": "FBGEMMFp8Config", "fp_quant": "FPQuantConfig", "modelopt": "ModelOptFp8Config",
    "modelopt_fp4": "ModelOptNvFp4Config", "modelopt_mxfp8": "ModelOptMxFp8Config",
    "modelopt_mixed": "ModelOptMixedPrecisionConfig", "auto_gptq": "AutoGPTQConfig", "gptq": "AutoGPTQConfig",
    "gptq_marlin": "AutoGPTQConfig", "compressed-tensors": "CompressedTensorsConfig",
    "experts_int8": "ExpertsInt8Config", "quark": "QuarkConfig", "moe_wna16": "MoeWNA16Config",
    "torchao": "TorchAOConfig", "inc": "INCConfig", "auto-round": "INCConfig", "mxfp4": "Mxfp4Config",
    "gpt_oss_mxfp4": "GptOssMxfp4Config", "deepseek_v4_fp8": "DeepseekV4FP8Config", "humming": "HummingConfig",
    "online": "OnlineQuantizationConfig", "mxfp8": "ModelOptMxFp8Config",
}
OVERRIDE_CLAIMED = frozenset({"auto-round"})  # inc/inc.py INCConfig.override_quantization_method
# quantization/modelopt.py LINEAR_ALGOS + "MIXED_PRECISION" (QUANT_ALGOS).
MODELOPT_ALGOS = ("FP8", "FP8_PER_CHANNEL_PER_TOKEN", "FP8_PB_WO", "NVFP4", "W4A16_NVFP4", "MXFP8",
                  "MIXED_PRECISION")
# Stacks whose stored names no unquantized vLLM layer has as parameters.
WRAPPED = (s.BITSANDBYTES, s.QUANTO, s.TORCHAO)

CONFIG, LOAD, BUILD = "start-up", "weight loading", "layer construction"


def not_modelled(quant_method: str | None) -> EngineChoice:
    """What stands in for the engine's choice under a quant stack specguard does not model:
    the class vLLM 0.33 builds for it (``get_quantization_config``), and no claim."""
    method = str(quant_method or "").lower()
    cls = QUANT_CONFIG_CLASS.get(method, "OnlineQuantizationConfig" if method in QUANTIZATION_METHODS else None)
    what = f"{cls} (quant_method {method!r})" if cls else f"quant_method {method!r}"
    return EngineChoice(Scheme(s.UNKNOWN, reason=f"{what} is not modelled"), NOT_MODELLED,
                        f"specguard does not model {what}: it cannot say what this layer is built as", cls)


def refusals(config: Mapping[str, Any], hf_quant_config: Mapping[str, Any] | None,
             modules: Mapping[str, Module], layout: Layout, quant_config_class: str | None = None) -> list[Refusal]:
    """Every reason vLLM 0.33 will not start on this checkpoint (empty: it starts).
    ``quant_config_class``: the class the engine model picked (Fp8Config or a DeepSeek-V4 one)."""
    found = _quant_config(config, hf_quant_config)
    qc: Mapping[str, Any] = found or {}
    method = str(qc.get("quant_method") or "").lower()
    out: list[Refusal] = []
    if method and method not in QUANTIZATION_METHODS and method not in OVERRIDE_CLAIMED:
        out.append(Refusal(
            CONFIG, f"ValueError: Unknown quantization method: {method}",
            "config/model.py ModelConfig._verify_quantization: vLLM 0.33 has no quant config for "
            f"quant_method {method!r}",
        ))
        return out  # nothing past the config check runs
    if method.startswith("modelopt"):
        algo = _modelopt_algo(qc)
        if algo and algo not in MODELOPT_ALGOS:
            out.append(Refusal(
                CONFIG, f"ValueError: ModelOpt currently only supports: {list(MODELOPT_ALGOS)}",
                f"quantization/modelopt.py ModelOptQuantConfigBase.from_config: quant_algo {algo!r}",
            ))
            return out
    if found is None:
        wrapped = [m for m in modules.values() if m.scheme.convention in WRAPPED]
        if wrapped:
            m = wrapped[0]
            extra = next((t.name for p, t in m.params.items() if p not in ("weight", "bias")), m.name)
            out.append(Refusal(
                LOAD, f"ValueError: There is no module or parameter named ... (e.g. {extra!r})",
                f"no quantization_config in config.json, so every layer is unquantized (weight, bias); "
                f"{len(wrapped)} module(s) stored {m.scheme.convention} {m.scheme.format} keep their "
                "quantizer's tensor names (models/utils.py AutoWeightsLoader._load_module)",
                tuple(w.name for w in wrapped),
            ))
    elif method == "torchao":
        out.extend(_torchao_merged(modules, layout))
    elif method == "fp8" and (quant_config_class or "").endswith(".fp8.Fp8Config"):
        out.extend(_fp8_config(qc))
    elif method in ("auto-round", "inc"):
        out.extend(_inc(qc, modules, layout))
    elif method in ("gptq", "auto_gptq", "gptq_marlin"):
        out.extend(_gptq(qc))
    out.extend(_v3_gate_bias(config, modules, layout))
    return out


def _gptq(qc: Mapping[str, Any]) -> list[Refusal]:
    """quantization/auto_gptq.py ``AutoGPTQConfig``: ``from_config`` takes ``group_size``
    as it is (``get_from_keys``, no type check); a ``group_size`` no kernel implements stops the first
    quantized layer's ``create_weights`` (``choose_mp_linear_kernel``: Marlin implements
    -1, 32, 64, 128 only; the MoE fallback, ``MoeWNA16Method.create_weights``, divides by it)."""
    where = "quantization/auto_gptq.py AutoGPTQConfig"
    group = qc.get("group_size")  # a non-integer bits is a ConfigError already (declared/gptq_awq.py)
    if "group_size" not in qc:
        return [Refusal(CONFIG, "ValueError: Cannot find any of ['group_size'] in the model's quantization config.",
                        f"{where}.from_config reads group_size with get_from_keys (no default)")]
    if not isinstance(group, int) or isinstance(group, bool):
        return [Refusal(BUILD, "ValueError: Failed to find a kernel that can implement the WNA16 linear layer",
                        f"{where}.from_config takes group_size {group!r} as it is; no GPTQ kernel implements it "
                        "(kernels/linear choose_mp_linear_kernel; MoeWNA16Method.create_weights divides by it)")]
    return []


def _fp8_config(qc: Mapping[str, Any]) -> list[Refusal]:
    """quantization/fp8.py ``Fp8Config.from_config`` / ``__init__``."""
    where = "quantization/fp8.py Fp8Config"
    scheme = qc.get("activation_scheme")
    if scheme is None:
        return [Refusal(CONFIG, "ValueError: Cannot find any of ['activation_scheme'] in the model's "
                        "quantization config.", f"{where}.from_config reads activation_scheme with get_from_keys "
                        "(no default)")]
    if scheme not in ("static", "dynamic"):
        return [Refusal(CONFIG, f"ValueError: Unsupported activation scheme {scheme}", f"{where}.__init__")]
    if qc.get("weight_block_size") is not None and scheme != "dynamic":
        return [Refusal(CONFIG, "ValueError: The block-wise quantization only supports dynamic activation "
                        f"scheme for now, but got {scheme} activation scheme.", f"{where}.__init__")]
    return []


# quantization/inc/inc.py INCConfig: SUPPORTED_BITS / SUPPORTED_FORMATS / SUPPORTED_DTYPES.
INC_BITS = frozenset({2, 3, 4, 5, 6, 7, 8})
INC_FORMATS = ("auto_round:auto_gptq", "auto_round:auto_awq", "auto_round:fp8", "auto_round:llm_compressor")
INC_DTYPES = frozenset({"int", "mx_fp", "fp"})


def _inc(qc: Mapping[str, Any], modules: Mapping[str, Module], layout: Layout) -> list[Refusal]:
    """quantization/inc/inc.py ``INCConfig.from_config`` / ``__init__`` /
    ``_validate_supported_quantization`` (all at start-up), and ``INCScheme.get_moe_method``
    (the FP8 scheme has none: building a quantized MoE layer raises)."""
    where = "quantization/inc/inc.py INCConfig"
    dtype = str(qc.get("data_type") or "int")
    dtype = "fp" if dtype == "fp8" else dtype
    bits, group = qc.get("bits"), qc.get("group_size")
    fmt = qc.get("packing_format")
    block = isinstance(group, list)
    if fmt is None:
        fmt = ("auto_round:fp8" if dtype == "fp" and bits == 8 and block
               else "auto_round:llm_compressor" if "mx_fp" in dtype else "auto_round:auto_gptq")
    if bits not in INC_BITS:
        return [Refusal(CONFIG, f"ValueError: Unsupported weight_bits: {bits}", f"{where}.__init__")]
    if dtype not in INC_DTYPES and "mx_fp" not in dtype:
        return [Refusal(CONFIG, f"ValueError: Unsupported data_type: {dtype}", f"{where}.__init__")]
    if fmt not in INC_FORMATS:
        return [Refusal(CONFIG, f"ValueError: Unsupported packing_format: {fmt}, currently only support "
                        f"{set(INC_FORMATS)}", f"{where}.__init__")]
    if dtype == "fp" and not block:
        return [Refusal(CONFIG, "AssertionError: INC block-wise FP8 requires a 2-D group_size, but found "
                        f"group_size={group!r}.", f"{where}._validate_fp8_block_quantization")]
    if dtype == "fp":
        experts = [m.name for m in modules.values()
                   if m.scheme.quantized and layout.module_kind(m.name) == r.ROUTED_EXPERTS]
        if experts:
            return [Refusal("layer construction", "NotImplementedError: INCFp8Scheme does not support MoE layers",
                            "quantization/inc/schemes/inc_scheme.py INCScheme.get_moe_method: the FP8 scheme "
                            "builds linears only, and these experts are stored quantized", tuple(experts))]
    return []


def _v3_gate_bias(config: Mapping[str, Any], modules: Mapping[str, Module], layout: Layout) -> list[Refusal]:
    """models/deepseek_v2.py: ``gate.e_score_correction_bias`` is a parameter only with
    ``topk_method: noaux_tc``; ``load_weights`` then indexes ``params_dict[name]`` for it."""
    if layout.family != "deepseek_v3":
        return []
    text = _text(config, config)
    if text.get("topk_method") == "noaux_tc":
        return []
    biases = tuple(n for n in modules if n.endswith("gate.e_score_correction_bias"))
    if not biases:
        return []
    return [Refusal(LOAD, f"KeyError: '{biases[0]}'",
                    f"topk_method is {text.get('topk_method')!r}, not 'noaux_tc', so DeepseekV2MoE builds no "
                    "gate.e_score_correction_bias parameter for the stored bias (models/deepseek_v2.py)", biases)]


def _text(config: Mapping[str, Any], default: Mapping[str, Any]) -> Mapping[str, Any]:
    inner = config.get("text_config")
    return inner if isinstance(inner, Mapping) else default


def _quant_config(config: Mapping[str, Any], hf: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    text = _text(config, {})
    qc = config.get("quantization_config") or text.get("quantization_config") or config.get("compression_config")
    if isinstance(qc, Mapping):
        return qc
    if hf and isinstance(hf, Mapping):
        return {"quant_method": "modelopt", **hf}
    return None


def _modelopt_algo(qc: Mapping[str, Any]) -> str:
    inner = qc.get("quantization")
    algo = inner.get("quant_algo") if isinstance(inner, Mapping) else qc.get("quant_algo")
    return str(algo or "").upper()


def _torchao_merged(modules: Mapping[str, Module], layout: Layout) -> list[Refusal]:
    """Shards of merged vLLM layers stored as separate torchao tensors."""
    merged = {}
    for prefix, names in layout.group_by_runtime_prefix(modules).items():
        stored = [n for n in names if modules[n].scheme.convention == s.TORCHAO]
        if len(stored) > 1 and layout.module_kind(names[0]) == r.LINEAR:
            merged[prefix] = stored
    if not merged:
        return []
    leaves = sorted({p.rsplit(".", 1)[-1] for p in merged})
    return [Refusal(
        LOAD, "ValueError: Not supported args for copy_ due to metadata mismatch",
        f"{len(merged)} merged layer(s) ({', '.join(leaves)}) are one layer in vLLM: "
        "TorchAOLinearMethod.create_weights makes one torchao tensor for each and the weight loader "
        "copies every stored shard into a slice of it, which torchao's copy_ refuses "
        "(quantization/torchao.py; checked with torchao 0.18)",
        tuple(n for names in merged.values() for n in names),
    )]
