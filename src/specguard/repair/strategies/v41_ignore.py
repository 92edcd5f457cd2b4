"""Config first for S1 on CUDA/ROCm: vLLM 0.33's DeepSeek-V4.1 quant config
(models/deepseek_v41/quant_config.py ``_is_nvfp4_expert_layer``) builds a
routed-experts layer MXFP4 when ``mtp.{k}.ffn.experts`` (a draft layer past
``num_hidden_layers``) or ``layers.{i}.ffn.experts`` matches an entry of the
ModelOpt-style ``quantization_config.ignore`` by ``fnmatchcase``."""

from __future__ import annotations

from specguard.declared.edits import Applicability
from specguard.repair.plan import Plan, Problem
from specguard.repair.strategies.common import by_module, mxfp4_experts_built_nvfp4, num_hidden_layers, settle


def apply(plan: Plan, problems: list[Problem]) -> None:
    groups = by_module(p for p in problems if mxfp4_experts_built_nvfp4(p))
    for ps in groups.values():
        p = ps[0]
        n = num_hidden_layers(plan.overlays[0])  # model_config.hf_text_config: the target's
        name = p.resolver.vllm.v41_ignore_name(p.route.prefix, n)
        if name is None:
            continue
        p.overlay.add_entries("ignore", [name], "V4.1 class (CUDA/ROCm) builds them MXFP4", [p.route.prefix],
                              Applicability.PLATFORM, _v41_platforms(p))
        settle(ps)


def _v41_platforms(p: Problem) -> tuple[str, ...]:
    """The platform classes vLLM gives the V4.1 class: all but cpu (the V4 class reads no ``ignore``)."""
    return tuple(x for x in p.resolver.vllm.platforms if x != "cpu")
