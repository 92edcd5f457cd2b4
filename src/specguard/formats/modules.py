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
})
# The scale tensors among them (the one list; formats/classify.py, formats/settle.py
# and lint/content.py read these): every float multiplier of a quantized weight.
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
    for suffix in GPT_OSS_SUFFIXES:
        if name.endswith(suffix) and name[: -len(suffix)] in gpt_oss_stems:
            return name[: -len(suffix)], suffix[1:]
    return name, ""


def group_tensors(tensors: Iterable[TensorInfo]) -> dict[str, ModuleTensors]:
    """Modules in first-seen order, each with its parameters."""
    tensors = list(tensors)
    stems = frozenset(t.name[: -len("_blocks")] for t in tensors if t.name.endswith("_blocks"))
    grouped: dict[str, dict[str, TensorInfo]] = {}
    suffixes = PARAM_SUFFIXES
    for t in tensors:  # hot loop (one pass per tensor): split_name's common case inlined
        module, dot, last = t.name.rpartition(".")
        if not (dot and last in suffixes):
            module, last = split_name(t.name, stems)
        grouped.setdefault(module, {})[last] = t
    return {m: ModuleTensors(m, params) for m, params in grouped.items()}
