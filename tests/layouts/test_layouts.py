"""Layouts: roles and checkpoint-name <-> runtime-prefix rules, example by example."""

from __future__ import annotations

import pytest

from specguard.layouts import (
    DeepseekV3Layout,
    DeepseekV4Layout,
    EagleLayout,
    GenericLayout,
    LayoutError,
    expert_index,
    layer_index,
    layout_for,
)
from specguard.layouts import roles as r

V4 = {"model_type": "deepseek_v4", "num_hidden_layers": 43, "num_nextn_predict_layers": 1}
V4_DSPARK = {"model_type": "deepseek_v4", "num_hidden_layers": 43, "n_mtp_layers": 3,
             "dspark_target_layer_ids": [10, 20, 30]}
V3 = {"model_type": "deepseek_v3", "num_hidden_layers": 61, "num_nextn_predict_layers": 1,
      "q_lora_rank": 1536, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64}


@pytest.mark.parametrize(("name", "index"), [
    ("model.layers.43.ffn.experts.12", 43),
    ("layers.7.ffn.experts.3.w1.weight", 7),
    ("model.language_model.layers.0.mlp", 0),
    ("mtp.layers.2.mlp.experts.0.gate_proj", 2),
    ("mtp.0.ffn.experts.3.w1", None),
    ("model.sublayers.3.x", None),
    ("model.layers_3.x", None),
    ("lm_head", None),
])
def test_layer_index_is_the_integer_after_layers(name, index):
    assert layer_index(name) == index


def test_expert_index():
    assert expert_index("model.layers.43.ffn.experts.12.w1") == 12
    assert expert_index("model.layers.43.ffn.experts") is None


def test_layout_for_picks_family_and_draft():
    assert isinstance(layout_for(V4), DeepseekV4Layout)
    assert layout_for(V4).draft_kind == r.MTP
    assert layout_for(V4).draft_layers == range(43, 44)
    dspark = layout_for(V4_DSPARK)
    assert dspark.draft_kind == r.DSPARK and dspark.draft_layers == range(43, 46)
    # DSpark counts its own stages: deepseek_v4/nvidia/dspark.py ``n_mtp_layers or 3`` (never
    # num_nextn_predict_layers); deepseek_v41 ``n_mtp_layers or num_nextn_predict_layers or 3``
    assert layout_for(V4, draft_method="dspark").num_draft_layers == 3
    assert layout_for({**V4, "n_mtp_layers": 2}, draft_method="dspark").num_draft_layers == 2
    assert layout_for({**V4, "model_type": "deepseek_v41"}, draft_method="dspark").num_draft_layers == 1
    assert isinstance(layout_for(V3), DeepseekV3Layout)
    assert isinstance(layout_for({"model_type": "glm4_moe", "num_hidden_layers": 46}), GenericLayout)


def test_layout_for_reads_text_config_of_multimodal_configs():
    cfg = {"model_type": "deepseek_v41", "text_config": {**V4, "model_type": "deepseek_v41_text"}}
    layout = layout_for(cfg)
    assert isinstance(layout, DeepseekV4Layout) and not layout.context_wkv


def test_layout_for_rejects_what_it_cannot_lay_out():
    with pytest.raises(LayoutError, match="num_hidden_layers"):
        layout_for({"model_type": "deepseek_v4"})
    with pytest.raises(LayoutError, match="target"):
        layout_for(V4, draft_method="eagle3")
    # an EAGLE head's own config says it is a drafter
    eagle = layout_for({"architectures": ["LlamaForCausalLMEagle3"], "num_hidden_layers": 1})
    assert eagle.family == "eagle" and eagle.role("midlayer.mlp.up_proj").is_draft
    with pytest.raises(LayoutError, match="speculative method"):
        layout_for(V4, draft_method="medusa")


# --- DeepSeek-V4 native + MTP (docs/names.md table, vLLM 0.33 nvidia/mtp.py) ---------------

