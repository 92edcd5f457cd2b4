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
