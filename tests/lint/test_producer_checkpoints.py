"""Lint on checkpoints written by real quantizers: exactly what vLLM 0.33 does with each.

Every fixture in tests/data/producers/ is a checkpoint as its tool wrote it. Where
vLLM 0.33 builds and loads it, lint must find nothing and every route is ``ok``;
where it does not, lint must give the true finding. What vLLM does was recorded
once per fixture by running its own start-up and loader on CPU
(scripts/producers/vllm_expectations.py -> ``vllm.json`` beside the fixture).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specguard.lint import lint
from specguard.resolve import Resolver

DATA = Path(__file__).resolve().parents[1] / "data" / "producers"
FIXTURES = sorted(p.name for p in DATA.iterdir() if (p / "config.json").exists())

# fixture -> the codes lint must give, and why (each checked against vllm.json).
NOT_SERVED = {
    # config/model.py _verify_quantization: "Unknown quantization method: bitsandbytes".
    "bnb_nf4": {"SG701"}, "bnb_fp4": {"SG701"}, "bnb_int8": {"SG701"},
    # No quantization_config: unquantized layers, then "There is no module or parameter
    # named ...output_scale" at load.
    "quanto_qint4": {"SG701"}, "quanto_qint8": {"SG701"}, "quanto_qfloat8": {"SG701"},
    # "Not supported args for copy_ due to metadata mismatch" loading q_proj into qkv_proj;
    # and the router (not nn.Linear for torchao, a LinearBase in vLLM) built TorchAOLinearMethod.
    "torchao_int8wo": {"SG701", "SG203"}, "torchao_fp8wo": {"SG701", "SG203"},
    # ModelOptFp8Config builds ModelOptFp8MoEMethod (per-tensor expert scales) for FP8_PB_WO too:
    # the per-block expert scales fail to load ("shape '[]' is invalid for input of size 2").
    "mo_fp8_block": {"SG201"},
    # modelopt.py from_config: "ModelOpt currently only supports: [...]" (MXFP4, W4A16_AWQ).
    "mo_mxfp4": {"SG701"}, "mo_int4_awq_dense": {"SG701"},
    # Quark's global config quantizes the fused experts (not nn.Linear, so Quark left
    # them BF16): vLLM builds a quantized MoE method for BF16 tensors.
    **{f"quark_{n}": {"SG203"} for n in ("int4_g128", "uint4_g128", "int8", "fp8", "mxfp4", "nvfp4")},
    # Qwen3MoeForCausalLM adds gate_up_proj to its class packed_modules_mapping in __init__, after
    # SupportsQuant.__new__ copied the mapping into the quant config (recorded in its plan,
    # plans/vllm-0.33/Qwen3MoeForCausalLM.json): the dense layer's gate_up_proj is not expanded
    # to its stored shards, is built UnquantizedLinearMethod, and its int4 shards fail to load.
    "ar_w4g128_gptq": {"SG204"}, "ct_mixed": {"SG204"},
}
# vLLM starts on these but copies the BF16 experts into FP8/INT8 parameters (FusedMoE's
# weight loader copy_ casts) whose scales no tensor fills: a silent wrong model.
SILENT = {"quark_fp8", "quark_int8"}
# Refusals of the CPU recording run that are not vLLM's CUDA behaviour: no CPU kernel for
# the format (MXFP4/NVFP4/MXFP8 linears: "Failed to find a kernel"), and the int4 layers
# whose CPU kernel (its can_implement bent by the recorder) creates other parameters than
# the CUDA GPTQ/INC methods ("has no parameter 'w2_qweight'", "no attribute 'data'" in
# linear.py load_weights). Lint stays clean on these; not verified on a GPU here.
CPU_ONLY = {"ct_mxfp4", "ct_mxfp8", "ct_nvfp4", "mo_mxfp8", "mo_nvfp4", "mo_mixed",
            "ar_w4g128_autoround", "quark_mxfp4", "quark_nvfp4"}


def test_fixtures_present():
    assert len(FIXTURES) >= 33
    assert set(NOT_SERVED) <= set(FIXTURES)


def _record(name: str) -> dict | None:
    path = DATA / name / "vllm.json"
    return json.loads(path.read_text()) if path.exists() else None


@pytest.mark.parametrize("name", FIXTURES)
def test_lint_says_what_vllm_does(name):
    r = Resolver.open(DATA / name)
    codes = {f.code for f in lint([r]).findings}
    assert codes == NOT_SERVED.get(name, set()), [f"{f.code}: {f.message}" for f in lint([r]).findings]
    verdicts = {rt.verdict for rt in r.routes()}
    if name not in NOT_SERVED:
        assert verdicts == {"ok"}, [(rt.prefix, rt.verdict, rt.reason) for rt in r.routes() if rt.verdict != "ok"]
    elif "SG701" in codes:  # route says so too, for the modules the engine stops at
        assert "refused" in verdicts


@pytest.mark.parametrize("name", sorted(NOT_SERVED))
def test_expectation_matches_the_recorded_vllm_run(name):
    rec = _record(name)
    assert rec is not None, f"{name}: no vllm.json"
    if name in SILENT:
        assert rec["starts"] is True
        assert rec["methods"]["model.layers.1.mlp.experts.routed_experts"].startswith("Quark")
    if name.startswith(("quark", "torchao")) and "methods" in rec:  # the router vLLM quantizes
        assert rec["methods"]["model.layers.1.mlp.gate"].startswith(("Quark", "TorchAO"))
    elif name in CPU_ONLY:
        assert rec["starts"] is False
    else:
        assert rec["starts"] is False and rec["stage"] in ("config", "build", "load"), rec


def test_refusal_names_the_stage_and_the_exception():
    r = Resolver.open(DATA / "bnb_nf4")
    (f,) = lint([r]).findings
    assert f.data["raises"] == "ValueError: Unknown quantization method: bitsandbytes"
    assert _record("bnb_nf4")["error"].find("Unknown quantization method: bitsandbytes") > 0


def test_modelopt_block_fp8_experts_get_the_per_tensor_method():
    """vLLM's own classes: ModelOptFp8Config (FP8_PB_WO too) builds ModelOptFp8MoEMethod for
    experts, and the recorded load stopped at its per-tensor w2_weight_scale."""
    from vllm.model_executor.layers.quantization.modelopt import ModelOptFp8Config, ModelOptFp8MoEMethod

    qc = json.loads((DATA / "mo_fp8_block" / "hf_quant_config.json").read_text())
    assert ModelOptFp8Config.from_config(qc).quant_method == "FP8_PB_WO"
    assert ModelOptFp8Config.FusedMoEMethodCls is ModelOptFp8MoEMethod
    rec = _record("mo_fp8_block")
    assert rec["methods"]["model.layers.1.mlp.experts.routed_experts"] == "ModelOptFp8MoEMethod"
    assert rec["where"]["weight_name"].endswith("w2_weight_scale")
