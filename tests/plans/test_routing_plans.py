"""Routing reads the recorded plans: DeepSeek-V4's DSpark draft on CUDA, and the generic and
EAGLE layouts' quant prefixes, layer kinds and parameter paths (docs/architecture.md "Plans")."""

from __future__ import annotations

import copy
import json

import pytest

from specguard import plans
from specguard.engines import DSPARK_MODEL, MTP_MODEL
from specguard.engines.vllm import v0_33
from specguard.engines.vllm.v0_33 import Vllm033, dspark_drafter
from specguard.layouts import layout_for
from specguard.resolve import Resolver

DSPARK_PLAN = "DeepseekV4ForCausalLM+DSparkDraftModel"
# Every factory scenario a DSpark draft is served from: its own (s1-dspark, s4's drafter) and
# the DeepSeek-V4 scenarios routed as DSpark.
DSPARK_CASES = [("s1-dspark", None), ("s4", None), ("s1", "dspark"), ("s1-u8", "dspark"), ("s2", "dspark"),
                ("s3", "dspark"), ("s5", "dspark"), ("s8", "dspark")]


def _resolvers(scenarios, name: str, method: str | None, platform: str = "cuda") -> list[Resolver]:
    info = scenarios[name]
    if method is None:
        if info.drafter_path is None:
            return [Resolver.open(info.path, draft_method="dspark", platform=platform)]
        target = Resolver.open(info.path, own_draft=False, platform=platform)
        return [target, Resolver.open(info.drafter_path, draft_method="dspark", target=target, platform=platform)]
    return [Resolver.open(info.path, draft_method=method, platform=platform)]


@pytest.mark.parametrize("platform", ["cuda", "rocm", "cpu"])
def test_dspark_reads_its_plan_where_it_answers(scenarios, platform):
    """The DSpark plan is recorded from the nvidia/ classes: it answers on CUDA only; ROCm and
    CPU keep the hand-written model (resolvers_for: the user's `--draft-method dspark`)."""
    opened = _resolvers(scenarios, "s1-dspark", None, platform) + _resolvers(scenarios, "s4", None, platform)
    served = [r for r in opened if r.draft_method == "dspark"]  # s4's target alone builds no draft
    assert len(served) == 2
    for r in served:
        name = r.vllm.plan.name if r.vllm.plan is not None else None
        assert name == (DSPARK_PLAN if platform == "cuda" else None)
        side = r.vllm._plan_side(DSPARK_MODEL)
        assert (side is not None) == (platform == "cuda")
        if side is not None:
            assert side.model_class.endswith("nvidia.dspark.DSparkDeepseekV4ForCausalLM")


@pytest.mark.parametrize(("name", "method"), DSPARK_CASES)
def test_dspark_plan_agrees_with_the_hand_written_model(scenarios, name, method):
    """Every draft module of every DSpark scenario: what the plan-read model says vLLM 0.33
    builds on CUDA equals what the hand-written rules say (both read against vLLM's source)."""
    resolvers = _resolvers(scenarios, name, method)
    checked = 0
    for r in resolvers:
        if r.draft_method != "dspark":
            continue
        assert r.vllm._plan_side(DSPARK_MODEL) is not None
        written = copy.copy(r.vllm)
        written.plan = None
        for rt in r.routes():
            if not rt.role.is_draft or rt.stored is None:
                continue
            a = r.vllm.builds(rt.prefix, kind=rt.kind)
            b = written.builds(rt.prefix, kind=rt.kind)
            assert (a.method, a.scheme) == (b.method, b.scheme), (rt.prefix, a, b)
            assert r.vllm.fused_shards(rt.prefix) == written.fused_shards(rt.prefix)
            checked += 1
    assert checked


def test_dspark_builds_exactly_what_its_plan_records(scenarios):
    """A draft module the plan records asks the quant config exactly where the plan says."""
    p = plans.plan(DSPARK_PLAN)
    assert p is not None and p.draft is not None and p.draft_method == "dspark"
    (r,) = _resolvers(scenarios, "s1-dspark", None)
    for rt in r.routes():
        row = p.draft.find(rt.prefix) if rt.role.is_draft else None
        if row is None or rt.kind not in ("linear", "head", "routed_experts"):
            continue
        assert r.vllm.built_without_quant_config(rt.prefix, rt.kind) == (not row.asks_quant_config), rt.prefix


@pytest.mark.parametrize("platform", ["cuda", "rocm"])
def test_dspark_fused_layers_are_not_expanded_to_their_shards(scenarios, platform):
    """No DSpark class declares packed_modules_mapping (nvidia/amd/xpu dspark.py), so its fresh
    quant config keeps {} (the plan records none): an ignore list naming the shards wq_a/wkv
    of a draft layer does not skip the fused_wqa_wkv vLLM builds (is_layer_skipped, exact).
    The hand-written model expanded them on ROCm (the target class's mapping)."""
    cfg = json.loads((scenarios["s1-dspark"].path / "config.json").read_text())
    n = cfg["num_hidden_layers"]
    cfg["quantization_config"]["ignored_layers"] = [f"model.layers.{n}.attn.wq_a", f"model.layers.{n}.attn.wkv"]
    m = Vllm033(cfg, cfg["quantization_config"], platform=platform, draft_method="dspark")
    assert m.fused_shards(f"model.layers.{n}.attn.fused_wqa_wkv") == ()
    got = m.builds(f"model.layers.{n}.attn.fused_wqa_wkv", kind="linear")
    assert got.method == "Fp8LinearMethod", got


