"""AMD Quark fixtures: ``LLMTemplate.get("qwen3_moe").get_config(scheme)``,
``ModelQuantizer.quantize_model`` (PTQ on the in-memory calibration ids),
``freeze`` and ``export_safetensors`` (quark mode, real_quantized, the default
``reorder`` packing), on CPU.

Expected formats from the recipe: Quark quantizes every nn.Linear whose name
is not in the template's ``exclude`` (lm_head for qwen3_moe); Qwen3-MoE's
router (``Qwen3MoeTopKRouter``) and transformers 5's fused experts
(``Qwen3MoeExperts``: 3-D ``gate_up_proj`` / ``down_proj``) are not
nn.Linear, and Quark exports the experts fused, as bare bf16 tensors under
modules ``mlp.experts.gate_up_proj`` and ``mlp.experts.down_proj``. Each scheme's weight spec (quark template.py)
maps to specguard's vocabulary: int4/uint4 per_group g128 -> int4_group,
int8 per_tensor -> int8_tensor, fp8_e4m3 per_tensor -> fp8_tensor, OCP MXFP4
-> mxfp4 g32, FP4 per_group g16 with FP8 E4M3 scale quant -> nvfp4 g16.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import common

# name -> (quark scheme, format, group size)
FIXTURES: dict[str, tuple[str, str, int | None]] = {
    "quark_int4_g128": ("int4_wo_128", "int4_group", 128),
    "quark_uint4_g128": ("uint4_wo_128", "int4_group", 128),
    "quark_int8": ("int8", "int8_tensor", None),
    "quark_fp8": ("fp8", "fp8_tensor", None),
    "quark_mxfp4": ("mxfp4", "mxfp4", 32),
    "quark_nvfp4": ("nvfp4", "nvfp4", 16),
}
TEMPLATE = "qwen3_moe"
REFERENCE = ("model.layers.0.self_attn.k_proj", "model.layers.1.self_attn.o_proj")


def expected_modules(fmt: str, group: int | None, exclude: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, cls in common.arch_modules(fused_experts=True).items():
        quantized = cls == "Linear" and name not in exclude
        out[name] = common.entry(fmt, "quark", group) if quantized else common.BF16
    return out


def build(name: str, dest: Path) -> None:
    from quark.torch import LLMTemplate, ModelQuantizer, export_safetensors

    scheme, fmt, group = FIXTURES[name]
    work = common.workdir()
    model = common.load_base(common.build_base(work / "base"))
    cfg = LLMTemplate.get(TEMPLATE).get_config(scheme=scheme)
    quantizer = ModelQuantizer(cfg)
    model = quantizer.quantize_model(model, common.calib_ids())
    model = quantizer.freeze(model)
    # After freeze a QuantLinear's weight holds Quark's own quantize-dequantize result.
    ref = {m: model.get_submodule(m).weight.detach().clone() for m in REFERENCE}
    export_safetensors(model, work / "out")
    exclude = list(cfg.exclude)
    expected = {
        "fixture": name,
        "producer": "amd-quark",
        "versions": common.versions("amd-quark"),
        "recipe": {"template": TEMPLATE, "scheme": scheme, "exclude": exclude,
                   "export": "export_safetensors(custom_mode='quark')"},
        "derivation": "Quark quantizes every nn.Linear not in the template's exclude list; "
        "the scheme's weight spec names the format; the fused experts, the router and "
        "norms are not nn.Linear (experts exported fused, bf16)",
        "modules": expected_modules(fmt, group, exclude),
    }
    common.write_fixture(work / "out", dest, expected)
    common.write_reference(dest, ref, "quark QuantLinear.weight after ModelQuantizer.freeze (QDQ)")
