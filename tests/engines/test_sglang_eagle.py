"""A separate EAGLE-3 drafter under SGLang 0.5.23 (``--speculative-draft-model-path``,
docs/engines.md "SGLang 0.5.23"): its own ModelConfig and quant config, recorded from SGLang's
own code on CPU (plans/sglang-0.5.23/eagle.json, re-recorded in test_sglang_recorded.py's one
start), and its layers at SGLang's prefixes (llama_eagle3.py builds every decoder layer under
the bare ``model`` prefix: ``model.qkv_proj``, ``model.self_attn.o_proj``, ``model.gate_up_proj``,
``model.down_proj``), so an exclusion written for vLLM's prefixes matches nothing."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

from specguard.cli import main
from specguard.engines.registry import launched_with
from specguard.resolve import MISROUTED, OK, UNKNOWN, Resolver
from tests.engines import overlays

KEY = "sglang-0.5.23"
RECORD = json.loads((overlays.ROOT / "src/specguard/plans/sglang-0.5.23/eagle.json").read_text())["cases"]
SGLANG_LINEARS = ("model.qkv_proj", "model.self_attn.o_proj", "model.gate_up_proj", "model.down_proj")


@pytest.fixture(scope="module")
def script() -> Any:
    spec = importlib.util.spec_from_file_location("record_sglang", overlays.ROOT / "scripts/record_sglang.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def drafters(script: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The recorded drafters (written as the recorder wrote them) and their target."""
    root = tmp_path_factory.mktemp("sglang-eagle")
    out = {name: path for name, (path, _, _) in script._eagle_cases(root).items()}
    return {**out, "target": root / script.EAGLE_TARGET}


def _pair(drafters: dict[str, Path], name: str, engine: str = KEY, **kw: Any) -> Resolver:
    target = Resolver.open(drafters["target"], engine=engine, own_draft=False)
    return Resolver.open(drafters[name], engine=engine, target=target, draft_method="eagle", **kw)


@pytest.mark.parametrize("case", sorted(RECORD))
def test_engine_model_agrees_with_sglangs_own_decisions(drafters: dict[str, Path], case: str) -> None:
    """The drafter's quant-config class, and per SGLang runtime prefix what its Fp8Config's
    ``is_layer_skipped`` answered, are what the engine model restates."""
    pair = _pair(drafters, case)
    model: Any = pair.vllm
    facts = RECORD[case]["draft"]
    assert facts["architecture"] == "LlamaForCausalLMEagle3"
    assert model.quant_class == facts["quant_config"]["class"]
    recorded = facts["quant_config"].get("prefixes")
    if recorded is None:
        assert facts["quant_config"]["class"] is None and facts["quantization"] is None
        return
    assert set(recorded) == set(pair.prefixes())  # SGLang was asked about exactly this layout's prefixes
    assert {p: model.matching(p) for p in recorded} == recorded


def test_vllm_named_exclusions_match_nothing_under_sglang(drafters: dict[str, Path]) -> None:
    """An FP8 drafter whose ignored_layers name vLLM's prefixes: vLLM builds every layer as
    stored, SGLang builds FP8 over the F16 bytes of the four decoder linears (its record:
    ``fp8_skipped`` false for each) and leaves ``fc`` plain (a ``torch.nn.Linear``)."""
    sglang = {rt.prefix: rt for rt in _pair(drafters, "eagle3-fp8-vllm-names").routes()}
    assert sorted(p for p, rt in sglang.items() if rt.verdict == MISROUTED) == sorted(SGLANG_LINEARS)
    assert all(sglang[p].vllm is not None and sglang[p].vllm.method == "Fp8LinearMethod" for p in SGLANG_LINEARS)
    assert sglang["model.fc"].verdict == OK and sglang["lm_head"].verdict == OK
    recorded = RECORD["eagle3-fp8-vllm-names"]["draft"]["quant_config"]["prefixes"]
    assert not any(recorded[p]["fp8_skipped"] for p in SGLANG_LINEARS)
    vllm = _pair(drafters, "eagle3-fp8-vllm-names", engine="vllm-0.33")
    drafter_verdicts = {rt.verdict for rt in vllm.routes()}
    assert drafter_verdicts == {OK}


