"""Valid checkpoints of families specguard already knew, which it used to flag falsely.

Each is a copy of a real producer fixture (tests/data/producers/) changed the way
another real tool writes it, and each expectation is checked against vLLM 0.33's
own code on CPU (its config classes and layer-selection functions):

- llm-compressor W8A16 (pack-quantized, ``num_bits: 8``): int8 packed four per I32;
  the width is in the config and ``weight_shape``, not in the header.
- AWQ with no ``modules_to_not_convert`` (GPTQModel writes none): vLLM derives the
  unquantized modules from the weights' dtypes (``AutoAWQConfig.maybe_update_config``).
- GPTQ ``modules_in_block_to_quantize``: vLLM expands ``qkv_proj``/``gate_up_proj``
  to their shards before matching (``is_layer_gptq_quantized``).
- auto-round block FP8 ``group_size: [128, 128]``: valid input, not a config error.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.numpy import load_file, save_file

from specguard.cli import main
from specguard.formats import classify
from specguard.formats import scheme as s
from specguard.formats.settle import settle
from specguard.lint import lint
from specguard.resolve import Resolver

PRODUCERS = Path(__file__).resolve().parents[1] / "data" / "producers"
PACKED = {"qkv_proj": ["q_proj", "k_proj", "v_proj"], "gate_up_proj": ["gate_proj", "up_proj"]}


def _copy(src: str, dest: Path) -> Path:
    shutil.copytree(PRODUCERS / src, dest, ignore=shutil.ignore_patterns("reference", "vllm.json", "expected.json"))
    Resolver.clear_cache()
    return dest


def _edit_config(d: Path, edit) -> None:
    cfg = json.loads((d / "config.json").read_text())
    edit(cfg["quantization_config"])
    (d / "config.json").write_text(json.dumps(cfg))


def _findings(d: Path) -> list[str]:
    return [f"{f.code}: {f.message}" for f in lint([Resolver.open(d)]).findings]


# ---------------------------------------------------------------- W8A16


@pytest.fixture
def w8a16(tmp_path: Path) -> Path:
    """ct_w4a16 re-packed as compressed-tensors writes W8A16 (its own pack_to_int32, 8 bits)."""
    from compressed_tensors.compressors.pack_quantized.helpers import pack_to_int32

    d = _copy("ct_w4a16", tmp_path / "w8a16")
    ts = load_file(d / "model.safetensors")
    rng = np.random.default_rng(0)
    for m in [n.removesuffix(".weight_packed") for n in ts if n.endswith(".weight_packed")]:
        out, inp = (int(x) for x in ts[f"{m}.weight_shape"])
        q = torch.from_numpy(rng.integers(-127, 128, (out, inp)).astype(np.int8))
        ts[f"{m}.weight_packed"] = pack_to_int32(q, 8).numpy()
    save_file(ts, d / "model.safetensors")
    _edit_config(d, lambda qc: qc["config_groups"]["group_0"]["weights"].update(num_bits=8))
    return d


def test_w8a16_header_fits_two_widths_and_weight_shape_settles_it(w8a16):
    from specguard.checkpoint import open_checkpoint

    ckpt = open_checkpoint(w8a16)
    m = classify(ckpt)["model.layers.0.self_attn.q_proj"]  # weight_packed [128, 64], weight_scale [128, 2]
    assert m.scheme.format == s.AMBIGUOUS
    assert {c.format for c in m.scheme.candidates} == {s.INT4_GROUP, s.INT8_GROUP}
    settled, _ = settle(ckpt, m)
    assert (settled.format, settled.group_size) == (s.INT8_GROUP, 128)


def test_w8a16_routes_int8_and_lints_clean(w8a16):
    r = Resolver.open(w8a16)
    rt = r.route("model.layers.0.self_attn.qkv_proj")
    assert (rt.stored.format, rt.stored.group_size) == (s.INT8_GROUP, 128)
    assert _findings(w8a16) == []


def test_w8a16_vllm_builds_8_bit_wna16(w8a16):
    """vLLM's CompressedTensorsConfig reads num_bits 8 for the same layers."""
    from vllm.model_executor.layers.quantization.compressed_tensors.compressed_tensors import (
        CompressedTensorsConfig,
    )

    qc = json.loads((w8a16 / "config.json").read_text())["quantization_config"]
    cfg = CompressedTensorsConfig.from_config(qc)
    weights = next(iter(cfg.target_scheme_map.values()))["weights"]
    assert (weights.num_bits, weights.group_size) == (8, 128)