@pytest.mark.parametrize(("name", "prefix", "param", "role", "kind"), [
    ("layers.7.ffn.experts.3.w1.weight", "model.layers.7.ffn.experts",
     "model.layers.7.ffn.experts.routed_experts", "main (layer 7)", r.ROUTED_EXPERTS),
    ("layers.7.attn.wq_a.scale", "model.layers.7.attn.fused_wqa_wkv",
     "model.layers.7.attn.fused_wqa_wkv", "main (layer 7)", r.LINEAR),
    ("layers.7.ffn.shared_experts.w3.weight", "model.layers.7.ffn.shared_experts.gate_up_proj",
     "model.layers.7.ffn.shared_experts.gate_up_proj", "main (layer 7)", r.LINEAR),
    ("embed.weight", "model.embed_tokens", "model.embed_tokens", "embedding", r.EMBEDDING_KIND),
    ("head.weight", "lm_head", "lm_head", "head", r.HEAD_KIND),
    ("mtp.0.ffn.experts.3.w1.weight", "model.layers.43.ffn.experts",
     "model.layers.43.mtp_block.ffn.experts.routed_experts", "draft (mtp 0, layer 43)", r.ROUTED_EXPERTS),
    ("mtp.0.e_proj.weight", "model.layers.43.e_proj", "model.layers.43.e_proj",
     "draft (mtp 0, layer 43)", r.LINEAR),
    ("mtp.0.h_proj.scale", "model.layers.43.h_proj", "model.layers.43.h_proj",
     "draft (mtp 0, layer 43)", r.LINEAR),
    ("mtp.0.attn.wkv.weight", "model.layers.43.attn.fused_wqa_wkv",
     "model.layers.43.mtp_block.attn.fused_wqa_wkv", "draft (mtp 0, layer 43)", r.LINEAR),
    ("mtp.0.head.weight", "model.layers.43.head", "model.layers.43.shared_head.head",
     "draft (mtp 0, layer 43)", r.HEAD_KIND),
    ("mtp.0.enorm.weight", "model.layers.43.enorm", "model.layers.43.enorm",
     "draft (mtp 0, layer 43)", r.NORM),
])
def test_deepseek_v4_mtp_names(name, prefix, param, role, kind):
    layout = layout_for(V4)
    p = layout.place(name)
    assert (p.runtime_prefix, p.parameter_prefix, str(p.role), p.kind) == (prefix, param, role, kind)


def test_no_runtime_prefix_of_a_deepseek_draft_has_an_mtp_segment():
    layout = layout_for(V4)
    names = ["mtp.0.ffn.experts.1.w2.weight", "mtp.0.attn.wo_a.weight", "mtp.0.e_proj.weight",
             "mtp.0.head.weight", "mtp.0.ffn.shared_experts.w1.weight"]
    assert all("mtp" not in p for n in names for p in layout.runtime_prefixes(n))


def test_runtime_prefixes_answer_the_same_role_as_checkpoint_names():
    layout = layout_for(V4)
    assert layout.role("model.layers.43.ffn.experts") == layout.role("mtp.0.ffn.experts.3.w1")
    assert layout.role("model.layers.43.ffn.experts.12").is_draft
    assert layout.role("model.layers.42.ffn.experts").name == r.MAIN
    assert layout.role("lm_head").name == r.HEAD
    assert layout.role("model.embed_tokens").name == r.EMBEDDING


def test_checkpoint_names_behind_a_fused_and_an_expert_prefix():
    layout = layout_for(V4)
    names = ["mtp.0.attn.wq_a.weight", "mtp.0.attn.wq_a.scale", "mtp.0.attn.wkv.weight",
             "mtp.0.attn.wq_b.weight", "mtp.0.ffn.experts.0.w1.weight", "mtp.0.ffn.experts.1.w3.scale",
             "layers.0.ffn.experts.0.w1.weight"]
    assert layout.checkpoint_names("model.layers.43.attn.fused_wqa_wkv", names) == names[:3]
    assert layout.checkpoint_names("model.layers.43.ffn.experts", names) == names[4:6]
    assert layout.checkpoint_names("model.layers.43", names, descendants=True) == names[:6]
    assert layout.checkpoint_names("model.layers.44.ffn.experts", names) == []


def test_draft_checkpoint_prefixes():
    assert layout_for(V4).draft_checkpoint_prefixes() == ("mtp.0.",)
    assert layout_for(V3).draft_checkpoint_prefixes() == ("model.layers.61.",)


