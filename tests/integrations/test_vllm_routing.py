"""vLLM 0.33's own quant configs and layers, routing DeepSeek-V4 draft modules, with and without specguard.

"cpu" is the class vLLM's registry returns on this machine
(vllm.models.deepseek_v4.quant_config); "cuda" the one it returns on CUDA/ROCm
(vllm.models.deepseek_v41.quant_config). Both route every expert layer by the
checkpoint's global ``moe_quant_algo``; V4.1 honours a ModelOpt-style ``ignore``.
"""

from __future__ import annotations

from typing import Any

import pytest

from specguard.integrations.vllm import routing
from tests.integrations import vllm_harness as H

NVFP4 = "ModelOptNvFp4FusedMoE"
MXFP4 = "Mxfp4MoEMethod"
N = 2  # num_hidden_layers of the test checkpoints: the draft layer is 2
# The MTP draft's quant prefix has the ``model.`` root; DSpark builds use an empty root.
DRAFT_CASES = [("s1_mtp", "model.layers.2.ffn"), ("s1_dspark", "layers.2.ffn")]
REGISTRIES = ("cpu", "cuda")


def experts_method(cfg: Any, registry: str, ffn_prefix: str) -> tuple[str, Any]:
    quant = H.quant_config(cfg, registry)
    experts = H.routed_experts(H.build_moe(cfg, quant, ffn_prefix))
    return H.method_name(experts), experts


def test_registry_gives_the_v4_class_on_cpu_and_the_v41_class_on_cuda(s1_mtp: Any) -> None:
    cpu, cuda = (type(H.quant_config(s1_mtp, r)) for r in REGISTRIES)
    assert cpu.__module__ == "vllm.models.deepseek_v4.quant_config"
    assert cuda.__module__ == "vllm.models.deepseek_v41.quant_config"
    assert cpu.__name__ == cuda.__name__ == "DeepseekV4FP8Config"


# --- before: vLLM alone ------------------------------------------------------------


@pytest.mark.parametrize("registry", REGISTRIES)
@pytest.mark.parametrize(("scenario", "prefix"), DRAFT_CASES)
def test_before_s1_draft_experts_are_built_nvfp4(
    request: pytest.FixtureRequest, scenario: str, registry: str, prefix: str
) -> None:
    name, experts = experts_method(request.getfixturevalue(scenario), registry, prefix)
    assert experts.layer_name == f"{prefix}.experts"
    assert name == NVFP4  # the disk holds MXFP4 there


@pytest.mark.parametrize("prefix", ["model.layers.2.ffn", "layers.2.ffn"])
def test_before_modelopt_ignore_routes_draft_mxfp4_only_on_the_cuda_class(
    s1_ignore_mtp: Any, prefix: str
) -> None:
    assert experts_method(s1_ignore_mtp, "cuda", prefix)[0] == MXFP4
    assert experts_method(s1_ignore_mtp, "cuda", "model.layers.0.ffn")[0] == NVFP4
    assert experts_method(s1_ignore_mtp, "cpu", prefix)[0] == NVFP4


# --- with the plugin -----------------------------------------------------------------


@pytest.mark.parametrize("registry", REGISTRIES)
@pytest.mark.parametrize(("scenario", "prefix"), [*DRAFT_CASES, ("s1_u8_mtp", "model.layers.2.ffn")])
def test_plugin_routes_s1_draft_experts_mxfp4(
    request: pytest.FixtureRequest, plugin: None, scenario: str, registry: str, prefix: str
) -> None:
    name, experts = experts_method(request.getfixturevalue(scenario), registry, prefix)
    assert name == MXFP4
    layout = H.param_layout(experts)
    assert layout["w13_weight"] == ("uint8", (4, 256, 128))  # [E, 2I, H/2] packed E2M1
    assert layout["w13_weight_scale"] == ("uint8", (4, 256, 8))  # [E, 2I, H/32] E8M0
    assert layout["w2_weight_scale"] == ("uint8", (4, 256, 4))
    assert not {"w13_weight_scale_2", "w13_input_scale"} & set(layout)
    (d,) = routing.take_decisions()
    assert (d.prefix, d.role, d.stored, d.vllm, d.routed) == (
        f"{prefix}.experts", "draft", "mxfp4", "nvfp4", "mxfp4",
    )


