"""Unknown is not ok: a quant stack vLLM 0.33 ships but specguard does not model gives
every quantizable module the verdict ``unknown``, one SG205 finding per cause, and
route/lint exit 3 ("could not vouch"), never a silent 0.

The checkpoints are real producer output (tests/data/producers/ct_fp8_dynamic: FP8
weights with per-channel scales) under the ``quantization_config`` of stacks vLLM 0.33
registers (``get_quantization_config``), e.g. the one Meta's FBGEMM FP8 releases carry.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from vllm.model_executor.layers.quantization import QUANTIZATION_METHODS, get_quantization_config

from specguard.cli import main
from specguard.engines.vllm.startup import QUANT_CONFIG_CLASS
from specguard.lint import lint
from specguard.resolve import Resolver

PRODUCERS = Path(__file__).resolve().parents[1] / "data" / "producers"
FBGEMM = {"quant_method": "fbgemm_fp8", "modules_to_not_convert": ["model.layers.1.mlp.gate", "lm_head"],
          "activation_scale_ub": 1200.0}
# vLLM 0.33 stacks specguard does not model, with configs their from_config accepts
UNMODELLED = {
    "fbgemm_fp8": FBGEMM,
    "experts_int8": {"quant_method": "experts_int8"},
    "moe_wna16": {"quant_method": "moe_wna16", "bits": 4, "group_size": 128, "has_zp": False,
                  "lm_head": False, "modules_to_not_convert": None, "linear_quant_method": "gptq"},
}


def _relabelled(tmp_path: Path, qc: dict, base: str = "ct_fp8_dynamic") -> Path:
    d = tmp_path / f"{base}-{qc['quant_method']}"
    shutil.copytree(PRODUCERS / base, d)
    cfg = json.loads((d / "config.json").read_text())
    cfg["quantization_config"] = qc
    (d / "config.json").write_text(json.dumps(cfg))
    return d


@pytest.mark.parametrize("method", sorted(UNMODELLED))
def test_unmodelled_stack_is_unknown_never_ok(tmp_path, method):
    r = Resolver(Resolver.open(_relabelled(tmp_path, UNMODELLED[method])).checkpoint)
    routes = r.routes()
    quantizable = [rt for rt in routes if rt.kind not in ("norm", "other")]
    assert quantizable and {rt.verdict for rt in quantizable} == {"unknown"}
    assert all(rt.verdict == "ok" for rt in routes if rt.kind in ("norm", "other"))  # parameters: no claim needed
    findings = lint([r]).findings
    assert [f.code for f in findings] == ["SG205"], [f.message for f in findings]
    (f,) = findings
    cls = get_quantization_config(method).__name__  # the class vLLM 0.33 itself registers
    assert f"vLLM 0.33: specguard does not model {cls} (quant_method {method!r})" in f.message
    assert f"{len(quantizable)} module(s) not vouched for" in f.message
    assert f.data["quant_config"] == cls


def test_the_class_table_is_vllms():
    """startup.py's QUANT_CONFIG_CLASS names the class get_quantization_config returns."""
    for method in QUANTIZATION_METHODS:
        if method in QUANT_CONFIG_CLASS:
            assert get_quantization_config(method).__name__ == QUANT_CONFIG_CLASS[method].replace(
                "DeepseekV4FP8Config", get_quantization_config(method).__name__), method


def test_route_and_lint_exit_3_when_they_cannot_vouch(tmp_path, capsys):
    d = str(_relabelled(tmp_path, FBGEMM))
    assert main(["route", d]) == 3
    out = capsys.readouterr().out
    assert "unknown" in out and "ok" in out
    assert main(["lint", d]) == 3
    assert main(["lint", d, "--fail-on", "error"]) == 3  # not a severity question
    assert main(["lint", d, "--fail-on", "never"]) == 0
    assert main(["lint", d, "--ignore", "SG205"]) == 0  # the user waived it
    capsys.readouterr()
    assert main(["lint", d, "--format", "json"]) == 3
    rec = json.loads(capsys.readouterr().out)
    assert [x["code"] for x in rec["findings"]] == ["SG205"]


def test_a_real_finding_still_exits_1(tmp_path):
    """Unknown modules beside a true misroute: the misroute decides (exit 1)."""
    d = _relabelled(tmp_path, FBGEMM)
    cfg = json.loads((d / "config.json").read_text())
    cfg["num_nextn_predict_layers"] = 1  # a draft layer promised, none stored: SG301
    (d / "config.json").write_text(json.dumps(cfg))
    assert main(["lint", str(d)]) == 1
    assert main(["route", str(d)]) == 1


def test_modelled_checkpoints_still_exit_0(tmp_path):
    assert main(["route", str(PRODUCERS / "ct_fp8_dynamic")]) == 0
    assert main(["lint", str(PRODUCERS / "ct_fp8_dynamic")]) == 0


@pytest.mark.parametrize("command", ["route", "lint"])
def test_help_documents_exit_3(command, capsys):
    with pytest.raises(SystemExit):
        main([command, "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "3 could not vouch" in text and "SG205" in text


@pytest.mark.parametrize("engine", ["vllm-0.33", "vllm-0.32", "sglang-0.5.23"])
@pytest.mark.parametrize("architecture", ["LlamaForCausalLM", "Qwen3MoeForCausalLM"])
def test_sg205_names_its_engine_once(tmp_path, engine, architecture):
    """A cause that already names its engine ("no build plan ... for vLLM 0.33") is not prefixed
    with it a second time; one that does not ("specguard does not model ...") is."""
    from specguard.engines.registry import engine as engine_of

    d = _relabelled(tmp_path, UNMODELLED["fbgemm_fp8"])
    cfg = json.loads((d / "config.json").read_text())
    cfg["architectures"] = [architecture]
    (d / "config.json").write_text(json.dumps(cfg))
    r = Resolver(Resolver.open(d).checkpoint, engine=engine)
    found = [f for f in lint([r]).findings if f.code == "SG205"]
    assert found
    name = engine_of(engine).name
    for f in found:
        assert f.message.count(name) == 1, f.message
