"""The recorded plans as specguard reads them (no vLLM import): lookups by any layer
index, counts as the engine reads them, and the facts the engine model takes from them."""

from __future__ import annotations

import pytest

from specguard import plans
from specguard.engines.vllm.v0_33 import Vllm033
from specguard.layouts import layout_for


def test_every_recorded_plan_reads():
    names = plans.recorded()
    assert "Glm4MoeForCausalLM" in names and "Ernie4_5_MoeForCausalLM" in names
    for name in names:
        p = plans.plan(name)
        assert p is not None and p.target.modules, name
        assert p.target.architecture == name.split("+")[0]


def test_lookup_by_template_any_layer():
    p = plans.plan("Glm4MoeForCausalLM")
    row = p.draft.by_quant_prefix("model.layers.92.head")  # the MTP head: asked as {prefix}.head
    assert row.path == "model.layers.{D}.shared_head.head" and row.layer_class == "ParallelLMHead"
    eh = p.draft.find("model.layers.92.eh_proj")
    assert eh.layer_class == "Linear" and not eh.asks_quant_config  # a plain nn.Linear
    qkv = p.target.find("model.layers.57.self_attn.qkv_proj")
    assert qkv.asks_quant_config and qkv.kind == "linear"
    assert plans.instantiate("model.layers.{D}.self_attn.qkv_proj", "model.layers.92.mtp_block.x") == \
        "model.layers.92.self_attn.qkv_proj"


def test_unknown_names():
    assert plans.plan("NoSuchArchitecture") is None
    assert plans.plan("../_registry") is None and plans.plan("_registry") is None
    assert "DeepseekV3ForCausalLM" in plans.supported_architectures()
    assert "MadeUpForCausalLM" not in plans.supported_architectures()


def test_qwen3_next_draft_count_without_key():
    """qwen3_next_mtp.py reads ``getattr(config, "num_nextn_predict_layers", 1)``: the published
    config has no such key and vLLM builds one MTP layer (SG302 used to call layer 48 undeclared)."""
    p = plans.plan("Qwen3NextForCausalLM")
    if p is None:
        pytest.skip("Qwen3-Next not recorded")
    cfg = {"architectures": ["Qwen3NextForCausalLM"], "model_type": "qwen3_next", "num_hidden_layers": 48}
    assert p.draft_layers(cfg) == 1
    assert list(layout_for(cfg).draft_layers) == [48]
    assert p.draft_layers({**cfg, "num_nextn_predict_layers": 2}) == 2


def test_ernie_mtp_names_through_the_recorded_mapper():
    """ernie_mtp.py: ``model.mtp_block.0.`` -> ``model.layers.{N}.mtp_block.`` (hf_to_vllm_mapper);
    the LlamaDecoderLayer is built with prefix ``model.layers.{N}``; mtp_linear_proj is an nn.Linear."""
    cfg = {"architectures": ["Ernie4_5_MoeForCausalLM"], "model_type": "ernie4_5_moe", "num_hidden_layers": 28,
           "num_nextn_predict_layers": 1}
    layout = layout_for(cfg)
    q = layout.place("model.mtp_block.0.self_attn.q_proj")
    assert q.runtime_prefix == "model.layers.28.self_attn.qkv_proj" and q.role.is_draft
    assert q.parameter_prefix == "model.layers.28.mtp_block.self_attn.qkv_proj"
    assert layout.place("model.mtp_linear_proj.0").runtime_prefix == "model.layers.28.mtp_linear_proj"
    assert layout.place("model.layers.3.self_attn.q_proj").role.name == "main"
    engine = Vllm033(cfg)
    assert engine.built_without_quant_config("model.layers.28.mtp_linear_proj", "linear")
    assert not engine.built_without_quant_config("model.layers.28.self_attn.qkv_proj", "linear")


def test_glm_eh_proj_never_sees_the_quant_config():
    cfg = {"architectures": ["Glm4MoeForCausalLM"], "model_type": "glm4_moe", "num_hidden_layers": 92,
           "num_nextn_predict_layers": 1,
           "quantization_config": {"quant_method": "fp8", "activation_scheme": "dynamic",
                                   "weight_block_size": [128, 128]}}
    engine = Vllm033(cfg)
    assert engine.built_without_quant_config("model.layers.92.eh_proj", "linear")
    assert engine.builds("model.layers.92.eh_proj", kind="linear").method == "UnquantizedLinearMethod"
    assert engine.builds("model.layers.92.self_attn.qkv_proj", kind="linear").method == "Fp8LinearMethod"
    assert engine.builds("model.layers.3.mlp.gate", kind="linear").method == "UnquantizedLinearMethod"