@pytest.mark.parametrize("registry", REGISTRIES)
def test_plugin_keeps_s1_main_experts_nvfp4(s1_mtp: Any, plugin: None, registry: str) -> None:
    for layer in range(N):
        assert experts_method(s1_mtp, registry, f"model.layers.{layer}.ffn")[0] == NVFP4
    assert routing.take_decisions() == []


def test_plugin_agrees_with_v41_ignore_and_records_nothing(s1_ignore_mtp: Any, plugin: None) -> None:
    assert experts_method(s1_ignore_mtp, "cuda", "model.layers.2.ffn")[0] == MXFP4
    assert routing.take_decisions() == []


def test_log_mode_changes_nothing_and_records_the_difference(s1_mtp: Any) -> None:
    from specguard.integrations.vllm import installed
    from specguard.integrations.vllm.settings import LOG, Settings

    routing.take_decisions()
    with installed(Settings(mode=LOG)):
        name, _ = experts_method(s1_mtp, "cuda", "model.layers.2.ffn")
        decisions = routing.take_decisions()
    assert name == NVFP4
    assert [(d.stored, d.vllm, d.routed) for d in decisions] == [("mxfp4", "nvfp4", None)]


def test_v41_is_nvfp4_expert_layer_answers_from_disk(s1_mtp: Any, plugin: None) -> None:
    from vllm.config import set_current_vllm_config

    quant = H.quant_config(s1_mtp, "cuda")
    with set_current_vllm_config(s1_mtp):
        assert quant._is_nvfp4_expert_layer("model.layers.0.ffn.experts") is True
        assert quant._is_nvfp4_expert_layer("model.layers.2.ffn.experts") is False
        with routing.vanilla():  # what vLLM 0.33 itself answers
            assert quant._is_nvfp4_expert_layer("model.layers.2.ffn.experts") is True


# --- S3 / S8: nothing to correct, nothing changes --------------------------------------


def _layers(cfg: Any, registry: str) -> dict[str, tuple[str, dict]]:
    quant = H.quant_config(cfg, registry)
    out = {}
    for ffn in ("model.layers.0.ffn", "model.layers.2.ffn", "layers.2.ffn"):
        moe = H.build_moe(cfg, quant, ffn)
        out[ffn] = (H.method_name(H.routed_experts(moe)), H.param_layout(moe))
    for proj in ("model.layers.2.e_proj", "model.layers.2.h_proj"):
        lin = H.build_linear(cfg, quant, proj)
        out[proj] = (H.method_name(lin), H.param_layout(lin))
    return out


@pytest.mark.parametrize("scenario", ["s3_mtp", "s8_mtp"])  # native V4; all BF16
@pytest.mark.parametrize("registry", REGISTRIES)
def test_plugin_changes_nothing_on_clean_checkpoints(
    request: pytest.FixtureRequest, scenario: str, registry: str
) -> None:
    from specguard.integrations.vllm import installed

    cfg = request.getfixturevalue(scenario)
    before = _layers(cfg, registry)
    routing.take_decisions()
    with installed():
        after = _layers(cfg, registry)
        assert routing.take_decisions() == []
    assert after == before
    expected = {
        "s3_mtp": {MXFP4, "Fp8LinearMethod"},
        "s8_mtp": {"UnquantizedFusedMoEMethod", "UnquantizedLinearMethod"},
    }[scenario]
    assert {m for m, _ in before.values()} == expected


# --- S2: BF16 draft tower under a compressed-tensors target ----------------------------