# ---------------------------------------------------------------- AWQ without an exclusion list


@pytest.fixture
def awq_no_list(tmp_path: Path) -> Path:
    """ar_w4g128_awq with no modules_to_not_convert and layer 1's o_proj left BF16
    (GPTQModel writes no list and leaves modules it skipped in BF16)."""
    from specguard.codecs import families

    d = _copy("ar_w4g128_awq", tmp_path / "awq")
    ts = load_file(d / "model.safetensors")
    m = "model.layers.1.self_attn.o_proj"
    parts = {k: ts.pop(f"{m}.{k}") for k in ("qweight", "qzeros", "scales")}
    ts[f"{m}.weight"] = families.awq_int4(parts).astype(np.float16)
    save_file(ts, d / "model.safetensors")
    _edit_config(d, lambda qc: qc.pop("modules_to_not_convert"))
    return d


def test_awq_without_list_lints_clean(awq_no_list):
    r = Resolver.open(awq_no_list)
    rt = r.route("model.layers.1.self_attn.o_proj")
    assert rt.vllm.method == "UnquantizedLinearMethod" and rt.verdict == "ok", rt.reason
    assert r.route("model.layers.0.self_attn.o_proj").vllm.method == "AutoAWQLinearMethod"
    assert _findings(awq_no_list) == []


def test_awq_without_list_vllm_derives_the_same(awq_no_list):
    from vllm.model_executor.layers.quantization.auto_awq import AutoAWQConfig
    from vllm.model_executor.layers.quantization.utils.quant_utils import is_layer_skipped

    qc = json.loads((awq_no_list / "config.json").read_text())["quantization_config"]
    cfg = AutoAWQConfig.from_config(qc)
    cfg.maybe_update_config(str(awq_no_list))
    skipped = lambda p: is_layer_skipped(p, cfg.modules_to_not_convert, PACKED, match_mode="substring")  # noqa: E731
    assert skipped("model.layers.1.self_attn.o_proj")
    assert skipped("model.layers.1.mlp.gate")
    assert not skipped("model.layers.0.self_attn.qkv_proj")
    assert not skipped("model.layers.0.self_attn.o_proj")


# ---------------------------------------------------------------- GPTQ modules_in_block_to_quantize

IN_BLOCK = [["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"], ["self_attn.o_proj"],
            ["mlp.gate_proj", "mlp.up_proj"], ["mlp.down_proj"],
            [f"mlp.experts.{e}.{p}" for e in range(4) for p in ("gate_proj", "up_proj", "down_proj")]]


@pytest.fixture
def gptq_in_block(tmp_path: Path) -> Path:
    d = _copy("ar_w4g128_gptq", tmp_path / "gptq")
    _edit_config(d, lambda qc: qc.update(modules_in_block_to_quantize=IN_BLOCK))
    return d


def test_gptq_in_block_expands_merged_layers(gptq_in_block):
    """Merged layers are expanded by the packed mapping the quant config holds: Qwen3-MoE's has
    qkv_proj but not the dense layer's gate_up_proj (added to the class mapping in __init__,
    after SupportsQuant.__new__ copied it; plans/vllm-0.33/Qwen3MoeForCausalLM.json), which
    vLLM then builds unquantized, as its recorded run of this fixture did (vllm.json)."""
    r = Resolver.open(gptq_in_block)
    rt = r.route("model.layers.0.self_attn.qkv_proj")
    assert rt.vllm.method == "AutoGPTQLinearMethod" and rt.verdict == "ok", rt.reason
    rt = r.route("model.layers.0.mlp.gate_up_proj")
    assert rt.vllm.method == "UnquantizedLinearMethod" and rt.verdict == "misrouted", rt.reason
    recorded = json.loads((PRODUCERS / "ar_w4g128_gptq" / "vllm.json").read_text())["methods"]
    assert recorded["model.layers.0.mlp.gate_up_proj"] == "UnquantizedLinearMethod"
    assert {f.split(":")[0] for f in _findings(gptq_in_block)} == {"SG204"}


