"""SG701 on configs vLLM 0.33 rejects at start-up: each variant of a valid checkpoint
(a factory scenario or a producer fixture) changed in one key, and each refusal
checked against vLLM's own config class where it raises at construction."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from specguard.lint import lint
from specguard.resolve import Resolver

PRODUCERS = Path(__file__).resolve().parents[1] / "data" / "producers"


def _variant(src: Path, dest: Path, edit) -> Path:
    shutil.copytree(src, dest, ignore=shutil.ignore_patterns("reference", "vllm.json", "expected.json"))
    cfg = json.loads((dest / "config.json").read_text())
    edit(cfg)
    (dest / "config.json").write_text(json.dumps(cfg))
    Resolver.clear_cache()
    return dest


def _sg701(d: Path) -> list[str]:
    return [f.message for f in lint([Resolver.open(d)]).findings if f.code == "SG701"]


def test_clean_scenario_starts(scenarios):
    assert _sg701(scenarios["s6"].path) == []


def test_fp8_config_without_activation_scheme(scenarios, tmp_path):
    from vllm.model_executor.layers.quantization.fp8 import Fp8Config

    d = _variant(scenarios["s6"].path, tmp_path / "s6", lambda c: c["quantization_config"].pop("activation_scheme"))
    (msg,) = _sg701(d)
    assert "activation_scheme" in msg and "start-up" in msg
    with pytest.raises(ValueError, match="activation_scheme"):
        Fp8Config.from_config(json.loads((d / "config.json").read_text())["quantization_config"])


def test_block_fp8_with_static_activations(scenarios, tmp_path):
    from vllm.model_executor.layers.quantization.fp8 import Fp8Config

    d = _variant(scenarios["s6"].path, tmp_path / "s6",
                 lambda c: c["quantization_config"].update(activation_scheme="static"))
    (msg,) = _sg701(d)
    assert "block-wise quantization only supports dynamic" in msg
    with pytest.raises(ValueError, match="only supports dynamic"):
        Fp8Config.from_config(json.loads((d / "config.json").read_text())["quantization_config"])


def test_deepseek_v3_gate_bias_without_topk_method(scenarios, tmp_path):
    d = _variant(scenarios["s6"].path, tmp_path / "s6", lambda c: c.pop("topk_method"))
    (msg,) = _sg701(d)
    assert "KeyError" in msg and "e_score_correction_bias" in msg and "weight loading" in msg


def _auto_round(tmp_path: Path, **kw) -> Path:
    return _variant(PRODUCERS / "ar_w4g128_autoround", tmp_path / "ar", lambda c: c["quantization_config"].update(kw))


@pytest.mark.parametrize(("kw", "error", "says"), [
    ({"data_type": "fp", "bits": 8, "group_size": [128, 128], "packing_format": "auto_round:fp8_static"},
     ValueError, "Unsupported packing_format: auto_round:fp8_static"),
    ({"data_type": "fp", "bits": 8, "group_size": 0}, AssertionError, "requires a 2-D group_size"),
])
def test_inc_configs_vllm_rejects(tmp_path, kw, error, says):
    from vllm.model_executor.layers.quantization.inc import INCConfig

    d = _auto_round(tmp_path, **kw)
    (msg,) = _sg701(d)
    assert says in msg
    with pytest.raises(error, match=says.split(":")[0]):
        INCConfig.from_config(json.loads((d / "config.json").read_text())["quantization_config"])


def test_inc_fp8_cannot_build_quantized_experts(tmp_path):
    from vllm.model_executor.layers.quantization.inc import INCConfig
    from vllm.model_executor.layers.quantization.inc.schemes.inc_fp8_scheme import INCFp8Scheme

    d = _auto_round(tmp_path, data_type="fp", bits=8, group_size=[128, 128], packing_format="auto_round:fp8")
    INCConfig.from_config(json.loads((d / "config.json").read_text())["quantization_config"])  # starts
    assert "get_moe_method" not in INCFp8Scheme.__dict__  # inherits INCScheme's NotImplementedError
    (msg,) = _sg701(d)
    assert "INCFp8Scheme does not support MoE layers" in msg


def test_architecture_vllm_does_not_have(scenarios, tmp_path):
    """An architecture neither vLLM 0.33's registry nor its Transformers backend has: the
    engine refuses it at start-up (registry.py ``_raise_for_unsupported``), and every
    route says so instead of claiming what vLLM builds."""
    from vllm.model_executor.models.registry import ModelRegistry

    d = _variant(scenarios["s6"].path, tmp_path / "s6", lambda c: c.update(architectures=["MadeUpForCausalLM"]))
    (msg,) = _sg701(d)
    assert "MadeUpForCausalLM" in msg and "not supported" in msg and "start-up" in msg
    assert {r.verdict for r in Resolver.open(d).routes()} == {"refused"}
    with pytest.raises(ValueError, match="are not supported for now"):
        ModelRegistry._raise_for_unsupported(["MadeUpForCausalLM"])


def test_architecture_vllm_does_not_have_is_one_finding(scenarios, tmp_path):
    """S1 misroutes its draft experts and names a dead pattern; under an architecture vLLM
    does not have, nothing is built: SG701 alone, and no route claims a built class."""
    d = _variant(scenarios["s1"].path, tmp_path / "s1", lambda c: c.update(architectures=["MadeUpForCausalLM"]))
    findings = lint([Resolver.open(d)]).findings
    assert [f.code for f in findings] == ["SG701"]
    assert "architectures" in str(findings[0].fix)
    assert {r.vllm.method for r in Resolver.open(d).routes()} == {"not built"}


def test_architecture_vllm_has_starts(scenarios, tmp_path):
    d = _variant(scenarios["s6"].path, tmp_path / "s6", lambda c: c.update(architectures=["DeepseekV3ForCausalLM"]))
    assert _sg701(d) == []
