"""SGLang 0.5.23, S1 on an ``fp8`` config: ``Fp8Config`` builds every routed-experts layer from one
``is_fp4_experts`` answer (MXFP4 for S1), so NVFP4 target experts need SGLang's hybrid export form.
configs/model_config.py reads ``quant_algo: MIXED_PRECISION`` + ``moe_quant_algo: NVFP4`` +
``group_size`` from config.json's ``quantization_config`` (``nvfp4_moe_meta``); the loader then
builds ``HybridFp8NvFp4Config``, whose NVFP4 half excludes ``ignore`` plus the NextN/DSpark draft
prefixes (``model.decoder.*``, ``stages.*``), which fall back to MXFP4 (docs/engines.md)."""

from __future__ import annotations

from specguard.formats import scheme as s
from specguard.layouts import roles as r
from specguard.repair.plan import Plan, Problem
from specguard.repair.strategies.common import by_module, misrouted, settle

_FP8_CONFIG = "sglang.srt.layers.quantization.fp8.Fp8Config"


def _nvfp4_built_fp4(p: Problem) -> bool:
    rt = p.route
    return (misrouted(p) and rt.kind == r.ROUTED_EXPERTS and rt.stored is not None and rt.vllm is not None
            and rt.stored.format == s.NVFP4 and rt.vllm.scheme.format == s.MXFP4
            and rt.vllm.quant_config == _FP8_CONFIG)


def apply(plan: Plan, problems: list[Problem]) -> None:
    by_overlay: dict[int, list[Problem]] = {}
    for ps in by_module(p for p in problems if _nvfp4_built_fp4(p)).values():
        by_overlay.setdefault(id(ps[0].overlay), []).extend(ps)
    for ps in by_overlay.values():  # one edit per config, naming every layer it repairs
        overlay, stored = ps[0].overlay, ps[0].route.stored
        block, file, _ = overlay.quant_block()
        if file != "config.json" or stored is None:
            continue  # SGLang reads the hybrid form from config.json's quantization_config only
        prefixes = list(dict.fromkeys(p.route.prefix for p in ps))
        why = "SGLang builds NVFP4 routed experts from its hybrid FP8+NVFP4 form only"
        overlay.set_quant_key("quant_algo", "MIXED_PRECISION", why, prefixes)
        overlay.set_quant_key("group_size", stored.group_size, why, prefixes)
        if str(block.get("moe_quant_algo") or "").upper() != "NVFP4":
            overlay.set_quant_key("moe_quant_algo", "NVFP4", why, prefixes)
        settle(ps)
