"""`specguard fix` output through vLLM 0.33's own classes on CPU, plugin off.

For each repaired scenario and both DeepSeek-V4 quant-config classes (the V4
class the registry returns on CPU/XPU, the V4.1 class it returns on CUDA/ROCm)
and compressed-tensors: the draft layers get the quant method of what the
repaired checkpoint stores, the target's stay as they were, and vLLM's own
loader (DefaultModelLoader + DeepSeekV4MTP.load_weights) under LoadGuard writes
every draft parameter. ``VLLM_PLUGINS=""`` (vllm_harness.CPU_ENV): no plugin.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from specguard.cli import main
from specguard.guard import LoadGuard
from tests.integrations import vllm_harness as H

NVFP4, MXFP4, BF16_MOE = "ModelOptNvFp4FusedMoE", "Mxfp4MoEMethod", "UnquantizedFusedMoEMethod"
REGISTRIES = ("cpu", "cuda")
MTP = {"method": "mtp", "num_speculative_tokens": 1}
DSPARK = {"method": "dspark", "num_speculative_tokens": 3}
N = 2  # num_hidden_layers of the factory's tiny checkpoints


@pytest.fixture(scope="module")
def fixed(scenarios, tmp_path_factory: pytest.TempPathFactory, cpu_vllm: None):
    """``(scenario, --platform) -> VllmConfig`` of the repaired checkpoint, built once."""
    root = tmp_path_factory.mktemp("vllm-fixed")
    cache: dict[tuple[str, str], Any] = {}

    def get(name: str, platform: str) -> Any:
        if (name, platform) not in cache:
            info, out = scenarios[name], root / f"{name}-{platform}"
            args = ["fix", str(info.path), "--out", str(out), "--platform", platform]
            if info.drafter_path is not None:
                args += ["--draft", str(info.drafter_path)]
            assert main(args) == 0
            if info.drafter_path is not None:
                cfg = H.engine_config(str(out / "target"), {**DSPARK, "model": str(out / "drafter")})
            else:
                cfg = H.engine_config(str(out), DSPARK if name == "s1-dspark" else MTP)
            H.init_single_rank(cfg)
            cache[(name, platform)] = cfg
        return cache[(name, platform)]

    return get


def draft_quant(cfg: Any, registry: str) -> Any:
    """The quant config vLLM builds the draft with: the target's object for MTP
    (eagle/utils.py load_eagle_model), the draft's own for DSpark
    (dspark/utils.py load_dspark_model -> get_draft_quant_config)."""
    from vllm.model_executor.models.utils import get_draft_quant_config

    if cfg.speculative_config.method != "dspark":
        return H.quant_config(cfg, registry)
    if registry == "cuda":
        with H.cuda_registry():
            return get_draft_quant_config(cfg)
    return get_draft_quant_config(cfg)


def experts(cfg: Any, quant: Any, layer: int) -> str:
    return H.method_name(H.routed_experts(H.build_moe(cfg, quant, f"model.layers.{layer}.ffn")))


# (scenario, --platform, registry) -> what the draft's routed experts are built as
CASES = [
    ("s1", "all", "cpu", BF16_MOE), ("s1", "all", "cuda", BF16_MOE),
    ("s1", "cpu", "cpu", BF16_MOE),
    ("s1", "cuda", "cuda", MXFP4),
    ("s1", "cuda", "cpu", NVFP4),  # the V4 class reads no `ignore`: why --platform cpu re-encodes
    ("s1-u8", "all", "cpu", BF16_MOE), ("s1-u8", "cuda", "cuda", MXFP4),
    ("s1-dspark", "all", "cpu", BF16_MOE), ("s1-dspark", "all", "cuda", BF16_MOE),
    ("s1-dspark", "cuda", "cuda", MXFP4),
    ("s4", "all", "cpu", BF16_MOE), ("s4", "all", "cuda", BF16_MOE), ("s4", "cuda", "cuda", MXFP4),
]


@pytest.mark.parametrize(("name", "platform", "registry", "method"), CASES)
def test_draft_experts_get_the_method_of_what_is_stored(fixed, name: str, platform: str, registry: str,
                                                        method: str) -> None:
    cfg = fixed(name, platform)
    quant = draft_quant(cfg, registry)
    draft_layers = range(N, N + (3 if cfg.speculative_config.method == "dspark" else 1))
    assert [experts(cfg, quant, layer) for layer in draft_layers] == [method] * len(draft_layers)
    target = H.quant_config(cfg, registry)
    assert [experts(cfg, target, layer) for layer in range(N)] == [NVFP4] * N  # main experts untouched


def test_s2_bf16_draft_tower_is_built_unquantized_and_the_target_as_before(fixed, scenarios) -> None:
    cfg = fixed("s2", "all")
    quant = H.quant_config(cfg, "cpu")
    assert type(quant).__name__ == "CompressedTensorsConfig"
    draft = H.build_moe(cfg, quant, f"model.layers.{N}.ffn")
    assert H.method_name(H.routed_experts(draft)) == BF16_MOE
    assert H.method_name(draft.shared_experts.gate_up_proj) == "UnquantizedLinearMethod"
    for proj in ("e_proj", "h_proj"):
        assert H.method_name(H.build_linear(cfg, quant, f"model.layers.{N}.{proj}")) == "UnquantizedLinearMethod"
    main_moe = H.build_moe(cfg, quant, "model.layers.0.ffn")
    assert H.method_name(H.routed_experts(main_moe)) == "CompressedTensorsW4A4Nvfp4MoEMethod"
    assert H.method_name(main_moe.shared_experts.gate_up_proj) == "CompressedTensorsLinearMethod"


@pytest.mark.parametrize(("name", "platform", "registry"), [
    ("s1", "all", "cpu"), ("s1", "all", "cuda"), ("s1", "cuda", "cuda"), ("s1-u8", "all", "cpu"),
    ("s1-u8", "cuda", "cuda"), ("s2", "all", "cpu"),
    # DSpark drafts: their first block's routed experts through the MTP class's loader (same
    # mtp.{k}.ffn.experts.* names and renames), into layers built with the draft's own quant config
    ("s1-dspark", "all", "cpu"), ("s1-dspark", "cuda", "cuda"), ("s4", "all", "cpu"), ("s4", "cuda", "cuda"),
])
def test_vllms_loader_writes_every_draft_parameter(fixed, name: str, platform: str, registry: str) -> None:
    cfg = fixed(name, platform)
    report = _guarded_draft_load(cfg, registry)
    assert report.checked >= (2 if cfg.speculative_config.method == "dspark" else 10)
    assert report.ok, str(report)


def test_the_same_load_of_the_unrepaired_s1_leaves_scales_unwritten(s1_mtp: Any) -> None:
    report = _guarded_draft_load(s1_mtp, "cpu")  # the control: the guard does see a bad load
    assert len(report.names("never_written")) == 4


def _guarded_draft_load(cfg: Any, registry: str) -> Any:
    model = H.mtp_draft_model(cfg, draft_quant(cfg, registry))
    dspark = cfg.speculative_config.method == "dspark"  # its other modules are not the MTP layer's
    include = [f"model.layers.{N}.mtp_block.ffn.experts.*"] if dspark else None
    with LoadGuard(model, policy="report", include=include) as guard:
        H.load_draft_weights(cfg, model)
    return guard.report


# --- --hf-overrides: a dict override reaches the target (and its MTP draft), never a DSpark draft -----


def _overrides(scenarios, name: str, capsys: pytest.CaptureFixture[str]) -> dict:
    assert main(["fix", str(scenarios[name].path), "--platform", "cuda", "--diff"]) == 0
    out = capsys.readouterr().out
    if "--hf-overrides '" in out:
        return json.loads(out.split("--hf-overrides '", 1)[1].split("'", 1)[0])
    # what an override would have to carry: the repaired config's quantization_config
    from specguard.checkpoint.source import open_checkpoint
    from specguard.repair import make_plan

    plan = make_plan(open_checkpoint(scenarios[name].path), None, ("cuda",))
    return {"quantization_config": plan.overlays[0].config["quantization_config"]}


def _with_overrides(path: Path, speculative: dict, overrides: dict) -> Any:
    cfg = H.engine_config(str(path), speculative, hf_overrides=overrides)
    H.init_single_rank(cfg)
    return cfg


def test_hf_overrides_fix_s1_target_and_its_mtp_draft(scenarios, cpu_vllm: None,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    overrides = _overrides(scenarios, "s1", capsys)
    cfg = _with_overrides(scenarios["s1"].path, MTP, overrides)
    # dict overrides reach the target's hf_config only (compose_draft_hf_overrides) ...
    assert cfg.model_config.hf_config.quantization_config["ignore"] == ["mtp.0.ffn.experts"]
    assert "ignore" not in cfg.speculative_config.draft_model_config.hf_config.quantization_config
    # ... and the MTP draft is built with the target's quant config object
    assert experts(cfg, draft_quant(cfg, "cuda"), N) == MXFP4
    assert experts(cfg, H.quant_config(cfg, "cuda"), 0) == NVFP4


def test_hf_overrides_cannot_fix_a_dspark_draft(scenarios, cpu_vllm: None,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    overrides = _overrides(scenarios, "s1-dspark", capsys)
    cfg = _with_overrides(scenarios["s1-dspark"].path, DSPARK, overrides)
    assert cfg.model_config.hf_config.quantization_config["ignore"] == [f"mtp.{i}.ffn.experts" for i in range(3)]
    # get_draft_quant_config reads the draft model config, built from the files
    assert [experts(cfg, draft_quant(cfg, "cuda"), N + i) for i in range(3)] == [NVFP4] * 3


def test_hf_overrides_fix_s2_target_and_its_mtp_draft(scenarios, cpu_vllm: None,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    overrides = _overrides(scenarios, "s2", capsys)
    cfg = _with_overrides(scenarios["s2"].path, MTP, overrides)
    quant = H.quant_config(cfg, "cpu")  # compressed-tensors: one class on every platform
    for proj in ("e_proj", "h_proj"):
        assert H.method_name(H.build_linear(cfg, quant, f"model.layers.{N}.{proj}")) == "UnquantizedLinearMethod"
    assert experts(cfg, quant, N) == BF16_MOE
    assert experts(cfg, quant, 0) == "CompressedTensorsW4A4Nvfp4MoEMethod"


@pytest.mark.parametrize(("name", "platform", "registry"), [
    ("s1", "all", "cpu"), ("s1", "all", "cuda"), ("s1", "cuda", "cuda"), ("s1-u8", "all", "cpu"),
])
def test_the_draft_fp8_linears_keep_their_method(fixed, name: str, platform: str, registry: str) -> None:
    """The repair touches the draft experts only: the draft's FP8 block projections stay FP8."""
    cfg = fixed(name, platform)
    quant = H.quant_config(cfg, registry)
    for proj in ("e_proj", "h_proj"):
        assert H.method_name(H.build_linear(cfg, quant, f"model.layers.{N}.{proj}")) == "Fp8LinearMethod"
    moe = H.build_moe(cfg, quant, f"model.layers.{N}.ffn")
    assert H.method_name(moe.shared_experts.gate_up_proj) == "Fp8LinearMethod"