def test_the_draft_only_modules_are_the_plans():
    """The hand-written lists of modules only one DeepSeek-V4 draft model builds agree with what
    the two recorded draft models hold (DSpark: main_proj, heads; MTP: e_proj, h_proj, ...)."""
    mtp, dspark = plans.plan("DeepseekV4ForCausalLM"), plans.plan(DSPARK_PLAN)
    assert mtp is not None and dspark is not None

    def parts(side: plans.Side) -> set[str]:
        return {seg for row in side.modules for seg in row.path.split(".")}

    assert parts(dspark.draft) - parts(mtp.draft) >= v0_33._DSPARK_ONLY
    assert parts(mtp.draft) - parts(dspark.draft) >= v0_33._MTP_ONLY


def test_dspark_drafter_architecture_as_speculative_config_names_it():
    v4 = {"architectures": ["DeepseekV4ForCausalLM"], "model_type": "deepseek_v4"}
    assert dspark_drafter(v4) == "DSparkDraftModel"
    assert dspark_drafter({**v4, "model_type": "deepseek_v41"}) == "DSparkV41DraftModel"
    assert dspark_drafter(v4, {"architectures": ["Qwen3DSparkModel"]}) == "Qwen3DSparkModel"


def test_mtp_draft_keeps_the_mtp_plan(scenarios):
    (r,) = _resolvers(scenarios, "s1", "mtp")
    assert r.vllm.plan is not None and r.vllm.plan.name == "DeepseekV4ForCausalLM"
    assert r.vllm._plan_side(MTP_MODEL) is not None and r.vllm._plan_side(DSPARK_MODEL) is None


# ------------------------------------------------------------ generic and EAGLE layouts

QWEN3 = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "num_hidden_layers": 36}
QWEN3_EAGLE3 = {"architectures": ["Eagle3Qwen3ForCausalLM"], "model_type": "qwen3", "num_hidden_layers": 1,
                "draft_vocab_size": 32000}
LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "num_hidden_layers": 32}
LLAMA_EAGLE3 = {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "num_hidden_layers": 1,
                "draft_vocab_size": 32000}


def test_qwen3_eagle3_qkv_is_asked_at_the_layer():
    """qwen3_eagle3.py Eagle3Qwen3DecoderLayer overrides qkv_proj with
    ``prefix=maybe_prefix(prefix, "qkv_proj")`` (the decoder layer's prefix: no ``self_attn.``),
    recorded in Qwen3ForCausalLM+Eagle3Qwen3ForCausalLM.json; its parameters stay under self_attn."""
    layout = layout_for(QWEN3_EAGLE3, target_config=QWEN3)
    qkv = layout.place("midlayer.self_attn.q_proj")
    assert qkv.runtime_prefix == "model.layers.36.qkv_proj"
    assert qkv.parameter_prefix == "model.layers.0.self_attn.qkv_proj"
    o = layout.place("midlayer.self_attn.o_proj")
    assert o.runtime_prefix == "model.layers.36.self_attn.o_proj"


def test_llama_eagle3_places_as_its_plan_records():
    layout = layout_for(LLAMA_EAGLE3, target_config=LLAMA)
    assert layout.place("midlayer.self_attn.k_proj").runtime_prefix == "model.layers.32.self_attn.qkv_proj"
    assert layout.place("midlayer.mlp.up_proj").runtime_prefix == "model.layers.32.mlp.gate_up_proj"
    assert layout.place("fc").runtime_prefix == "model.fc" and layout.module_kind("fc") == "linear"
    assert layout.place("lm_head").runtime_prefix == "lm_head" and layout.module_kind("lm_head") == "head"
    assert layout.module_kind("midlayer.hidden_norm") == "norm"


def test_mtp_norms_that_never_ask_keep_their_own_prefix():
    """A module vLLM builds without asking the quant config (Qwen3-Next MTP's norms, MiMo's
    token_layernorm) keeps specguard's draft name: never the target layer its path reads like."""
    qn = layout_for({"architectures": ["Qwen3NextForCausalLM"], "model_type": "qwen3_next",
                     "num_hidden_layers": 48})
    norm = qn.place("mtp.layers.0.self_attn.q_norm")
    assert norm.role.is_draft and norm.runtime_prefix.startswith("mtp.layers.0.")
    assert norm.parameter_prefix == "model.layers.0.self_attn.q_norm"
    assert qn.place("mtp.layers.0.self_attn.q_proj").runtime_prefix == "mtp.layers.0.self_attn.qkv_proj"
    mimo = layout_for({"architectures": ["MiMoForCausalLM"], "model_type": "mimo", "num_hidden_layers": 36,
                       "num_nextn_predict_layers": 1})
    tok = mimo.place("model.mtp_layers.0.token_layernorm")
    assert tok.role.is_draft and tok.runtime_prefix == "model.layers.36.token_layernorm"
    qkv = mimo.place("model.mtp_layers.0.self_attn.q_proj")
    assert qkv.runtime_prefix == "model.layers.36.self_attn.qkv_proj"


def test_a_shard_no_hand_written_fusion_knows_loads_where_the_plan_says():
    """LongCat-Flash's MLA stores q_a_proj / kv_a_proj_with_mqa; longcat_flash.py's
    stacked_params_mapping loads them into fused_qkv_a_proj (recorded), which vLLM asks about."""
    layout = layout_for({"architectures": ["LongcatFlashForCausalLM"], "model_type": "longcat_flash",
                         "num_hidden_layers": 28, "num_layers": 28})
    for shard in ("q_a_proj", "kv_a_proj_with_mqa"):
        p = layout.place(f"model.layers.3.self_attn.1.{shard}")
        assert p.runtime_prefix == "model.layers.3.self_attn.1.fused_qkv_a_proj" and p.kind == "linear"
