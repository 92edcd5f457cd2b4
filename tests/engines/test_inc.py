"""INC / auto-round: specguard's per-layer decision (declared/inc.py, engines/vllm/inc.py)
against vLLM 0.33's real ``INCConfig.from_config`` + ``get_quant_method`` on generated
``extra_config`` entries, block lists and prefixes.

The real method runs unchanged (the ``extra_config`` early exit, ``INCConfigParser.resolve``
with its exact / suffix / fused / regex order); only the scheme it resolves to is a
recorder (its kernels need a GPU), and the unquantized method classes are recorders
(``UnquantizedFusedMoEMethod`` wants a built MoE config).
"""

from __future__ import annotations

import json
import shutil

import pytest
import torch
import vllm.model_executor.layers.quantization.inc.inc as inc_mod
import vllm.model_executor.layers.quantization.inc.schemes.factory as factory
from hypothesis import given, settings
from hypothesis import strategies as st
from vllm.model_executor.layers.linear import UnquantizedLinearMethod

from specguard.declared import parse_declared
from specguard.declared.inc import IncDeclared
from specguard.lint import lint
from specguard.resolve import Resolver
from tests.engines.layers import bare_layer

PACKED = {"qkv_proj": ["q_proj", "k_proj", "v_proj"], "gate_up_proj": ["gate_proj", "up_proj"]}


class _Scheme:
    def get_linear_method(self, config, layer, prefix, lc):
        return ("quantized", lc.bits, lc.group_size)

    get_moe_method = get_linear_method


@pytest.fixture(scope="module", autouse=True)
def recorders():
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(factory, "resolve_scheme", lambda lc: _Scheme())
        mp.setattr(inc_mod, "UnquantizedLinearMethod", lambda: ("plain",))
        mp.setattr(inc_mod, "UnquantizedFusedMoEMethod", lambda moe: ("plain",))
        yield


def real(qc: dict, prefix: str, kind: str) -> tuple:
    cfg = inc_mod.INCConfig.from_config(dict(qc))
    cfg.packed_modules_mapping = PACKED
    try:
        m = cfg.get_quant_method(bare_layer(kind), prefix)
    except ValueError:
        return ("ValueError",)
    return m if m[0] == "quantized" else ("plain",)


def ours(qc: dict, prefix: str, kind: str) -> tuple:
    d = parse_declared({"quantization_config": qc})
    assert isinstance(d, IncDeclared)
    try:
        lc = d.layer_config(prefix, kind, PACKED if kind == "linear" else None)
    except ValueError:
        return ("ValueError",)
    return ("quantized", lc.bits, lc.group_size) if lc.quantized else ("plain",)


KEYS = st.sampled_from([
    ".*attn.*", ".*mtp.*", "mtp.fc", "lm_head", ".*shared_expert.*", "model.layers.1.mlp.gate",
    "model.layers.0.self_attn.q_proj", "model.layers.0.self_attn.k_proj", "model.layers.0.self_attn.v_proj",
    "layers.0.self_attn.qkv_proj", ".*experts.*", "[bad", ".*model\\.layers\\.1\\.mlp\\.gate.*",
])
VALUES = st.sampled_from([{"bits": 16, "data_type": "float"}, {"bits": 8}, {"group_size": 64}, {},
                          {"bits": 4, "group_size": 32}])
BLOCKS = st.sampled_from([None, "model.layers", "model.layers,mtp.layers", ["model.language_model.layers"],
                          "mtp"])
PREFIXES = st.sampled_from([
    ("model.layers.0.self_attn.qkv_proj", "linear"), ("model.layers.0.self_attn.o_proj", "linear"),
    ("model.layers.1.mlp.gate", "linear"), ("model.layers.1.mlp.experts", "routed_experts"),
    ("mtp.fc", "linear"), ("mtp.layers.0.self_attn.qkv_proj", "linear"),
    ("mtp.layers.0.mlp.experts", "routed_experts"), ("lm_head", "head"), ("model.lm_head", "head"),
    ("mtp.layers.0.mlp.shared_expert.gate_up_proj", "linear"),
])


@settings(max_examples=200, deadline=None)
@given(extra=st.dictionaries(KEYS, VALUES, max_size=4), blocks=BLOCKS, where=PREFIXES,
       bits=st.sampled_from([4, 8]))
def test_layer_config_equals_vllm_get_quant_method(extra, blocks, where, bits):
    qc = {"quant_method": "auto-round", "bits": bits, "group_size": 128, "sym": True, "data_type": "int",
          "packing_format": "auto_round:auto_gptq", "extra_config": extra}
    if blocks is not None:
        qc["block_name_to_quantize"] = blocks
    assert ours(qc, *where) == real(qc, *where), (extra, blocks, where)