def test_no_plan_is_unknown_not_ok():
    """An architecture vLLM has but no plan (nor family model) covers: nothing is claimed."""
    cfg = {"architectures": ["OlmoeForCausalLM"], "model_type": "olmoe", "num_hidden_layers": 2}
    assert "OlmoeForCausalLM" in plans.supported_architectures() and plans.plan("OlmoeForCausalLM") is None
    got = Vllm033(cfg).builds("model.layers.0.self_attn.qkv_proj", kind="linear")
    assert got.method == "no plan" and got.scheme.format == "unknown"


def _ernie_checkpoint(root, *, fp8_trunk: bool = False):
    """A small ERNIE-4.5 checkpoint in the published layout: one main layer, the MTP block
    under ``model.mtp_*.0`` (names of baidu/ERNIE-4.5-21B-A3B-PT's index)."""
    import json

    import torch
    from safetensors.torch import save_file

    h, i = 32, 64
    names = {"model.embed_tokens.weight": (128, h), "lm_head.weight": (128, h), "model.norm.weight": (h,),
             "model.mtp_emb_norm.0.weight": (h,), "model.mtp_hidden_norm.0.weight": (h,),
             "model.mtp_linear_proj.0.weight": (h, 2 * h)}
    for block in ("model.layers.0", "model.mtp_block.0"):
        for p in ("q_proj", "k_proj", "v_proj", "o_proj"):
            names[f"{block}.self_attn.{p}.weight"] = (h, h)
        for p, shape in (("gate_proj", (i, h)), ("up_proj", (i, h)), ("down_proj", (h, i))):
            names[f"{block}.mlp.{p}.weight"] = shape
        names[f"{block}.input_layernorm.weight"] = (h,)
        names[f"{block}.post_attention_layernorm.weight"] = (h,)
    tensors = {}
    for name, shape in names.items():
        t = torch.zeros(shape, dtype=torch.bfloat16)
        if fp8_trunk and name.startswith("model.layers.0.") and name.endswith("proj.weight"):
            tensors[name] = t.to(torch.float8_e4m3fn)
            tensors[name.removesuffix("weight") + "weight_scale_inv"] = torch.ones(
                (-(-shape[0] // 128), -(-shape[1] // 128)), dtype=torch.float32)
        else:
            tensors[name] = t
    root.mkdir()
    save_file(tensors, str(root / "model.safetensors"))
    cfg = {"architectures": ["Ernie4_5_MoeForCausalLM"], "model_type": "ernie4_5_moe", "num_hidden_layers": 1,
           "num_nextn_predict_layers": 1, "hidden_size": h, "intermediate_size": i, "vocab_size": 128}
    if fp8_trunk:
        cfg["quantization_config"] = {"quant_method": "fp8", "activation_scheme": "dynamic",
                                      "weight_block_size": [128, 128], "ignored_layers": ["re:.*mtp.*"]}
    (root / "config.json").write_text(json.dumps(cfg))
    return root


def test_ernie_bf16_release_is_clean(tmp_path):
    """ernie_mtp.py builds the MTP block as runtime layer N from ``model.mtp_*.0`` names:
    the draft is stored, nothing is missing, nothing to report."""
    from specguard import open_checkpoint
    from specguard.lint import lint
    from specguard.resolve import Resolver

    r = Resolver(open_checkpoint(str(_ernie_checkpoint(tmp_path / "ernie"))))
    routes = r.routes()
    assert {rt.verdict for rt in routes} == {"ok"}, [(rt.prefix, rt.reason) for rt in routes if rt.verdict != "ok"]
    draft = {rt.prefix for rt in routes if rt.role.is_draft}
    assert "model.layers.1.self_attn.qkv_proj" in draft and "model.layers.1.mtp_linear_proj" in draft
    assert not lint([r]).findings


def test_ernie_fp8_trunk_exclusion_by_checkpoint_name_is_dead(tmp_path):
    """``re:.*mtp.*`` names the checkpoint's ``model.mtp_block.0.*``; vLLM asks about
    ``model.layers.{N}.*`` (the plan's quant prefixes), so the entry excludes nothing: the
    MTP block's BF16 linears are built FP8."""
    from specguard import open_checkpoint
    from specguard.lint import lint
    from specguard.resolve import Resolver

    r = Resolver(open_checkpoint(str(_ernie_checkpoint(tmp_path / "ernie", fp8_trunk=True))))
    qkv = r.route("model.layers.1.self_attn.qkv_proj")
    assert qkv.role.is_draft and qkv.verdict == "misrouted" and qkv.vllm.method == "Fp8LinearMethod"
    assert r.route("model.layers.1.mtp_linear_proj").verdict == "ok"  # nn.Linear: no quant config
    codes = {f.code for f in lint([r]).findings}
    assert {"SG101", "SG203"} <= codes


def test_qwen3_next_mtp_without_count_key_is_not_sg302(tmp_path):
    """Qwen/Qwen3-Next-80B-A3B-Instruct-FP8's config has no num_nextn_predict_layers; vLLM
    builds one MTP layer (the plan's count default), which is what ``mtp.layers.0`` stores."""
    import json

    import torch
    from safetensors.torch import save_file

    from specguard import open_checkpoint
    from specguard.lint import lint
    from specguard.resolve import Resolver

    h = 32
    tensors = {f"{root}.{m}.weight": torch.zeros((h, h), dtype=torch.bfloat16)
               for root in ("model.layers.0", "mtp.layers.0")
               for m in ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj")}
    tensors["mtp.fc.weight"] = torch.zeros((h, 2 * h), dtype=torch.bfloat16)
    (tmp_path / "q").mkdir()
    save_file(tensors, str(tmp_path / "q" / "model.safetensors"))
    (tmp_path / "q" / "config.json").write_text(json.dumps(
        {"architectures": ["Qwen3NextForCausalLM"], "model_type": "qwen3_next", "num_hidden_layers": 1}))
    r = Resolver(open_checkpoint(str(tmp_path / "q")))
    assert list(r.layout.draft_layers) == [1]
    assert "SG302" not in {f.code for f in lint([r]).findings}


def test_deepseek_v32_indexer_as_a_cuda_server_builds_it():
    """models/deepseek_v32/nvidia/: the indexer's ``wq_b`` asks the quant config, its fused
    ``wk_weights_proj`` is built with quant_config=None; the MTP draft is DeepseekV32MTP. CPU
    builds deepseek_v2.py's classes (no indexer): the plan answers for cuda only."""
    p = plans.plan("DeepseekV32ForCausalLM")
    assert p is not None and p.device == "cuda" and p.answers_for("cuda") and not p.answers_for("cpu")
    assert p.target.model_class.endswith("deepseek_v32.nvidia.model.DeepseekV32ForCausalLM")
    wq_b = p.target.find("model.layers.40.self_attn.indexer.wq_b")
    assert wq_b is not None and wq_b.asks_quant_config
    wk = p.target.by_path("model.layers.40.self_attn.indexer.wk_weights_proj")
    assert wk is not None and not wk.asks_quant_config
    assert p.draft is not None and p.draft.architecture == "DeepseekV32MTPModel"
    assert p.draft_layers({"num_nextn_predict_layers": 1}) == 1
    assert p.draft.find("model.layers.61.eh_proj").layer_class == "Linear"


def test_qwen3_5_mtp_asks_under_mtp_names():
    """qwen3_5_mtp.py builds the draft's layers under ``model.layers.{d}`` but asks the quant config
    as ``mtp.layers.{d}.*`` / ``mtp.fc``; the count is ``mtp_num_hidden_layers``; the target's
    mapper drops ``mtp.`` (the target never loads the draft)."""
    for name in ("Qwen3_5ForConditionalGeneration", "Qwen3_5MoeForConditionalGeneration"):
        p = plans.plan(name)
        assert p is not None and p.draft is not None and p.device is None, name
        assert p.draft_count_keys == ("mtp_num_hidden_layers",)
        assert p.draft_layers({"mtp_num_hidden_layers": 1}) == 1
        assert p.draft.by_quant_prefix("mtp.fc").path == "model.fc"
        assert p.draft.by_quant_prefix("mtp.layers.0.self_attn.qkv_proj").path == "model.layers.{d}.self_attn.qkv_proj"
        assert p.target.mapper["prefix"]["mtp."] is None
        assert p.target.find("language_model.model.layers.7.linear_attn.in_proj_qkvz").asks_quant_config
        assert not p.target.by_path("language_model.model.layers.7.linear_attn.conv1d").asks_quant_config
        assert p.target.by_quant_prefix("visual.blocks.0.attn.qkv") is not None  # the vision tower asks too
    moe = plans.plan("Qwen3_5MoeForConditionalGeneration")
    assert moe.draft.by_quant_prefix("mtp.layers.0.mlp.experts").layer_class == "RoutedExperts"


def test_deepseek_v41_dspark_as_a_cuda_server_builds_it():
    """deepseek_v41/nvidia/: the target is the VL wrapper (``language_model.model.*``); engram's
    table is built without the quant config, its ``wkv`` asks; the DSpark draft asks its stages as
    runtime layers N+k and ``model.main_proj``; the Markov head never asks."""
    p = plans.plan("DeepseekV41ForCausalLM+DSparkV41DraftModel")
    assert p is not None and p.device == "cuda" and p.draft_method == "dspark"
    assert p.target.by_path("language_model.model.layers.1.engram.embed_tokens").quant_prefix is None
    assert p.target.find("language_model.model.layers.1.engram.wkv").asks_quant_config
    assert p.draft.architecture == "DSparkV41DraftModel"
    assert p.draft.by_quant_prefix("model.main_proj").path == "model.main_proj"
    assert p.draft.by_quant_prefix("model.layers.43.ffn.experts").path == "model.layers.{d}.ffn.experts.routed_experts"
    assert not p.draft.by_path("model.markov_head.markov_w2").asks_quant_config


def test_bailing_v2_5_mtp():
    """bailing_moe_linear.py / bailing_moe_mtp.py: ``word_embeddings`` is built without the quant
    config, the MTP's ``eh_proj`` is a plain nn.Linear, its head asks as ``shared_head.head``."""
    p = plans.plan("BailingMoeV2_5ForCausalLM")
    assert p is not None and p.draft is not None and p.draft.architecture == "BailingMoeV25MTPModel"
    assert not p.target.by_path("model.word_embeddings").asks_quant_config
    assert p.target.find("model.layers.9.self_attn.query_key_value").asks_quant_config
    assert p.draft.find("model.layers.20.eh_proj").layer_class == "Linear"
    assert p.draft.find("model.layers.20.shared_head.head").layer_class == "ParallelLMHead"
    assert p.draft_layers({"num_nextn_predict_layers": 1}) == 1


def test_vllm_032_records_the_same_builds():
    """vLLM 0.32 builds DeepSeek-V3.2 and Qwen3.5/3.6 (and their MTP) as 0.33 does (docs/engines.md)."""
    for name in ("DeepseekV32ForCausalLM", "Qwen3_5ForConditionalGeneration", "Qwen3_5MoeForConditionalGeneration"):
        old, new = plans.plan(name, "vllm-0.32"), plans.plan(name, "vllm-0.33")
        assert old is not None and new is not None, name
        assert (old.target, old.draft, old.recorded_with) == (new.target, new.draft, new.recorded_with)
    assert plans.plan("DeepseekV41ForCausalLM+DSparkV41DraftModel", "vllm-0.32") is None  # 0.33 only


def test_not_recorded_architectures_route_unknown():
    """Every architecture recorder.NOT_RECORDED names has no plan and no family model: its layers
    route ``unknown`` (method "no plan"), never ok."""
    recorder = pytest.importorskip("specguard.engines.vllm.recorder")
    targets = {name for name in recorder.NOT_RECORDED if "+" not in name}
    assert targets and not (set(recorder.NOT_RECORDED) & set(plans.recorded()))
    for arch in targets:
        cfg = {"architectures": [arch], "model_type": "x", "num_hidden_layers": 2}
        got = Vllm033(cfg).builds("model.layers.0.self_attn.qkv_proj", kind="linear")
        assert (got.method, got.scheme.format) == ("no plan", "unknown"), arch