def _s2_methods(cfg: Any) -> dict[str, str]:
    quant = H.quant_config(cfg, "cpu")
    out = {}
    for ffn in ("model.layers.0.ffn", "model.layers.2.ffn"):
        moe = H.build_moe(cfg, quant, ffn)
        out[f"{ffn}.experts"] = H.method_name(H.routed_experts(moe))
        out[f"{ffn}.shared_experts.gate_up_proj"] = H.method_name(moe.shared_experts.gate_up_proj)
    for proj in ("model.layers.2.e_proj", "model.layers.2.h_proj"):
        out[proj] = H.method_name(H.build_linear(cfg, quant, proj))
    return out


def test_s2_bf16_draft_tower_is_built_quantized_before_and_unquantized_with_plugin(
    s2_mtp: Any,
) -> None:
    from specguard.integrations.vllm import installed

    before = _s2_methods(s2_mtp)
    routing.take_decisions()
    with installed():
        after = _s2_methods(s2_mtp)
        decisions = routing.take_decisions()
    draft_experts = "model.layers.2.ffn.experts"
    draft_shared = "model.layers.2.ffn.shared_experts.gate_up_proj"
    assert before[draft_experts] == "CompressedTensorsW4A4Nvfp4MoEMethod"
    assert before[draft_shared] == "CompressedTensorsLinearMethod"  # FP8 block
    assert after[draft_experts] == "UnquantizedFusedMoEMethod"
    assert after[draft_shared] == "UnquantizedLinearMethod"
    # The FP8 group targets class Linear: vLLM builds e_proj / h_proj FP8 over their BF16 bytes too.
    for proj in ("model.layers.2.e_proj", "model.layers.2.h_proj"):
        assert before[proj] == "CompressedTensorsLinearMethod"
        assert after[proj] == "UnquantizedLinearMethod"
    main = [k for k in before if k.startswith("model.layers.0.")]
    assert {k: after[k] for k in main} == {k: before[k] for k in main}
    assert {(d.prefix, d.stored, d.vllm, d.routed) for d in decisions} == {
        (draft_experts, "bf16", "nvfp4", "unquantized"),
        (draft_shared, "bf16", "fp8_block", "unquantized"),
        ("model.layers.2.ffn.shared_experts.down_proj", "bf16", "fp8_block", "unquantized"),
        ("model.layers.2.e_proj", "bf16", "fp8_block", "unquantized"),
        ("model.layers.2.h_proj", "bf16", "fp8_block", "unquantized"),
    }


# --- a separate drafter routes by its own disk -----------------------------------------


@pytest.mark.parametrize("registry", REGISTRIES)
def test_separate_drafter_routes_by_its_own_checkpoint(s4: Any, registry: str) -> None:
    """vLLM builds the DSpark drafter's quant config from the drafter's config but resolves
    ``moe_quant_algo`` from the target's (S4): its MXFP4 experts get NVFP4 methods."""
    from vllm.model_executor.models.utils import get_draft_quant_config

    from specguard.integrations.vllm import installed

    cfg = s4

    def drafter_experts() -> str:
        if registry == "cuda":
            with H.cuda_registry():
                quant = get_draft_quant_config(cfg)
        else:
            quant = get_draft_quant_config(cfg)
        # load_dspark_model: the target's VllmConfig with the drafter's quant config
        return H.method_name(H.routed_experts(H.build_moe(cfg, quant, "layers.2.ffn")))

    assert drafter_experts() == NVFP4
    with installed():
        assert drafter_experts() == MXFP4  # the target checkpoint holds no layer 2 at all
        (d,) = routing.take_decisions()
    assert d.source == str(cfg.speculative_config.draft_model_config.model)


# --- MTP ignore entries re-keyed as vLLM does on ROCm -----------------------------------


