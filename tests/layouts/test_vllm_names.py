"""Differential: our parameter paths == the ones vLLM 0.33's own renaming code yields.

vLLM's ``load_weights`` turns a checkpoint name into a parameter name in three
steps: a model-specific rename (the functions called below, vLLM's own code),
the shared-expert ``w2`` rename, the stacked-shard table and the expert table.
The middle two are literals inside ``load_weights`` and are copied here; the
expert table comes from ``RoutedExperts.build_expert_params_mapping``.

vLLM is imported unconditionally: CI installs 0.33 (scripts/test.sh), and a
missing vLLM must fail these tests, not skip them.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import vllm.model_executor.models.utils as vllm_utils
from hypothesis import given, settings
from hypothesis import strategies as st
from vllm.model_executor.layers.fused_moe.routed_experts import RoutedExperts
from vllm.models.deepseek_v4.nvidia.dspark import DSparkDeepseekV4ForCausalLM
from vllm.models.deepseek_v4.nvidia.model import _make_deepseek_v4_weights_mapper
from vllm.models.deepseek_v4.nvidia.mtp import DeepSeekV4MTP
from vllm.models.deepseek_v41.nvidia.vl_model import _make_deepseek_v4_vl_weights_mapper

from specguard.layouts import layout_for

# DeepseekV4Model.load_weights / DeepSeekV4MTP.load_weights ``stacked_params_mapping``.
STACKED = [("gate_up_proj", "w1"), ("gate_up_proj", "w3"),
           ("attn.fused_wqa_wkv", "attn.wq_a"), ("attn.fused_wqa_wkv", "attn.wkv"),
           ("compressor.fused_wkv_wgate", "compressor.wkv"),
           ("compressor.fused_wkv_wgate", "compressor.wgate")]
EXPERTS = RoutedExperts.build_expert_params_mapping("w1", "w2", "w3", num_experts=8)
# DeepSeekV4MTP.load_weights ``WEIGHT_NAME_REMAPPING``.
MTP_REMAP = {".emb.tok_emb.weight": ".embed_tokens.weight", ".head.weight": ".shared_head.head.weight",
             ".norm.weight": ".shared_head.norm.weight"}

BLOCK = st.sampled_from([
    "attn.wq_a.weight", "attn.wkv.weight", "attn.wq_b.weight", "attn.wo_a.weight", "attn.wo_b.scale",
    "attn.compressor.wkv.weight", "attn.compressor.wgate.weight", "attn.indexer.wq_b.weight",
    "ffn.shared_experts.w1.weight", "ffn.shared_experts.w2.scale", "ffn.shared_experts.w3.weight",
    "ffn.experts.{e}.w1.weight", "ffn.experts.{e}.w2.scale", "ffn.experts.{e}.w3.weight",
    "attn_norm.weight", "ffn.gate.weight",
])
E = st.integers(0, 7)


def _stack_and_experts(name: str) -> str:
    # MTP/DSpark load_weights: ``.shared_experts.w2`` -> ``.shared_experts.down_proj``.
    name = name.replace(".shared_experts.w2", ".shared_experts.down_proj")
    if ".experts." in name and ".shared_experts." not in name:
        for param, weight, _, _ in EXPERTS:
            if weight in name:
                return name.replace(weight, param)
        raise AssertionError(name)
    for param, weight in STACKED:
        if weight in name:
            return name.replace(weight, param)
    return name


def _module(param_name: str) -> str:
    return param_name.rsplit(".", 1)[0]


def _under(param_name: str, prefix: str) -> bool:
    return param_name == prefix or param_name.startswith(prefix + ".")


@settings(max_examples=120, deadline=None)
@given(n=st.integers(1, 200), block=BLOCK, e=E)
def test_main_model_parameter_paths(n, block, e):
    layer = n - 1
    name = f"layers.{layer}." + block.format(e=e)
    mapped = _make_deepseek_v4_weights_mapper("fp4").map_name(name)
    vllm_param = _stack_and_experts(mapped)
    layout = layout_for({"model_type": "deepseek_v4", "num_hidden_layers": n, "num_nextn_predict_layers": 1})
    assert _under(vllm_param, layout.parameter_prefix(name)), (vllm_param, layout.parameter_prefix(name))


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 200), block=BLOCK, e=E)
def test_v41_main_model_parameter_paths(n, block, e):
    """V4.1's registry class is the VL wrapper: the decoder sits under ``language_model.model``."""
    name = f"layers.{n - 1}." + block.format(e=e)
    mapped = _make_deepseek_v4_vl_weights_mapper("fp4", "weight_scale_inv").map_name(name)
    vllm_param = _stack_and_experts(mapped)
    layout = layout_for({"model_type": "deepseek_v41", "num_hidden_layers": n, "num_nextn_predict_layers": 3})
    assert _under(vllm_param, layout.parameter_prefix(name)), (vllm_param, layout.parameter_prefix(name))