def test_fix_engine_all_repairs_the_drafter_for_every_engine(drafters: dict[str, Path]) -> None:
    """``fix --engine all`` adds SGLang's names (the shards of ``model.qkv_proj`` and
    ``model.gate_up_proj``, as ``is_layer_skipped`` matches a fused layer); SGLang's own matching
    skips every linear then (recorded), and every engine routes the drafter as stored."""
    entries = json.loads((drafters["eagle3-fp8-vllm-names-fixed"] / "config.json").read_text())[
        "quantization_config"]["ignored_layers"]
    assert {"model.q_proj", "model.k_proj", "model.v_proj", "model.gate_proj", "model.up_proj"} <= set(entries)
    assert "model.qkv_proj" not in entries  # matches no shard: SGLang would still build it FP8
    recorded = RECORD["eagle3-fp8-vllm-names-fixed"]["draft"]["quant_config"]["prefixes"]
    assert all(recorded[p]["fp8_skipped"] for p in SGLANG_LINEARS)
    for engine in ("vllm-0.33", "vllm-0.32", KEY):
        assert {rt.verdict for rt in _pair(drafters, "eagle3-fp8-vllm-names-fixed", engine).routes()} == {OK}, engine


def _launched(drafters: dict[str, Path], name: str, draft_quantization: str) -> dict[str, str]:
    """The pair's verdicts with SGLang launched with ``--speculative-draft-model-quantization``."""
    target = Resolver.open(drafters["target"], engine=KEY, own_draft=False)
    checkpoint = Resolver.open(drafters[name], engine=KEY, target=target, draft_method="eagle").checkpoint
    with launched_with(KEY, draft_quantization=draft_quantization):
        pair = Resolver(checkpoint, target=target, draft_method="eagle", engine=KEY)
        return {rt.prefix: rt.verdict for rt in pair.routes()}


def test_the_draft_quantization_flag_under_sglang(drafters: dict[str, Path]) -> None:
    """``--speculative-draft-model-quantization unquant`` builds the drafter without a quant
    config (serving_hook.py): the F16 linears load as stored; another method than the drafter's
    own is converted or refused in ModelConfig._verify_quantization, not modelled: unknown."""
    assert set(_launched(drafters, "eagle3-fp8-vllm-names", "unquant").values()) == {OK}
    other = _launched(drafters, "eagle3-fp8-vllm-names", "modelopt_fp4")
    assert {other[p] for p in SGLANG_LINEARS} == {UNKNOWN}


def test_another_drafter_class_stays_unknown(drafters: dict[str, Path], tmp_path: Path) -> None:
    """SGLang 0.5.23 registers no ``EagleLlamaForCausalLM`` (vLLM's EAGLE class name): not modelled."""
    other = tmp_path / "eagle"
    other.mkdir()
    for f in drafters["eagle3-llama3.1-8b"].iterdir():
        (other / f.name).symlink_to(f)
    config = json.loads((drafters["eagle3-llama3.1-8b"] / "config.json").read_text())
    (other / "config.json").unlink()
    (other / "config.json").write_text(json.dumps({**config, "architectures": ["EagleLlamaForCausalLM"]}))
    drafters = {**drafters, "other": other}
    linear = [rt for rt in _pair(drafters, "other").routes() if rt.kind == "linear"]
    assert linear and {rt.verdict for rt in linear} == {UNKNOWN}
    assert "EagleLlamaForCausalLM drafter" in linear[0].reason


def test_route_engine_all_shows_sglang_misroutes_the_drafter(drafters: dict[str, Path],
                                                            capsys: pytest.CaptureFixture[str],
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    code = main(["route", str(drafters["target"]), "--draft", str(drafters["eagle3-fp8-vllm-names"]),
                 "--draft-method", "eagle", "--engine", "all"])
    out = capsys.readouterr().out
    assert code == 1
    assert "vllm-0.33: fp16 ok · vllm-0.32: fp16 ok" in out and "sglang-0.5.23: fp8_block misrouted" in out


def test_a_target_opened_for_an_eagle_drafter_lays_out_without_a_draft(drafters: dict[str, Path]) -> None:
    """The target of a separate drafter, opened with the drafter's method (as ``route --draft`` and
    scripts/outputs_snapshot.py do): SGLang's engine model lays it out with no draft of its own
    (before: LayoutError "an EAGLE drafter is a separate checkpoint", every SGLang route of the pair)."""
    target = Resolver.open(drafters["target"], engine=KEY, own_draft=False, draft_method="eagle")
    pair = Resolver.open(drafters["eagle3-llama3.1-8b"], engine=KEY, target=target, draft_method="eagle")
    assert target.routes() and {rt.verdict for rt in pair.routes()} == {OK}


def test_an_eagle3_head_inspected_alone_routes_as_beside_its_target(drafters: dict[str, Path]) -> None:
    """``specguard route DRAFTER --engine sglang-0.5.23``: the drafter's own ModelConfig decides
    its quant config with or without the target beside it (before: ``unknown``, SG205)."""
    for name in RECORD:
        alone = {rt.prefix: rt.verdict for rt in Resolver.open(drafters[name], engine=KEY).routes()}
        beside = {rt.prefix: rt.verdict for rt in _pair(drafters, name).routes()}
        assert alone == beside, name
