"""Re-encode only where no config can say it: DeepSeek-V4 routed experts stored MXFP4
under a config whose global ``moe_quant_algo`` is NVFP4, on the V4 class vLLM 0.33's
registry returns on CPU/XPU (models/deepseek_v4/quant_config.py
``DeepseekV4FP8Config.get_quant_method``: one global switch, no per-layer list
but ``ignored_layers``). MXFP4 -> BF16 is exact (an E2M1 value times a power of
two); the modules are rewritten BF16 and excluded through ``ignored_layers``,
which every class honours first (``is_layer_skipped`` ->
``UnquantizedFusedMoEMethod``)."""

from __future__ import annotations

from specguard.declared.edits import Applicability
from specguard.formats import scheme as s
from specguard.repair.plan import Plan, Problem
from specguard.repair.strategies.common import by_module, mxfp4_experts_built_nvfp4, settle
from specguard.repair.strategies.exclude import exclude

NO_CONFIG_PLATFORMS = ("cpu",)  # the V4 class: ``ignore`` is not read there


def apply(plan: Plan, problems: list[Problem]) -> None:
    groups = by_module(p for p in problems if mxfp4_experts_built_nvfp4(p))
    for ps in groups.values():
        if not any(p.platform in NO_CONFIG_PLATFORMS for p in ps):
            continue  # v41_ignore repairs it with config alone
        p = ps[0]
        for name in p.route.checkpoint_names:
            p.overlay.reencode[name] = s.BF16
        exclude(p.overlay, p.resolver, [p.route.prefix],
                "re-encoded BF16: unquantized on every class", Applicability.REENCODE, plan.engines)
        settle(ps)
