"""Hand-edited or hostile quantization configs: one CheckpointError or a normal result, never a crash."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specguard.checkpoint import CheckpointError, open_checkpoint
from specguard.lint import lint
from specguard.resolve import Resolver

KEYS = ["quant_method", "quant_algo", "moe_quant_algo", "ignored_layers", "ignore", "exclude_modules",
        "config_groups", "targets", "weights", "num_bits", "group_size", "bits", "weight_block_size",
        "format", "scale_fmt", "expert_dtype", "quantization", "quantized_layers", "modules_to_not_convert",
        "strategy", "type", "activation_scheme", "fmt", "dynamic", "sym", "block_structure"]
METHODS = ["fp8", "deepseek_v4_fp8", "modelopt", "compressed-tensors", "mxfp4", "gptq", "awq", "weird"]
leaf = (st.none() | st.booleans() | st.integers(-3, 300) | st.sampled_from([*METHODS, "NVFP4", "mtp.*", "Linear"])
        | st.text(max_size=6))
values = st.recursive(leaf, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(KEYS), inner,
                                                                                        max_size=4), max_leaves=12)
configs = st.fixed_dictionaries({"quant_method": st.sampled_from(METHODS)},
                                optional={k: values for k in KEYS[1:]})


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(qc=configs | values)
def test_any_quantization_config_is_bad_input_or_a_result(scenarios, qc):
    ckpt = open_checkpoint(scenarios["s1"].path)
    hostile = dataclasses.replace(ckpt, config={**ckpt.config, "quantization_config": qc})
    try:
        r = Resolver(hostile)
        r.routes()
        lint([r])
    except CheckpointError as e:
        assert "\n" not in str(e)


@pytest.mark.parametrize("edit", [
    {"num_hidden_layers": -1}, {"num_nextn_predict_layers": -2}, {"num_nextn_predict_layers": 10**9},
    {"num_hidden_layers": "two"}, {"model_type": 5}, {"text_config": 3}, {"dspark_target_layer_ids": "x"},
])
def test_hostile_model_config(scenarios, edit):
    ckpt = open_checkpoint(scenarios["s1"].path)
    hostile = dataclasses.replace(ckpt, config={**ckpt.config, **edit})
    try:
        lint([Resolver(hostile)])  # must return quickly: no enumeration of a billion layers
    except CheckpointError as e:
        assert "config.json" in str(e)
