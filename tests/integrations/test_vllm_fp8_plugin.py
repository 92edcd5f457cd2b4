"""The plugin under vLLM 0.33's ``Fp8Config``: factory S6-BF16 (DeepSeek-V3 FP8 whose MTP layer
was left BF16, no exclusion) through vLLM's real DeepSeek-V3 MoE and linear layers on CPU.

vLLM builds the draft's experts ``Fp8MoEMethod`` and its linears ``Fp8LinearMethod`` over BF16
bytes (FP8 parameters and ``weight_scale_inv`` the checkpoint never fills); with the plugin the
draft routes BF16 and the main layers keep vLLM's FP8 methods.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from specguard.integrations.vllm import installed, routing
from tests.integrations import vllm_harness as H
from tests.integrations.conftest import scenario


@pytest.fixture(scope="module")
def s6_bf16(ckpt_root: Path, cpu_vllm: None) -> tuple[Any, Any]:
    cfg = H.engine_config(str(scenario(ckpt_root, "s6-bf16")), {"method": "mtp", "num_speculative_tokens": 1})
    H.init_single_rank(cfg)
    from vllm.config import VllmConfig

    quant = VllmConfig.get_quantization_config(cfg.model_config, cfg.load_config)
    assert type(quant).__name__ == "Fp8Config"
    return cfg, quant


def build_layer(cfg: Any, quant: Any, layer: int) -> tuple[str, str]:
    """(experts method, shared-expert gate_up method) of vLLM's DeepseekV2MoE at ``model.layers.{layer}.mlp``."""
    from vllm.config import set_current_vllm_config
    from vllm.model_executor.models.deepseek_v2 import DeepseekV2MoE

    c = H.with_quant_config(cfg, quant)
    c.compilation_config.static_forward_context.clear()
    with set_current_vllm_config(c):
        moe = DeepseekV2MoE(cfg.model_config.hf_config, cfg.parallel_config, quant, prefix=f"model.layers.{layer}.mlp")
    return H.method_name(H.routed_experts(moe)), H.method_name(moe.shared_experts.gate_up_proj)


def test_vllm_builds_the_bf16_draft_fp8(s6_bf16: tuple[Any, Any]) -> None:
    with routing.vanilla():
        assert build_layer(*s6_bf16, 2) == ("Fp8MoEMethod", "Fp8LinearMethod")


def test_plugin_routes_the_bf16_draft_as_stored_and_keeps_the_main_layers(s6_bf16: tuple[Any, Any]) -> None:
    routing.take_decisions()
    with installed():
        draft = build_layer(*s6_bf16, 2)
        main = build_layer(*s6_bf16, 1)
    assert draft == ("UnquantizedFusedMoEMethod", "UnquantizedLinearMethod")
    assert main == ("Fp8MoEMethod", "Fp8LinearMethod")
    decisions = routing.take_decisions()
    assert {(d.prefix, d.stored, d.vllm, d.routed) for d in decisions} == {
        ("model.layers.2.mlp.experts", "bf16", "fp8_block", "unquantized"),
        ("model.layers.2.mlp.shared_experts.gate_up_proj", "bf16", "fp8_block", "unquantized"),
        ("model.layers.2.mlp.shared_experts.down_proj", "bf16", "fp8_block", "unquantized"),
    }