def test_the_producer_fixture_routes_as_vllm_recorded_it():
    """tests/data/producers/ar_w4g128_autoround (real auto-round 0.15.1 output): vllm.json
    holds the method vLLM 0.33's own model construction gave each layer on CPU."""
    from pathlib import Path

    d = Path(__file__).resolve().parents[1] / "data" / "producers" / "ar_w4g128_autoround"
    recorded = json.loads((d / "vllm.json").read_text())["methods"]
    r = Resolver(Resolver.open(d).checkpoint, platform="cpu")
    for prefix, method in recorded.items():
        prefix = prefix.removesuffix(".routed_experts")
        assert r.route(prefix).vllm.method == method.split("/")[0], prefix
    assert {rt.verdict for rt in Resolver.open(d).routes()} == {"ok"}  # CUDA: every layer as stored


QWEN_AR = {"quant_method": "auto-round", "bits": 4, "group_size": 128, "sym": True, "data_type": "int",
           "packing_format": "auto_round:auto_gptq", "autoround_version": "0.9.1",
           "block_name_to_quantize": "model.language_model.layers",
           "extra_config": {".*attn.*": {"bits": 16, "data_type": "float"},
                            ".*shared_expert.*": {"bits": 16, "data_type": "float"}}}


def _inc_q4(scenarios, tmp_path, qc):
    """Scenario q4 (a Qwen3.5 MoE INT4 target whose MTP block is the FP8 release's: F8
    weights with weight_scale_inv) under an auto-round config instead of GPTQ's."""
    d = tmp_path / "q4-autoround"
    shutil.copytree(scenarios["q4"].path, d)
    cfg = json.loads((d / "config.json").read_text())
    cfg["quantization_config"] = qc
    (d / "config.json").write_text(json.dumps(cfg))
    return d


def test_int4_target_with_fp8_mtp_fails_to_load(scenarios, tmp_path, monkeypatch):
    """INCConfig builds the MTP layers (outside block_name_to_quantize) unquantized: vLLM's
    own UnquantizedLinearMethod makes only ``weight``, so the stored ``weight_scale_inv``
    has no parameter and AutoWeightsLoader raises; lint says so (SG204, fails to start)."""
    cfg = inc_mod.INCConfig.from_config(dict(QWEN_AR))
    cfg.packed_modules_mapping = PACKED
    for prefix in ("mtp.layers.0.self_attn.qkv_proj", "mtp.layers.0.self_attn.o_proj"):
        assert cfg.get_quant_method(bare_layer("linear"), prefix) == ("plain",)
    import vllm.model_executor.parameter as vp

    monkeypatch.setattr(vp, "get_tensor_model_parallel_rank", lambda: 0)  # one rank, no process group
    monkeypatch.setattr(vp, "get_tensor_model_parallel_world_size", lambda: 1)
    layer = torch.nn.Module()  # what vLLM's own unquantized method registers on a layer
    UnquantizedLinearMethod().create_weights(layer, 8, [8], 8, 8, torch.bfloat16, weight_loader=print)
    assert set(dict(layer.named_parameters())) == {"weight"}  # no weight_scale_inv to load into

    r = Resolver.open(_inc_q4(scenarios, tmp_path, QWEN_AR))
    draft = [rt for rt in r.routes() if rt.role.is_draft and rt.stored is not None and rt.stored.quantized]
    assert draft and {rt.verdict for rt in draft} == {"misrouted"}
    assert {rt.vllm.method for rt in draft} <= {"UnquantizedLinearMethod", "UnquantizedFusedMoEMethod"}
    findings = lint([r]).findings
    sg204 = [f for f in findings if f.code == "SG204"]
    assert sg204 and all("fails to start" in f.message for f in sg204), [f.message for f in findings]
    assert not [f for f in findings if f.code == "SG205"]  # modelled: nothing left unknown
    assert {rt.verdict for rt in r.routes() if not rt.role.is_draft} == {"ok"}


def test_mtp_in_the_blocks_builds_int4_over_fp8(scenarios, tmp_path):
    """auto-round appends the MTP blocks to block_name_to_quantize when it packs them:
    then INCConfig builds INT4 (qweight/scales) for F8 weights: SG201."""
    qc = {**QWEN_AR, "block_name_to_quantize": "model.language_model.layers,mtp.layers"}
    r = Resolver.open(_inc_q4(scenarios, tmp_path, qc))
    findings = lint([r]).findings
    assert "SG201" in {f.code for f in findings}, [f.message for f in findings]
    assert real(qc, "mtp.layers.0.mlp.experts", "routed_experts") == ("quantized", 4, 128)
    assert real(qc, "mtp.layers.0.self_attn.o_proj", "linear") == ("plain",)  # '.*attn.*' bits 16