def test_deepseek_v41_target_lives_under_language_model_and_drafts_with_dspark():
    cfg = {"model_type": "deepseek_v41", "architectures": ["DeepseekV41ForCausalLM"], "num_hidden_layers": 43,
           "num_nextn_predict_layers": 3}
    layout = layout_for(cfg)
    assert layout.draft_kind == r.DSPARK and layout.num_draft_layers == 3 and not layout.context_wkv
    assert layout.runtime_prefix("layers.7.ffn.experts.3.w1.weight") == "language_model.model.layers.7.ffn.experts"
    assert layout.runtime_prefix("head.weight") == "language_model.lm_head"
    assert layout.role("language_model.lm_head").name == r.HEAD
    assert layout.role("language_model.model.layers.7.ffn.experts") == r.Role(r.MAIN, layer=7)
    # the DSpark draft is a model of its own, rooted at ``model``
    assert layout.runtime_prefix("mtp.1.ffn.experts.3.w1.weight") == "model.layers.44.ffn.experts"
    with pytest.raises(LayoutError, match="no classic-MTP"):
        layout_for(cfg, draft_method="mtp")


# --- DSpark (nvidia/dspark.py) ---------------------------------------------------------

def test_dspark_quant_prefix_has_both_roots_and_params_are_renumbered():
    layout = layout_for(V4_DSPARK)
    p = layout.place("mtp.2.ffn.experts.5.w2.scale")
    assert p.runtime_prefixes == ("model.layers.45.ffn.experts", "layers.45.ffn.experts")
    assert p.parameter_prefix == "model.layers.2.ffn.experts.routed_experts"
    assert str(p.role) == "draft (dspark 2, layer 45)"
    assert layout.role("layers.45.ffn.experts") == p.role
    assert layout.checkpoint_names("layers.45.ffn.experts", [p.checkpoint_name]) == [p.checkpoint_name]


def test_dspark_head_stack_and_context_wkv():
    layout = layout_for(V4_DSPARK)
    main_proj = layout.place("mtp.0.main_proj.weight")
    assert main_proj.runtime_prefixes == ("model.main_proj", "main_proj")
    assert main_proj.role.is_draft and main_proj.kind == r.LINEAR
    assert layout.role("model.main_proj").is_draft
    wkv = layout.runtime_prefixes("mtp.1.attn.wkv.weight")
    assert wkv[0] == "model.layers.44.attn.fused_wqa_wkv" and "model.context_wkv_proj" in wkv
    names = [f"mtp.{i}.attn.wkv.weight" for i in range(3)] + ["mtp.0.attn.wq_a.weight"]
    assert layout.checkpoint_names("model.context_wkv_proj", names) == names[:3]
    v41 = layout_for({**V4_DSPARK, "model_type": "deepseek_v41"})
    assert "model.context_wkv_proj" not in v41.runtime_prefixes("mtp.1.attn.wkv.weight")


# --- DeepSeek-V3 / V3.2 (deepseek_mtp.py) ------------------------------------------------

@pytest.mark.parametrize(("name", "prefix", "param", "kind"), [
    ("model.layers.61.enorm.weight", "model.layers.61.enorm", "model.layers.61.enorm", r.NORM),
    ("model.layers.61.eh_proj.weight", "model.layers.61.eh_proj", "model.layers.61.eh_proj", r.LINEAR),
    ("model.layers.61.shared_head.head.weight", "model.layers.61.head",
     "model.layers.61.shared_head.head", r.HEAD_KIND),
    ("model.layers.61.mlp.experts.9.down_proj.weight_scale_inv", "model.layers.61.mlp.experts",
     "model.layers.61.mtp_block.mlp.experts.routed_experts", r.ROUTED_EXPERTS),
    ("model.layers.61.self_attn.kv_a_proj_with_mqa.weight", "model.layers.61.self_attn.fused_qkv_a_proj",
     "model.layers.61.mtp_block.self_attn.fused_qkv_a_proj", r.LINEAR),
    ("model.layers.61.embed_tokens.weight", "model.embed_tokens", "model.embed_tokens", r.EMBEDDING_KIND),
])
def test_deepseek_v3_mtp_at_layer_61(name, prefix, param, kind):
    p = layout_for(V3).place(name)
    assert (p.runtime_prefix, p.parameter_prefix, p.kind) == (prefix, param, kind)
    assert p.role == r.Role(r.DRAFT, r.MTP, 61, 0)