@pytest.mark.parametrize("registry", REGISTRIES)
def test_mtp_ignore_entries_are_rekeyed_onto_the_draft_layer(
    s1_rekey_mtp: Any, registry: str
) -> None:
    """``ignored_layers: ["mtp.0.e_proj"]``: vLLM maps it to ``model.mtp.0.e_proj``, which no
    runtime prefix matches on NVIDIA; with the plugin it becomes ``model.layers.2.e_proj``."""
    from specguard.integrations.vllm import installed

    cfg = s1_rekey_mtp
    quant = H.quant_config(cfg, registry)
    assert "model.mtp.0.e_proj" in quant.ignored_layers
    assert H.method_name(H.build_linear(cfg, quant, "model.layers.2.e_proj")) == "Fp8LinearMethod"

    routing.take_decisions()
    with installed():
        quant = H.quant_config(cfg, registry)
        method = H.method_name(H.build_linear(cfg, quant, "model.layers.2.e_proj"))
        decisions = routing.take_decisions()
    assert "model.layers.2.e_proj" in quant.ignored_layers
    # Re-keyed, vLLM's own rule skips e_proj (unquantized); the disk holds FP8 block, so
    # the plugin still builds FP8: the config's claim is re-keyed, the disk decides.
    assert method == "Fp8LinearMethod"
    assert [(d.prefix, d.vllm, d.routed) for d in decisions] == [
        ("model.layers.2.e_proj", "unquantized", "fp8_block")
    ]


# --- the start-up log ---------------------------------------------------------------------


def test_log_lines_for_the_s1_dspark_drafter(s1_dspark: Any, plugin: None) -> None:
    from specguard.integrations.vllm import loading

    quant = H.quant_config(s1_dspark, "cuda")
    for i in range(3):
        H.build_moe(s1_dspark, quant, f"layers.{N + i}.ffn")  # DSpark's empty-root prefixes
    assert loading.emit_decisions() == [
        "specguard: layers.2-4.ffn.experts (draft; checkpoint mtp.0-2.ffn.experts.*): "
        "stored MXFP4, vLLM would build NVFP4 -> routed MXFP4",
        "specguard: 3 draft expert layers stored MXFP4, vLLM would build NVFP4 -> routed MXFP4",
    ]


def test_plugin_builds_the_stored_format_where_vllm_cannot_build_its_own(
    s1_mtp: Any, plugin: None
) -> None:
    """No NVFP4 MoE kernel on this machine (as on GPUs without one): vLLM's own choice for the
    MXFP4 draft fails to construct; the plugin builds the method for what is stored."""
    from vllm.model_executor.layers.fused_moe.experts.nvfp4_emulation_moe import (
        Nvfp4QuantizationEmulationTritonExperts as Nvfp4Experts,
    )

    flip = Nvfp4Experts.__dict__["_supports_current_device"]  # the harness's availability flip
    del Nvfp4Experts._supports_current_device
    try:
        with routing.vanilla(), pytest.raises(Exception, match=r"(?i)nvfp4|kernel|backend"):
            experts_method(s1_mtp, "cuda", "model.layers.2.ffn")
        assert experts_method(s1_mtp, "cuda", "model.layers.2.ffn")[0] == MXFP4
    finally:
        Nvfp4Experts._supports_current_device = flip
    (d,) = routing.take_decisions()
    assert (d.stored, d.vllm, d.routed) == ("mxfp4", "?", "mxfp4")
    assert d.note.startswith("vLLM's own method failed: "), d.note


def test_unreadable_checkpoint_keeps_vllm_routing_and_says_so_once(
    tmp_path: Any, cpu_vllm: None, plugin: None
) -> None:
    from specguard.factory import write_scenario
    from tests.integrations.conftest import capture_specguard_log

    path = write_scenario("s1", tmp_path / "s1-truncated").path
    shard = sorted(path.glob("model-*.safetensors"))[-1]
    shard.write_bytes(shard.read_bytes()[:100])  # header cut short
    cfg = H.engine_config(str(path), {"method": "mtp", "num_speculative_tokens": 1})
    H.init_single_rank(cfg)
    with capture_specguard_log() as records:
        for prefix in ("model.layers.2.ffn", "model.layers.0.ffn"):
            assert experts_method(cfg, "cuda", prefix)[0] == NVFP4
    warnings = [r.getMessage() for r in records if "cannot read" in r.getMessage()]
    assert len(warnings) == 1 and str(path) in warnings[0]
    assert "header length" in warnings[0] and "vLLM's routing is kept" in warnings[0]
    assert routing.take_decisions() == []
