"""parse_declared: each stack's claims per module, with the config key that decided."""

from __future__ import annotations

import pytest

from specguard.declared import (
    CompressedTensorsDeclared,
    Fp8Declared,
    ModelOptDeclared,
    parse_declared,
)
from specguard.formats import scheme as s
from specguard.layouts import layout_for

N = 43
V4_BASE = {"model_type": "deepseek_v4", "num_hidden_layers": N, "num_nextn_predict_layers": 1,
           "expert_dtype": "fp4", "torch_dtype": "bfloat16"}
V4_QC = {"quant_method": "fp8", "fmt": "e4m3", "scale_fmt": "ue8m0", "activation_scheme": "dynamic",
         "weight_block_size": [128, 128]}
S1 = {**V4_BASE, "quantization_config": {**V4_QC, "moe_quant_algo": "NVFP4", "ignored_layers": ["mtp.*"]}}
S2 = {**V4_BASE, "quantization_config": {
    "quant_method": "compressed-tensors", "format": "nvfp4-pack-quantized",
    "ignore": [r"re:.*mtp\..*", "lm_head", "head"],
    "config_groups": {
        "experts": {"targets": [r"re:.*ffn\.experts.*"],
                    "weights": {"num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16}},
        "attention": {"targets": ["Linear"],
                      "weights": {"num_bits": 8, "type": "float", "strategy": "block", "block_structure": [128, 128]}},
    }}}
S3 = {**V4_BASE, "quantization_config": dict(V4_QC)}


def claim(config, name, kind, hf=None):
    return parse_declared(config, hf).scheme_for(name, kind=kind)


def test_s1_global_moe_switch_declares_draft_experts_nvfp4():
    """The dead ``mtp.*`` leaves the draft experts under the global NVFP4 switch."""
    d = parse_declared(S1)
    assert isinstance(d, Fp8Declared) and d.stack == "deepseek_v4_fp8"
    for name in ("mtp.0.ffn.experts.7.w1", "model.layers.43.ffn.experts", "layers.3.ffn.experts.0.w2"):
        c = d.scheme_for(name, kind="routed_experts")
        assert c.scheme.format == s.NVFP4 and c.source == "quantization_config.moe_quant_algo=NVFP4"
        assert c.scheme.group_size == 16 and c.scheme.convention == s.MODELOPT
    e_proj = d.scheme_for("mtp.0.e_proj", kind="linear").scheme
    assert (e_proj.format, e_proj.block, e_proj.scale_dtype) == (s.FP8_BLOCK, (128, 128), "F8_E8M0")
    assert not d.scheme_for("head", kind="head").quantized
    assert [x.text for x in d.exclusions] == ["mtp.*"]


def test_s1_remedy_modelopt_style_ignore_declares_draft_experts_native_mxfp4():
    cfg = {**S1, "quantization_config": {**S1["quantization_config"], "ignore": ["mtp.*"]}}
    d = parse_declared(cfg)
    for name in ("mtp.0.ffn.experts.7.w1", "model.layers.43.ffn.experts", "layers.43.ffn.experts"):
        c = d.scheme_for(name, kind="routed_experts")
        assert c.scheme.format == s.MXFP4 and c.pattern is not None and c.pattern.text == "mtp.*"
        assert c.source == "quantization_config.ignore[0] 'mtp.*' (fnmatchcase)"
    assert d.scheme_for("model.layers.42.ffn.experts", kind="routed_experts").scheme.format == s.NVFP4


def test_ignored_layers_entry_matching_a_runtime_prefix_declares_bf16():
    qc = {**S1["quantization_config"], "ignored_layers": ["model.layers.43.ffn.experts"]}
    cfg = {**S1, "quantization_config": qc}
    c = claim(cfg, "model.layers.43.ffn.experts", "routed_experts")
    assert c.scheme.format == s.BF16 and "ignored_layers[0]" in c.source


def test_modules_to_not_convert_is_the_fp8_fallback_list():
    cfg = {**S3, "quantization_config": {**V4_QC, "modules_to_not_convert": ["model.layers.0.attn.wq_b"]}}
    c = claim(cfg, "model.layers.0.attn.wq_b", "linear")
    assert not c.quantized and "modules_to_not_convert[0]" in c.source


def test_s3_native_v4_declares_mxfp4_experts_and_e8m0_block_linears():
    d = parse_declared(S3)
    assert d.scheme_for("mtp.0.ffn.experts.1.w3", kind="routed_experts").scheme.format == s.MXFP4
    assert d.scheme_for("layers.0.attn.wo_a", kind="linear").scheme.scale_dtype == "F8_E8M0"
    flash_base = {**S3, "expert_dtype": "fp8", "quantization_config": {**V4_QC, "scale_fmt": None}}
    d = parse_declared(flash_base)
    experts = d.scheme_for("layers.0.ffn.experts.1.w3", kind="routed_experts").scheme
    assert (experts.format, experts.scale_dtype) == (s.FP8_BLOCK, "F32")


def test_v4_scale_fmt_contradicting_expert_dtype_is_noted():
    cfg = {**S3, "expert_dtype": "fp8"}
    assert any("expert_dtype" in n for n in parse_declared(cfg).notes)


def test_v41_mxfp8_linears():
    cfg = {**V4_BASE, "model_type": "deepseek_v41", "quantization_config": {**V4_QC, "weight_block_size": [32, 32]}}
    sch = claim(cfg, "layers.0.attn.wq_b", "linear").scheme
    assert (sch.format, sch.group_size) == (s.MXFP8, 32)


def test_plain_fp8_config_per_tensor_and_block():
    cfg = {"model_type": "llama", "num_hidden_layers": 4,
           "quantization_config": {"quant_method": "fp8", "activation_scheme": "static"}}
    assert claim(cfg, "model.layers.0.self_attn.q_proj", "linear").scheme.format == s.FP8_TENSOR
    cfg["quantization_config"] = {"quant_method": "fp8", "activation_scheme": "dynamic",
                                  "weight_block_size": [128, 128]}
    d = parse_declared(cfg)
    assert d.stack == "fp8"
    assert d.scheme_for("model.layers.0.mlp.experts", kind="routed_experts").scheme.scale_dtype == "F32"


def test_s2_compressed_tensors_draft_tower_bf16_by_checkpoint_name_only():
    d = parse_declared(S2)
    assert isinstance(d, CompressedTensorsDeclared)
    layout = layout_for(S2)
    for name, kind in [("mtp.0.ffn.experts.3.w1", "routed_experts"), ("mtp.0.attn.wq_a", "linear"),
                       ("mtp.0.e_proj", "linear")]:
        by_name = d.scheme_for(name, kind=kind)
        assert by_name.scheme.format == s.BF16 and by_name.pattern.text == r"re:.*mtp\..*"
        by_prefix = d.scheme_for(layout.runtime_prefix(name), kind=kind)
        assert by_prefix.quantized, "the re: entry never reaches the runtime prefix"
    assert d.scheme_for("layers.1.ffn.experts.0.w1", kind="routed_experts").scheme.format == s.NVFP4
    linear = d.scheme_for("layers.1.attn.wo_b", kind="linear")
    assert linear.scheme.format == s.FP8_BLOCK and "'Linear'" in linear.source
    assert not d.scheme_for("head", kind="head").quantized
    assert not d.scheme_for("embed", kind="embedding").quantized


def test_compressed_tensors_exact_targets_beat_regex_beat_classes():
    cfg = {"model_type": "llama", "num_hidden_layers": 2, "quantization_config": {
        "quant_method": "compressed-tensors", "format": "pack-quantized", "config_groups": {
            "a": {"targets": ["Linear"], "weights": {"num_bits": 4, "type": "int", "strategy": "group",
                                                     "group_size": 128}},
            "b": {"targets": ["re:.*down_proj"], "weights": {"num_bits": 8, "type": "int", "strategy": "channel"}},
            "c": {"targets": ["model.layers.0.mlp.down_proj"], "weights": {"num_bits": 8, "type": "float",
                                                                           "strategy": "tensor"}},
        }}}
    d = parse_declared(cfg)
    assert d.scheme_for("model.layers.0.mlp.down_proj", kind="linear").scheme.format == s.FP8_TENSOR
    assert d.scheme_for("model.layers.1.mlp.down_proj", kind="linear").scheme.format == s.INT8_CHANNEL
    int4 = d.scheme_for("model.layers.1.mlp.up_proj", kind="linear").scheme
    assert (int4.format, int4.group_size, int4.pack_axis) == (s.INT4_GROUP, 128, 1)
    assert not d.scheme_for("model.embed_tokens", kind="embedding").quantized


@pytest.mark.parametrize("form", ["hf_quant_config", "config.json"])
def test_modelopt_both_forms(form):
    body = {"quant_algo": "NVFP4", "group_size": 16, "exclude_modules": ["lm_head", "mtp*"]}
    if form == "hf_quant_config":
        cfg, hf = {"model_type": "qwen3_next", "num_hidden_layers": 48}, {"producer": {"name": "modelopt"},
                                                                           "quantization": body}
    else:
        cfg, hf = {"model_type": "qwen3_next", "num_hidden_layers": 48,
                   "quantization_config": {"quant_method": "modelopt", **body}}, None
    d = parse_declared(cfg, hf)
    assert isinstance(d, ModelOptDeclared) and d.quant_algo == "NVFP4"
    assert d.scheme_for("model.layers.3.mlp.experts", kind="routed_experts").scheme.format == s.NVFP4
    assert not d.scheme_for("lm_head", kind="head").quantized
    assert not d.scheme_for("mtp.layers.0.mlp.experts", kind="routed_experts").quantized
    assert not d.scheme_for("mtp.fc", kind="linear").quantized  # "mtp*" -> "mtp" substring


def test_modelopt_quantizes_lm_head_unless_excluded():
    hf = {"quantization": {"quant_algo": "FP8", "exclude_modules": []}}
    c = claim({"model_type": "llama", "num_hidden_layers": 2}, "lm_head", "head", hf)
    assert c.scheme.format == s.FP8_TENSOR and "lm_head" in c.source


def test_config_json_wins_over_hf_quant_config():
    cfg = {**S3}
    d = parse_declared(cfg, {"quantization": {"quant_algo": "NVFP4"}})
    assert d.stack == "deepseek_v4_fp8" and any("hf_quant_config.json" in n for n in d.notes)


def test_modelopt_mixed_precision():
    hf = {"quantization": {"quant_algo": "MIXED_PRECISION", "quantized_layers": {
        "model.layers.0.self_attn.q_proj": {"quant_algo": "FP8"},
        "model.layers.0.self_attn.k_proj": {"quant_algo": "FP8"},
        "model.layers.0.mlp.experts.0.gate_proj": {"quant_algo": "NVFP4", "group_size": 16},
    }}}
    d = parse_declared({"model_type": "qwen3_moe", "num_hidden_layers": 1}, hf)
    assert d.scheme_for("model.layers.0.self_attn.q_proj", kind="linear").scheme.format == s.FP8_TENSOR
    assert d.scheme_for("model.layers.0.self_attn.qkv_proj", kind="linear").scheme.format == s.FP8_TENSOR
    experts = d.scheme_for("model.layers.0.mlp.experts", kind="routed_experts")
    assert experts.scheme.format == s.NVFP4 and "quantized_layers" in experts.source
    assert not d.scheme_for("model.layers.0.self_attn.o_proj", kind="linear").quantized


def test_transformers_mxfp4_only_experts():
    cfg = {"model_type": "gpt_oss", "num_hidden_layers": 24, "quantization_config": {
        "quant_method": "mxfp4", "modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.3.mlp"]}}
    d = parse_declared(cfg)
    assert d.scheme_for("model.layers.0.mlp.experts", kind="routed_experts").scheme.format == s.MXFP4
    assert not d.scheme_for("model.layers.3.mlp.experts", kind="routed_experts").quantized
    assert not d.scheme_for("model.layers.0.self_attn.q_proj", kind="linear").quantized


def test_gptq_dynamic_and_modules_in_block():
    cfg = {"model_type": "llama", "num_hidden_layers": 4, "quantization_config": {
        "quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": False, "sym": True,
        "dynamic": {r"-:model\.layers\.0\..*": {}, r"+:.*down_proj": {"bits": 8, "group_size": 64}},
        "modules_in_block_to_quantize": [["self_attn.q_proj", "mlp.down_proj"]]}}
    d = parse_declared(cfg)
    assert not d.scheme_for("model.layers.0.self_attn.q_proj", kind="linear").quantized
    q = d.scheme_for("model.layers.1.self_attn.q_proj", kind="linear").scheme
    assert (q.format, q.group_size, q.convention, q.pack_axis) == (s.INT4_GROUP, 128, s.GPTQ, 0)
    down = d.scheme_for("model.layers.1.mlp.down_proj", kind="linear").scheme
    assert (down.format, down.group_size) == (s.INT8_GROUP, 64)
    assert not d.scheme_for("model.layers.1.self_attn.o_proj", kind="linear").quantized
    assert not d.scheme_for("lm_head", kind="head").quantized


def test_awq_substring_exclusions():
    cfg = {"model_type": "llama", "num_hidden_layers": 4, "quantization_config": {
        "quant_method": "awq", "w_bit": 4, "q_group_size": 128, "zero_point": True,
        "modules_to_not_convert": ["visual"]}}
    d = parse_declared(cfg)
    assert d.scheme_for("model.layers.0.mlp.up_proj", kind="linear").scheme.pack_axis == 1
    assert not d.scheme_for("model.visual.blocks.0.proj", kind="linear").quantized


def test_no_quantization_config_declares_the_float_dtype():
    d = parse_declared({"model_type": "llama", "num_hidden_layers": 2, "torch_dtype": "float16"})
    assert d.stack == "none"
    assert d.scheme_for("model.layers.0.mlp.up_proj", kind="linear").scheme.format == s.FP16


def test_unknown_quant_method_says_so():
    d = parse_declared({"model_type": "llama", "num_hidden_layers": 2,
                        "quantization_config": {"quant_method": "bitsandbytes"}})
    assert not d.understood
    c = d.scheme_for("model.layers.0.mlp.up_proj", kind="linear")
    assert c.scheme.format == s.UNKNOWN and "bitsandbytes" in c.scheme.reason


def test_norms_are_never_quantized_and_kinds_are_checked():
    d = parse_declared(S1)
    assert not d.scheme_for("layers.0.attn_norm", kind="norm").quantized
    with pytest.raises(ValueError, match="kind"):
        d.scheme_for("layers.0.attn.wq_a", kind="attention")
