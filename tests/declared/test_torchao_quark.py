"""torchao and Quark quantization_config as vLLM 0.33 reads them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specguard.declared import parse_declared
from specguard.declared.torchao import should_skip
from specguard.formats import scheme as s
from specguard.layouts import roles as r

PRODUCERS = Path(__file__).resolve().parents[1] / "data" / "producers"
NAMES = ["model.layers.1.self_attn.o_proj", "model.layers.10.self_attn.o_proj", "visual.blocks.0.proj",
         "model.layers.1.mlp.gate", "lm_head"]
SKIPS = [["o_proj"], ["layers.1"], ["visual"], ["model.layers.1.mlp.gate"], ["mlp"], ["lm"], []]


@pytest.mark.parametrize("skip", SKIPS)
def test_should_skip_is_vllms(skip):
    from vllm.model_executor.layers.quantization.torchao import should_skip as vllm_should_skip

    for name in NAMES:
        assert should_skip(name, tuple(skip)) == vllm_should_skip(name, skip), (name, skip)


@pytest.mark.parametrize(("fixture", "fmt"), [("torchao_int8wo", s.INT8_CHANNEL), ("torchao_fp8wo", s.FP8_CHANNEL)])
def test_torchao_fixture_configs(fixture, fmt):
    d = parse_declared(json.loads((PRODUCERS / fixture / "config.json").read_text()))
    assert d.scheme_for("model.layers.0.self_attn.qkv_proj", kind=r.LINEAR).scheme.format == fmt
    assert not d.scheme_for("model.layers.1.mlp.experts", kind=r.ROUTED_EXPERTS).quantized
    assert not d.scheme_for("lm_head", kind=r.HEAD_KIND).quantized


@pytest.mark.parametrize(("fixture", "fmt", "group"), [
    ("quark_int4_g128", s.INT4_GROUP, 128), ("quark_uint4_g128", s.INT4_GROUP, 128),
    ("quark_int8", s.INT8_TENSOR, None), ("quark_fp8", s.FP8_TENSOR, None),
    ("quark_mxfp4", s.MXFP4, 32), ("quark_nvfp4", s.NVFP4, 16),
])
def test_quark_fixture_configs(fixture, fmt, group):
    d = parse_declared(json.loads((PRODUCERS / fixture / "config.json").read_text()))
    claim = d.scheme_for("model.layers.0.self_attn.o_proj", kind=r.LINEAR).scheme
    assert (claim.format, claim.group_size) == (fmt, group)
    assert not d.scheme_for("lm_head", kind=r.HEAD_KIND).quantized  # ParallelLMHead: no Quark method


def test_quark_fp8_weight_scale_is_named_quark_by_its_config():
    # Quark stores FP8 as weight/weight_scale like ModelOpt and compressed-tensors: the
    # config's stack names the convention, in inspect and route alike (formats/settle.py)
    from specguard.checkpoint.source import open_checkpoint
    from specguard.commands.inspect import stored_schemes
    from specguard.formats.table import classify

    stored = stored_schemes(classify(open_checkpoint(PRODUCERS / "quark_fp8")))
    fp8 = [sc for sc in stored.values() if sc.format == s.FP8_TENSOR]
    assert fp8 and all(sc.convention == s.QUARK for sc in fp8)
