"""Group tensors into modules by stripping parameter suffixes.

A module is what an engine builds one layer for: ``layers.3.ffn.experts.7.w1``
owns ``.weight``, ``.scale``; ``mtp.0.e_proj`` owns ``.weight``,
``.weight_scale_inv``. Tensors whose last name part is not a known parameter
suffix (norms' bare vectors, ``attn_sink``, ``hc_*`` mixers) are modules of
their own, with parameter name ``""``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from specguard.checkpoint.header import TensorInfo

# Parameter suffixes of the stacks we read (docs/formats.md). Order does not matter.
PARAM_SUFFIXES = frozenset({
    "weight", "bias", "weight_scale", "weight_scale_inv", "scale", "weight_scale_2",
    "input_scale", "weight_packed", "weight_global_scale", "input_global_scale",
    "weight_zero_point", "input_zero_point", "weight_g_idx", "weight_shape",
    "qweight", "qzeros", "scales", "g_idx", "k_scale", "v_scale", "q_scale",
    "output_scale", "pre_quant_scale", "weight_scale_2_inv",
    # AMD Quark: zero points and NVFP4's second-level input scale.
    "output_zero_point", "input_scale_2",
    # bitsandbytes LLM.int8 (Linear8bitLt): per-row scale and the layout tag.
    "SCB", "weight_format",
})
# Parameter names with a dot inside, written after ``<module>.weight.``:
# bitsandbytes' 4-bit quant state (transformers' Params4bit serialization) and
# optimum-quanto's flattened qtensor parts (``_data._data`` is a packed qint4).
WEIGHT_PARTS = frozenset({
    "absmax", "quant_map", "nested_absmax", "nested_quant_map",
    "quant_state.bitsandbytes__nf4", "quant_state.bitsandbytes__fp4",
    "_data", "_data._data", "_scale", "_shift",
})
# torchao through transformers 5: a tensor subclass flattened to
# ``<module>._weight_<inner>`` (``_weight_qdata``, ``_weight_scale``, ...).
TORCHAO_PREFIX = "_weight_"
# The scale tensors among them (the one list; formats/classify.py, formats/settle.py and
# formats/table.py, which notes each module's for lint/content.py, read these): every
# float multiplier of a quantized weight.
SCALE_PARAMS = frozenset({
    "weight_scale", "weight_scale_inv", "scale", "scales", "weight_scale_2", "input_scale",
    "weight_global_scale", "input_global_scale",
})
# The block/group scale of a quantized weight, in the order settle.py looks for it.
BLOCK_SCALE_PARAMS = ("scale", "weight_scale", "scales")
# Beside a float weight these make its classification unknown: the scales (less GPTQ/AWQ's
# ``scales``, which sits beside ``qweight``) and a zero point.
QUANT_PARAMS = (SCALE_PARAMS - {"scales"}) | {"weight_zero_point"}
# gpt-oss / transformers MXFP4 experts: `<proj>_blocks`, `<proj>_scales`, `<proj>_bias`.
GPT_OSS_SUFFIXES = ("_blocks", "_scales", "_bias")
# transformers 5's fused experts (``Qwen3MoeExperts``...): one ``experts`` module holding 3-D
# parameters named by projection, with no ``.weight`` (``mlp.experts.gate_up_proj``). The module
# is ``mlp.experts``, as the engine's runtime prefix is (layouts/fusions.py ``_experts``).
STACKED_EXPERT_PARAMS = frozenset({"gate_up_proj", "down_proj", "gate_proj", "up_proj",
                                   "gate_up_proj_bias", "down_proj_bias"})


@dataclass(frozen=True, slots=True)
class ModuleTensors:
    """A module's checkpoint name and its tensors keyed by parameter suffix."""

    name: str
    params: Mapping[str, TensorInfo]


def split_name(name: str, gpt_oss_stems: frozenset[str] = frozenset()) -> tuple[str, str]:
    """``layers.0.attn.wq.weight`` -> (``layers.0.attn.wq``, ``weight``)."""
    module, dot, last = name.rpartition(".")
    if dot and last in PARAM_SUFFIXES:
        return module, last
    at = name.rfind(".weight.")
    if at > 0 and name[at + 8:] in WEIGHT_PARTS:
        return name[:at], name[at + 1:]
    if dot and last.startswith(TORCHAO_PREFIX):
        return module, last
    for suffix in GPT_OSS_SUFFIXES:
        if name.endswith(suffix) and name[: -len(suffix)] in gpt_oss_stems:
            return name[: -len(suffix)], suffix[1:]
    if dot and last in STACKED_EXPERT_PARAMS and (module == "experts" or module.endswith(".experts")):
        return module, last
    return name, ""


def group_tensors(tensors: Iterable[TensorInfo]) -> dict[str, ModuleTensors]:
    """Modules in first-seen order, each with its parameters."""
    return {m: ModuleTensors(m, params) for m, params in group_params(tensors).items()}


def group_params(tensors: Iterable[TensorInfo]) -> dict[str, dict[str, TensorInfo]]:
    """Each module's tensors keyed by parameter suffix, modules in first-seen order
    (group_tensors without a record per module: formats/table.py builds its own)."""
    tensors = list(tensors)
    stems: frozenset[str] | None = None  # gpt-oss's, found on the first name that needs them (most never do)
    grouped: dict[str, dict[str, TensorInfo]] = {}
    suffixes = PARAM_SUFFIXES
    for t in tensors:  # hot loop (one pass per tensor): split_name's common case inlined
        module, dot, last = t.name.rpartition(".")
        if not (dot and last in suffixes):
            if stems is None:
                stems = frozenset(u.name[: -len("_blocks")] for u in tensors if u.name.endswith("_blocks"))
            module, last = split_name(t.name, stems)
        params = grouped.get(module)
        if params is None:  # not setdefault: that builds a dict for every tensor
            grouped[module] = {last: t}
        else:
            params[last] = t
    return grouped