def test_deepseek_v3_main_stack_fusions():
    layout = layout_for(V3)
    assert layout.runtime_prefix("model.layers.3.mlp.up_proj.weight") == "model.layers.3.mlp.gate_up_proj"
    assert layout.runtime_prefix("model.layers.3.mlp.shared_experts.gate_proj.weight") == (
        "model.layers.3.mlp.shared_experts.gate_up_proj")
    assert layout.role("model.layers.60.mlp.experts.0.gate_proj.weight") == r.Role(r.MAIN, layer=60)
    no_lora = layout_for({**V3, "q_lora_rank": None})
    assert no_lora.runtime_prefix("model.layers.3.self_attn.kv_a_proj_with_mqa.weight") == (
        "model.layers.3.self_attn.kv_a_proj_with_mqa")


# --- SGLang draft tower ------------------------------------------------------------------

def test_sglang_nextn_prefixes():
    v4 = layout_for(V4, engine="sglang")
    # deepseek_v4.py remap_weight_name_to_dpsk_hf_format: .ffn. -> .mlp., .attn. -> .self_attn.
    assert v4.runtime_prefix("mtp.0.ffn.experts.3.w1.weight") == "model.decoder.mlp.experts"
    assert v4.runtime_prefix("layers.3.ffn.experts.3.w1.weight") == "model.layers.3.mlp.experts"
    assert v4.runtime_prefix("layers.3.attn.wq_a.weight") == "model.layers.3.self_attn.wqkv_a"
    assert v4.runtime_prefix("mtp.0.ffn.shared_experts.w2.weight") == "model.decoder.mlp.shared_experts.down_proj"
    assert v4.runtime_prefix("mtp.0.e_proj.weight") == "model.e_proj"
    assert v4.runtime_prefix("mtp.0.head.weight") == "model.shared_head.head"
    assert v4.role("model.decoder.mlp.experts").is_draft
    # deepseek_v4_dspark.py: stage k is stages.{k}, main_proj on stage 0, no model. root
    dspark = layout_for({**V4, "num_nextn_predict_layers": 3, "dspark_target_layer_ids": [1, 2]}, engine="sglang")
    assert dspark.runtime_prefix("mtp.2.ffn.experts.0.w3.weight") == "stages.2.mlp.experts"
    assert dspark.runtime_prefix("mtp.1.main_proj.weight") == "stages.0.main_proj"
    assert dspark.role("stages.2.mlp.experts") == r.Role(r.DRAFT, r.DSPARK, V4["num_hidden_layers"] + 2, 2)
    v3 = layout_for(V3, engine="sglang")
    assert v3.runtime_prefix("model.layers.61.mlp.experts.0.up_proj.weight") == "model.decoder.mlp.experts"
    assert v3.runtime_prefix("model.layers.61.eh_proj.weight") == "model.eh_proj"
    assert v3.runtime_prefix("model.layers.3.self_attn.q_a_proj.weight") == (
        "model.layers.3.self_attn.fused_qkv_a_proj_with_mqa")  # deepseek_v2.py; vLLM: fused_qkv_a_proj
    assert v3.role("model.decoder.self_attn.o_proj").is_draft
    assert not v3.role("model.layers.3.self_attn.o_proj").is_draft


# --- generic fallback and EAGLE -----------------------------------------------------------

def test_generic_glm4_moe_mtp_is_layer_n():
    layout = layout_for({"model_type": "glm4_moe", "num_hidden_layers": 46, "num_nextn_predict_layers": 1})
    p = layout.place("model.layers.46.mlp.experts.5.gate_proj.weight")
    assert p.runtime_prefix == "model.layers.46.mlp.experts" and p.role.is_draft
    assert layout.runtime_prefix("model.layers.46.shared_head.head.weight") == "model.layers.46.head"
    assert layout.runtime_prefix("model.layers.3.self_attn.k_proj.weight") == "model.layers.3.self_attn.qkv_proj"
    assert not layout.role("model.layers.45.mlp.experts").is_draft


