"""vllm033_gptq: what vLLM 0.33's AutoGPTQConfig builds, compared with its real
``get_quant_method`` on generated ``dynamic`` rules, module lists and prefixes.

The real method runs unchanged (``from_config``, ``get_dynamic_override``,
``is_layer_gptq_quantized``, ``override_config``); only the constructors of the
method classes it returns are recorders (on a CPU box kernel selection fails) and
the Marlin MoE support check answers yes (a kernel-availability question).
"""

from __future__ import annotations

from types import SimpleNamespace as NS

import pytest
import vllm.model_executor.layers.quantization.auto_gptq as ag
import vllm.model_executor.layers.quantization.utils.gptq_utils as gu
from hypothesis import given, settings
from hypothesis import strategies as st
from vllm.config import set_current_vllm_config

from specguard.engines.vllm.gptq import gptq_builds
from specguard.engines.vllm.int_group import ShardsDisagree, modules_by_dtype
from specguard.engines.vllm.v0_33 import MTP_MODEL, Vllm033
from tests.engines.layers import bare_layer

PACKED = {"qkv_proj": ["q_proj", "k_proj", "v_proj"], "gate_up_proj": ["gate_proj", "up_proj"]}
METHODS = ("AutoGPTQLinearMethod", "AutoGPTQMoEMethod")


@pytest.fixture(scope="module", autouse=True)
def recorders():
    with pytest.MonkeyPatch.context() as mp:
        for name in METHODS:
            mp.setattr(ag, name, type(name, (), {"__init__": lambda self, c, *a: setattr(self, "cfg", c)}))
        mp.setattr(ag, "UnquantizedFusedMoEMethod", type("U", (), {"__init__": lambda self, *a: None}))
        for name in ("UnquantizedLinearMethod", "UnquantizedEmbeddingMethod"):
            mp.setattr(gu, name, type(name, (), {"__init__": lambda self, *a: None}))
        mp.setattr(ag, "check_moe_marlin_supports_layer", lambda *a, **k: True)
        yield


def real(qc: dict, prefix: str, kind: str, layers: list[str]) -> tuple:
    cfg = ag.AutoGPTQConfig.from_config(dict(qc))
    cfg.modules_in_block_to_quantize = list(layers)
    cfg.packed_modules_mapping = PACKED
    try:
        with set_current_vllm_config(NS(model_config=None)):
            m = cfg.get_quant_method(bare_layer(kind), prefix)
    except ValueError:
        return ("ValueError",)
    if type(m).__name__ in METHODS:
        return (True, m.cfg.weight_bits, m.cfg.group_size)
    return (False,)


def ours(qc: dict, prefix: str, kind: str, layers: list[str]) -> tuple:
    try:
        d = gptq_builds(qc, prefix, kind, layers, PACKED)
    except ShardsDisagree:
        return ("ValueError",)
    return (True, d.bits, d.group_size) if d.quantized else (False,)


RULES = st.sampled_from([
    "-:.*mtp.*", "+:.*mtp.*", "+:.*mtp\\.fc.*", "-:.*mtp\\.fc.*", "-:.*attn.*", "-:.*shared_expert.*",
    ".*experts.*", "+:.*layers\\.0\\..*", "-:.*visual.*", "-:mtp\\.layers\\.0\\.mlp\\.experts",
])
VALUES = st.sampled_from([{}, {"bits": 8}, {"bits": 4, "group_size": 64}, {"group_size": 32}])
PREFIXES = st.sampled_from([
    ("mtp.fc", "linear"), ("mtp.layers.0.self_attn.qkv_proj", "linear"),
    ("mtp.layers.0.mlp.experts", "routed_experts"), ("mtp.layers.0.mlp.shared_expert.gate_up_proj", "linear"),
    ("mtp.layers.0.mlp.down_proj", "linear"), ("language_model.model.layers.0.mlp.experts", "routed_experts"),
    ("language_model.model.layers.3.self_attn.o_proj", "linear"), ("lm_head", "head"),
])
LAYERS = st.lists(st.sampled_from([
    "mtp.fc", "mtp.layers.0.self_attn.q_proj", "mtp.layers.0.self_attn.k_proj", "mtp.layers.0.self_attn.v_proj",
    "mlp.down_proj", "language_model.model.layers.3.self_attn.o_proj", "mtp.layers.0.mlp.shared_expert.gate_proj",
    "mtp.layers.0.mlp.shared_expert.up_proj", "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
]), max_size=5)


