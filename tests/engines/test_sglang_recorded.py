"""SGLang 0.5.23's decisions (DeepSeek-V4/V3 factory cases, GLM-4.7 NVFP4 published copies),
recorded from its own code (engines/sglang/recorder.py),
equal what the installed SGLang decides now: one SGLang start, in a fresh process under its
overlay (docs/engines.md), over the same factory cases. Re-record with scripts/record_sglang.py."""

from __future__ import annotations

import json
from pathlib import Path

from tests.engines import overlays

PLANS = overlays.ROOT / "src/specguard/plans/sglang-0.5.23"
COMMITTED = PLANS / "deepseek_v4.json"
FILES = ("deepseek_v4.json", "glm4_moe.json", "gpt_oss.json", "compressed_tensors.json")


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
