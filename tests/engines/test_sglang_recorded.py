"""SGLang 0.5.23's decisions (DeepSeek-V4/V3 factory cases, S8-NVFP4's draft model built and loaded,
DSpark draft configs parsed, GLM-4.7 NVFP4 and Qwen3.8 published copies, the EAGLE-3 drafter of Llama-3.1-8B),
recorded from its own code (engines/sglang/recorder.py),
equal what the installed SGLang decides now: one SGLang start, in a fresh process under its
overlay (docs/engines.md), over the same factory cases. Re-record with scripts/record_sglang.py."""

from __future__ import annotations

import json
from pathlib import Path

from tests.engines import overlays

PLANS = overlays.ROOT / "src/specguard/plans/sglang-0.5.23"
COMMITTED = PLANS / "deepseek_v4.json"
FILES = ("deepseek_v4.json", "glm4_moe.json", "qwen3_5.json", "eagle.json", "gpt_oss.json",
         "compressed_tensors.json")


def test_sglang_decisions_match_the_installed_engine(tmp_path: Path) -> None:
    proc = overlays.run("sglang-0.5.23", ["scripts/record_sglang.py", str(tmp_path)])
    assert proc.returncode == 0, proc.stderr[-4000:]
    for file in FILES:
        fresh = json.loads((tmp_path / file).read_text())
        committed = json.loads((PLANS / file).read_text())
        assert fresh["sglang"] == "0.5.23"
        assert fresh == committed, f"{file}: re-record: PYTHONPATH=.engines/sglang-0.5.23:.engines/triton-3.7.1 " \
                               ".venv/bin/python scripts/record_sglang.py"


def test_recorded_facts_as_docs_engines_states_them() -> None:
    """What docs/engines.md says SGLang does with S1-style checkpoints, from the record."""
    cases = json.loads(COMMITTED.read_text())["cases"]
    s1 = cases["s1"]
    # The NextN draft of a DeepSeek-V4 target, and an FP8 quant config that reads no
    # moe_quant_algo: one is_fp4_experts answer (the header probe) for target and draft.
    assert s1["draft"]["architecture"] == "DeepseekV4ForCausalLMNextN"
    assert cases["s1-dspark"]["draft"]["architecture"] == "DeepseekV4ForCausalLMDSpark"
    assert s1["target"]["quant_config"]["class"].endswith("fp8.Fp8Config")
    assert s1["target"]["is_fp4_experts"] is s1["draft"]["is_fp4_experts"] is True
    # The hybrid FP8+NVFP4 export: NVFP4 for target experts, the NextN/DSpark prefixes excluded.
    hybrid = cases["s1-hybrid"]["target"]["quant_config"]
    assert hybrid["class"].endswith("HybridFp8NvFp4Config")
    experts = hybrid["experts"]
    assert experts["model.layers.0.mlp.experts"]["nvfp4_excluded"] is False
    assert experts["model.decoder.mlp.experts"]["nvfp4_excluded"] is True
    assert experts["stages.0.mlp.experts"]["nvfp4_excluded"] is True


def test_recorded_glm_facts_as_docs_engines_states_them() -> None:
    """GLM-4.7 NVFP4 (published copies): SGLang rewrites the draft to Glm4MoeForCausalLMNextN, and
    its loader hands that draft the same ModelOptFp4Config (the model class then drops it, read from
    glm4_moe_nextn.py); the NVFP4 list's model.layers.{N}* entry matches nothing under model.decoder."""
    cases = json.loads((PLANS / "glm4_moe.json").read_text())["cases"]
    for case in cases.values():
        assert case["target"]["architecture"] == "Glm4MoeForCausalLM"
        assert case["draft"]["architecture"] == "Glm4MoeForCausalLMNextN"
        assert case["draft"]["quant_config"]["class"].endswith("ModelOptFp4Config")
    prefixes = cases["glm-4.7-nvfp4"]["draft"]["quant_config"]["prefixes"]
    assert prefixes["model.decoder.self_attn.qkv_proj"]["nvfp4_excluded"] is False
    assert prefixes["model.layers.0.self_attn.qkv_proj"]["nvfp4_excluded"] is True