@pytest.mark.parametrize(("name", "param"), [
    ("embed.weight", "model.embed_tokens.weight"), ("head.weight", "lm_head.weight"),
    ("norm.weight", "model.norm.weight"), ("hc_head_fn", "model.hc_head_fn"),
])
def test_main_model_top_level_names(name, param):
    assert _make_deepseek_v4_weights_mapper("fp4").map_name(name) == param
    layout = layout_for({"model_type": "deepseek_v4", "num_hidden_layers": 4})
    assert _under(param, layout.parameter_prefix(name))


@settings(max_examples=120, deadline=None)
@given(n=st.integers(1, 200), k=st.integers(1, 3), data=st.data(), e=E,
       block=st.one_of(BLOCK, st.sampled_from(["e_proj.weight", "h_proj.scale", "enorm.weight",
                                               "hc_head_fn", "head.weight", "norm.weight"])))
def test_mtp_parameter_paths(n, k, data, e, block):
    i = data.draw(st.integers(0, k - 1))
    name = f"mtp.{i}." + block.format(e=e)
    mtp = SimpleNamespace(config=SimpleNamespace(num_hidden_layers=n, num_nextn_predict_layers=k))
    spec_name = DeepSeekV4MTP._to_spec_layer_name(mtp, name)
    spec_layer = vllm_utils.get_spec_layer_idx_from_weight_name(mtp.config, spec_name)
    assert spec_layer == n + i
    for old, new in MTP_REMAP.items():
        spec_name = spec_name.replace(old, new)
    vllm_param = _stack_and_experts(DeepSeekV4MTP._rewrite_spec_layer_name(mtp, spec_layer, spec_name))
    layout = layout_for({"model_type": "deepseek_v4", "num_hidden_layers": n, "num_nextn_predict_layers": k})
    assert _under(vllm_param, layout.parameter_prefix(name)), (vllm_param, layout.parameter_prefix(name))


@settings(max_examples=120, deadline=None)
@given(n=st.integers(1, 200), k=st.integers(1, 4), data=st.data(), e=E,
       block=st.one_of(BLOCK, st.sampled_from(["main_proj.weight", "main_norm.weight", "norm.weight",
                                               "hc_head_scale", "markov_head.markov_w1.weight"])))
def test_dspark_parameter_paths(n, k, data, e, block):
    i = data.draw(st.integers(0, k - 1))
    name = f"mtp.{i}." + block.format(e=e)
    dspark = SimpleNamespace(model=SimpleNamespace(confidence_head=object()))
    remapped = DSparkDeepseekV4ForCausalLM._remap_dspark_name(dspark, name)
    is_layer = remapped.startswith("model.layers.")
    vllm_param = _stack_and_experts(remapped) if is_layer or ".experts." in remapped else remapped
    layout = layout_for({"model_type": "deepseek_v4", "num_hidden_layers": n, "n_mtp_layers": k},
                        draft_method="dspark")
    assert _under(vllm_param, layout.parameter_prefix(name)), (vllm_param, layout.parameter_prefix(name))


def test_vllm_extract_layer_index_cannot_read_expert_prefixes():
    """Why specguard has its own ``layer_index`` (docs/names.md)."""
    from specguard.layouts import layer_index

    with pytest.raises(AssertionError):
        vllm_utils.extract_layer_index("model.layers.43.ffn.experts.12")
    assert layer_index("model.layers.43.ffn.experts.12") == 43
    assert vllm_utils.extract_layer_index("model.layers.43.ffn.experts") == 43