def test_generic_qwen3_next_mtp_keeps_its_mtp_segment():
    layout = layout_for({"model_type": "qwen3_next", "num_hidden_layers": 48, "num_nextn_predict_layers": 1})
    p = layout.place("mtp.layers.0.mlp.experts.3.up_proj.weight")
    assert p.runtime_prefix == "mtp.layers.0.mlp.experts"
    assert p.role == r.Role(r.DRAFT, r.MTP, 48, 0)
    assert layout.role("mtp.fc").is_draft and layout.role("mtp.layers.0.mlp.experts").is_draft
    assert layout.parameter_prefix("mtp.fc.weight") == "model.fc"
    assert not layout.role("model.layers.0.mlp.experts").is_draft


def test_generic_mimo_mtp_layers_renumbered():
    layout = layout_for({"model_type": "mimo", "num_hidden_layers": 36, "num_nextn_predict_layers": 1})
    p = layout.place("model.mtp_layers.0.self_attn.q_proj.weight")
    assert p.runtime_prefix == "model.layers.36.self_attn.qkv_proj"
    assert p.parameter_prefix == "model.mtp_layers.36.self_attn.qkv_proj"
    assert p.role == r.Role(r.DRAFT, r.MTP, 36, 0)


def test_generic_gpt_oss_stacked_experts():
    layout = layout_for({"model_type": "gpt_oss", "num_hidden_layers": 24})
    assert layout.runtime_prefix("model.layers.3.mlp.experts.gate_up_proj_blocks") == "model.layers.3.mlp.experts"
    assert layout.module_kind("model.layers.3.mlp.experts.down_proj_scales") == r.ROUTED_EXPERTS


def test_eagle_drafter_is_all_draft_and_offset_by_the_target():
    target = {"model_type": "llama", "num_hidden_layers": 32}
    layout = layout_for({"model_type": "llama", "num_hidden_layers": 1}, draft_method="eagle3",
                        target_config=target)
    assert isinstance(layout, EagleLayout)
    p = layout.place("midlayer.self_attn.q_proj.weight")
    assert p.runtime_prefix == "model.layers.32.self_attn.qkv_proj"
    assert p.parameter_prefix == "model.layers.0.self_attn.qkv_proj"
    assert layout.runtime_prefix("fc.weight") == "model.fc"
    assert layout.role("lm_head").is_draft and layout.role("model.layers.32.mlp").draft_kind == r.EAGLE


def test_constructor_validation():
    with pytest.raises(ValueError, match="engine"):
        GenericLayout(4, engine="tgi")
    with pytest.raises(ValueError, match="draft kind"):
        GenericLayout(4, 1, "medusa")
    with pytest.raises(ValueError, match=">= 0"):
        GenericLayout(-1)


def test_answers_pass_to_a_layout_differing_only_in_draft_count_when_none_read_the_count():
    """A fix that changes only the draft count (SG301/SG302) re-routes on the answers the layout
    already has: handed over only when no placement or role read the count, else nothing."""
    names = ["model.layers.3.mlp.experts.7.gate_proj", "model.layers.61.eh_proj",
             "model.layers.61.self_attn.q_a_proj", "model.layers.62.mlp.gate", "lm_head"]
    old = DeepseekV3Layout(61, 1)
    for name in names:
        old.place(name), old.role(name)
    new = DeepseekV3Layout(61, 0)
    assert old.alike_but_draft_count(new)
    assert set(old._cache) <= set(new._cache) and set(old._roles) <= set(new._roles)
    fresh = DeepseekV3Layout(61, 0)
    assert [(new.place(n), new.role(n)) for n in names] == [(fresh.place(n), fresh.role(n)) for n in names]
    assert new.num_draft_layers == 0 and list(new.draft_layers) == []
    assert not old.alike_but_draft_count(DeepseekV3Layout(61, 0, fuse_qkv_a=False))  # another setting
    # a DSpark draft layer's attn.wkv feeds context_wkv_proj only below the count: its placement reads it
    dspark = DeepseekV4Layout(43, 3, r.DSPARK)
    dspark.place("mtp.2.attn.wkv")
    fewer = DeepseekV4Layout(43, 2, r.DSPARK)
    assert not dspark.alike_but_draft_count(fewer) and not fewer._cache
    assert dspark.place("mtp.2.attn.wkv") != fewer.place("mtp.2.attn.wkv")