def test_gptq_in_block_vllm_expands_the_same(gptq_in_block):
    from vllm.model_executor.layers.quantization.utils.gptq_utils import is_layer_gptq_quantized

    flat = [x for group in IN_BLOCK for x in group]
    assert is_layer_gptq_quantized("model.layers.0.self_attn.qkv_proj", flat, PACKED)
    assert is_layer_gptq_quantized("model.layers.0.mlp.gate_up_proj", flat, PACKED)
    assert not is_layer_gptq_quantized("model.layers.1.mlp.gate", flat, PACKED)


# ---------------------------------------------------------------- auto-round block FP8 group_size


def test_auto_round_block_group_size_is_valid_input(tmp_path, capsys):
    d = _copy("ar_w4g128_autoround", tmp_path / "ar")
    _edit_config(d, lambda qc: qc.update(group_size=[128, 128]))
    assert main(["lint", str(d)]) != 2, capsys.readouterr().err


# ---------------------------------------------------------------- Quark exclude and layer configs

QUARK_EXCLUDE = ["lm_head", r"re:.*mlp\.gate$", r"re:.*mlp\.experts$"]


@pytest.fixture
def quark_excluded(tmp_path: Path) -> Path:
    """quark_int4_g128 whose exclude list covers what Quark left BF16 (router, fused experts)."""
    d = _copy("quark_int4_g128", tmp_path / "quark")
    _edit_config(d, lambda qc: qc.update(exclude=QUARK_EXCLUDE))
    return d


def test_quark_exclude_covering_the_bf16_modules_lints_clean(quark_excluded):
    r = Resolver.open(quark_excluded)
    assert r.route("model.layers.1.mlp.experts").vllm.method == "UnquantizedFusedMoEMethod"
    assert r.route("model.layers.1.mlp.gate").vllm.method == "UnquantizedLinearMethod"
    rt = r.route("model.layers.0.self_attn.qkv_proj")
    built = (rt.vllm.method, rt.vllm.scheme.format, rt.vllm.scheme.group_size)
    assert built == ("QuarkLinearMethod", s.INT4_GROUP, 128)
    assert _findings(quark_excluded) == []


def test_quark_routing_matches_vllms_quark_config(quark_excluded):
    """QuarkConfig.get_quant_method_target (no kernels needed) with Qwen3-MoE's packed modules."""
    from vllm.model_executor.layers.fused_moe import RoutedExperts
    from vllm.model_executor.layers.fused_moe.router.gate_linear import GateLinear
    from vllm.model_executor.layers.linear import QKVParallelLinear
    from vllm.model_executor.layers.quantization.quark.quark import QuarkConfig

    for exclude, experts, gate in ((QUARK_EXCLUDE, "UnquantizedFusedMoEMethod", "UnquantizedLinearMethod"),
                                   (["lm_head"], "QuarkW4A16Int4MoEMethod", "QuarkLinearMethod")):
        qc = json.loads((quark_excluded / "config.json").read_text())["quantization_config"] | {"exclude": exclude}
        cfg = QuarkConfig.from_config(qc)
        cfg.packed_modules_mapping = PACKED
        assert cfg.get_quant_method_target("model.layers.1.mlp.experts", RoutedExperts)[2].__name__ == experts
        assert cfg.get_quant_method_target("model.layers.1.mlp.gate", GateLinear)[2].__name__ == gate
        assert cfg.get_quant_method_target("model.layers.0.self_attn.qkv_proj",
                                           QKVParallelLinear)[2].__name__ == "QuarkLinearMethod"