def test_recorded_qwen3_5_facts_as_docs_engines_states_them() -> None:
    """Qwen3.5 MTP (the published Qwen3.8 FP8 copies, an NVFP4 export of it): SGLang rewrites the
    draft to Qwen3_5ForCausalLMMTP; the loader hands it the target's quant config, and the model's own
    _mtp_quant_config (run) keeps Fp8Config but drops a serialized modelopt_fp4 config. Fp8Config keeps
    each entry with and without ``model.`` and matches dotted sub-paths, so the target's
    ``model.layers.0.mlp.shared_expert.*`` entries also skip the MTP's ``mtp.layers.0`` shared expert."""
    cases = json.loads((PLANS / "qwen3_5.json").read_text())["cases"]
    for case in cases.values():
        assert case["target"]["architecture"] == "Qwen3_5MoeForCausalLM"
        assert case["draft"]["architecture"] == "Qwen3_5ForCausalLMMTP"
        assert case["draft"]["quant_config"]["class"] == case["target"]["quant_config"]["class"]
    fp8, bare = cases["qwen3.8-2.4t-a95b-fp8"]["draft"], cases["qwen3.8-2.4t-a95b-fp8-mtp-bf16-not-excluded"]["draft"]
    assert fp8["model_quant_config"].endswith("fp8.Fp8Config")
    assert cases["qwen3.8-2.4t-a95b-nvfp4-export-mtp-bf16"]["draft"]["model_quant_config"] is None
    assert fp8["quant_config"]["prefixes"]["mtp.layers.0.self_attn.qkv_proj"]["fp8_skipped"] is True
    prefixes = bare["quant_config"]["prefixes"]
    assert prefixes["mtp.layers.0.self_attn.qkv_proj"]["fp8_skipped"] is False
    assert prefixes["mtp.layers.0.mlp.experts"]["fp8_skipped"] is False
    assert prefixes["mtp.layers.0.mlp.shared_expert.gate_up_proj"]["fp8_skipped"] is True
    assert bare["quant_config"]["packed_modules_mapping"]["in_proj_qkvz"] == ["in_proj_qkv", "in_proj_z"]


def test_recorded_s6_bf16_repair_as_docs_engines_states_it() -> None:
    """S6-BF16 (DeepSeek-V3, fp8, a BF16 NextN layer excluded by nothing) and its ``fix --engine
    all`` repair: SGLang's Fp8Config matches a fused layer by its shards' names only
    (utils.py ``is_layer_skipped``, no packed_modules_mapping for these classes), so the repair's
    ``...shared_experts.gate_proj``/``up_proj`` entries make it skip ``...gate_up_proj``."""
    cases = json.loads(COMMITTED.read_text())["cases"]
    broken = cases["s6-bf16"]["draft"]["quant_config"]
    fixed = cases["s6-bf16-fixed"]["draft"]["quant_config"]
    assert broken["packed_modules_mapping"] == fixed["packed_modules_mapping"] == {}
    gate_up = "model.decoder.mlp.shared_experts.gate_up_proj"
    assert broken["prefixes"][gate_up]["fp8_skipped"] is False and fixed["prefixes"][gate_up]["fp8_skipped"] is True
    assert gate_up not in fixed["ignored_layers"]  # the repair names the shards, never the fused layer
    assert {"model.decoder.mlp.shared_experts.gate_proj", "model.decoder.mlp.shared_experts.up_proj"} <= set(
        fixed["ignored_layers"])
    assert all(v["fp8_skipped"] for p, v in fixed["prefixes"].items()
               if p.startswith("model.decoder.") and p.endswith(("_proj", "_mqa", "experts")))


def test_recorded_eagle_facts_as_docs_engines_states_them() -> None:
    """The EAGLE-3 drafter: its own ModelConfig keeps ``LlamaForCausalLMEagle3`` and reads its own
    config.json (no quant config: none; ``fp8``: Fp8Config); vLLM-named entries
    (``model.layers.4.self_attn.qkv_proj``) skip none of SGLang's ``model.qkv_proj``-style prefixes."""
    cases = json.loads((PLANS / "eagle.json").read_text())["cases"]
    assert {c["draft"]["architecture"] for c in cases.values()} == {"LlamaForCausalLMEagle3"}
    assert cases["eagle3-llama3.1-8b"]["draft"]["quant_config"]["class"] is None
    named = cases["eagle3-fp8-vllm-names"]["draft"]["quant_config"]
    assert named["class"].endswith("fp8.Fp8Config") and "model.layers.4.self_attn.qkv_proj" in named["ignored_layers"]
    assert not named["prefixes"]["model.qkv_proj"]["fp8_skipped"]
    assert named["prefixes"]["model.fc"]["fp8_skipped"]  # "model.fc" is SGLang's name too (plain nn.Linear anyway)
