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