@settings(max_examples=400, deadline=None)
@given(rules=st.dictionaries(RULES, VALUES, max_size=4), where=PREFIXES, layers=LAYERS, lm_head=st.booleans())
def test_builds_equals_vllm_get_quant_method(rules, where, layers, lm_head):
    qc = {"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": False, "sym": True,
          "dynamic": rules, "lm_head": lm_head}
    assert ours(qc, *where, layers) == real(qc, *where, layers), (rules, where, layers)


def test_first_match_wins_and_positive_rules_do_not_beat_the_header_scan():
    qc = {"bits": 4, "group_size": 128, "dynamic": {"+:.*mtp.*": {"group_size": 64}, "-:.*mtp.*": {}}}
    # the positive rule comes first: the later negative one never applies
    assert ours(qc, "mtp.layers.0.mlp.experts", "routed_experts", []) == (True, 4, 64)
    # a linear no quantized tensor names stays unquantized whatever the rule says
    layers, _ = modules_by_dtype({"mtp.fc.weight": "BF16", "model.layers.0.mlp.down_proj.qweight": "I32"})
    assert layers == ["model.layers.0.mlp.down_proj"]
    assert ours(qc, "mtp.fc", "linear", layers) == (False,)


QWEN = {"architectures": ["Qwen3_5MoeForConditionalGeneration"], "model_type": "qwen3_5_moe",
        "text_config": {"model_type": "qwen3_5_moe_text", "num_hidden_layers": 40, "mtp_num_hidden_layers": 1}}


def test_qwen3_5_negative_mtp_rule_builds_the_mtp_layers_unquantized():
    """qwen3_5_mtp.py: any '-:' key containing 'mtp' builds mtp.layers.* with quant_config=None,
    even where an earlier positive rule matches; mtp.fc keeps the target's config."""
    qc = {"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": False, "sym": True,
          "dynamic": {"+:.*mtp\\.layers.*": {}, "+:.*mtp\\.fc.*": {}, "-:.*mtp\\.norm.*": {}}}
    v = Vllm033({**QWEN, "quantization_config": qc}, tensor_dtypes={"mtp.fc.qweight": "I32"})
    assert v.builds("mtp.layers.0.mlp.experts", kind="routed_experts", model=MTP_MODEL).method \
        == "UnquantizedFusedMoEMethod"
    assert v.builds("mtp.fc", kind="linear", model=MTP_MODEL).method == "AutoGPTQLinearMethod"
    del qc["dynamic"]["-:.*mtp\\.norm.*"]
    v = Vllm033({**QWEN, "quantization_config": qc}, tensor_dtypes={"mtp.fc.qweight": "I32"})
    assert v.builds("mtp.layers.0.mlp.experts", kind="routed_experts", model=MTP_MODEL).method \
        == "AutoGPTQMoEMethod"


def test_a_null_group_size_is_refused_as_vllm_refuses_it(scenarios, tmp_path) -> None:
    """``group_size: null`` (seen in the wild): vLLM's ``from_config`` takes it as it is, its
    Marlin kernels implement none but -1/32/64/128, so the first quantized layer cannot be
    built. specguard says so (refused, SG701); before, a TypeError traceback."""
    import json
    import shutil

    from vllm.model_executor.layers.quantization.utils.marlin_utils import MARLIN_SUPPORTED_GROUP_SIZES

    from specguard.cli import main
    from specguard.resolve import REFUSED, Resolver

    qc = {"quant_method": "gptq", "bits": 4, "group_size": None, "desc_act": False, "sym": True}
    assert ag.AutoGPTQConfig.from_config(dict(qc)).group_size is None  # accepted at config time
    assert None not in MARLIN_SUPPORTED_GROUP_SIZES
    with pytest.raises(TypeError, match="'int' and 'NoneType'"):  # a null bits: __init__ divides by it
        ag.AutoGPTQConfig.from_config({**qc, "group_size": 128, "bits": None})
    src = tmp_path / "q1"
    shutil.copytree(scenarios["q1"].path, src)
    config = json.loads((src / "config.json").read_text())
    block = config.get("quantization_config") or config["text_config"]["quantization_config"]
    block["group_size"] = None
    (src / "config.json").write_text(json.dumps(config))
    routes = Resolver.open(src).routes()
    assert {rt.verdict for rt in routes} == {REFUSED}
    assert "group_size None" in routes[0].reason or "WNA16" in routes[0].reason
    assert main(["lint", str(src), "--select", "SG701"]) == 1
    block.update(group_size=128, bits=None)  # vLLM: a TypeError in __init__; specguard: one line, exit 2
    (src / "config.json").write_text(json.dumps(config))
    assert main(["route", str(src)]) == 2
