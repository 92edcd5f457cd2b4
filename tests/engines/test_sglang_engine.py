"""SGLang 0.5.23 as an engine (``--engine sglang-0.5.23``, docs/engines.md): route and lint
answer per module from what SGLang's own code decided for the same checkpoints.

The record (plans/sglang-0.5.23/deepseek_v4.json) is SGLang run on CPU: per factory case
its quant-config class, ``is_fp4_experts``, and for every SGLang runtime prefix of the
checkpoint what its ``is_layer_skipped`` / ``is_layer_excluded`` answered;
test_sglang_recorded.py re-records it in one SGLang start and compares. These tests write
the same checkpoints (scripts/record_sglang.py ``cases``) and check that the engine model
(engines/sglang/v0_5_23.py) and the routes agree with that record."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from specguard.cli import main
from specguard.formats import scheme as s
from specguard.layouts import roles as r
from specguard.resolve import MISROUTED, OK, REFUSED, UNKNOWN, Resolver
from tests.engines import overlays

KEY = "sglang-0.5.23"
PLANS = overlays.ROOT / "src/specguard/plans/sglang-0.5.23"
RECORD = {name: case for file in ("deepseek_v4.json", "glm4_moe.json", "qwen3_5.json")
          for name, case in json.loads((PLANS / file).read_text())["cases"].items()}
HYBRID = "sglang.srt.layers.quantization.modelopt_quant.HybridFp8NvFp4Config"
MODELOPT = "sglang.srt.layers.quantization.modelopt_quant.ModelOptFp4Config"
# Read, not run (docs/engines.md): glm4_moe_nextn.py builds the GLM NextN draft with quant_config=None
# when the loader's quant config is modelopt_fp4 (the model class needs CUDA kernels to construct).
GLM_DRAFT_DROPS = MODELOPT


@pytest.fixture(scope="module")
def cases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The recorded checkpoints, written as the recorder wrote them."""
    spec = importlib.util.spec_from_file_location("record_sglang", overlays.ROOT / "scripts/record_sglang.py")
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    return {name: path for name, (path, _, _) in script.cases(tmp_path_factory.mktemp("sglang")).items()}


def _resolver(path: Path) -> Resolver:
    return Resolver.open(path, engine=KEY)


@pytest.mark.parametrize("case", sorted(RECORD))
def test_engine_model_agrees_with_sglangs_own_decisions(cases: dict[str, Path], case: str) -> None:
    r_ = _resolver(cases[case])
    model: Any = r_.vllm
    for side in ("target", "draft"):
        facts = RECORD[case][side]
        assert model.quant_class == facts["quant_config"]["class"], side
        assert model.is_fp4_experts is facts["is_fp4_experts"], side
        recorded = facts["quant_config"].get("prefixes")
        if recorded is None:
            assert facts["quant_config"]["class"] is None  # no quant config: nothing to match
            continue
        assert set(recorded) == set(r_.prefixes())  # the prefixes SGLang was asked about are this layout's
        assert {p: model.matching(p) for p in recorded} == recorded


def _sglang_expert_format(case: str, prefix: str) -> str:
    """What SGLang builds for a routed-experts prefix, from the record alone (the rules of
    docs/engines.md: Fp8Config / HybridFp8NvFp4Config / ModelOptFp4Config), and GLM's NextN drop."""
    facts = RECORD[case]["target"]
    qc = facts["quant_config"]
    glm_draft = RECORD[case]["draft"]["architecture"] == "Glm4MoeForCausalLMNextN" and prefix.startswith(
        "model.decoder.")
    if qc["class"] is None or (glm_draft and qc["class"] == GLM_DRAFT_DROPS):
        return s.BF16
    draft = RECORD[case]["draft"]
    built = draft.get("model", {}).get("built", {})  # the draft model SGLang built (recorder.py _load_facts)
    if prefix in built:
        return s.BF16 if built[prefix].endswith(("UnquantizedFusedMoEMethod", "UnquantizedLinearMethod")) else s.NVFP4
    if "model_quant_config" in draft and prefix.startswith("mtp.") and draft["model_quant_config"] is None:
        return s.BF16  # qwen3_5_mtp.py _mtp_quant_config (recorded): the MTP builds without a quant config
    hit = qc["prefixes"][prefix]
    if qc["class"] == MODELOPT:
        return s.BF16 if hit["nvfp4_excluded"] else s.NVFP4
    if qc["class"] == HYBRID and not hit["nvfp4_excluded"]:
        return s.NVFP4
    if hit["fp8_skipped"]:
        return s.BF16
    return s.MXFP4 if facts["is_fp4_experts"] else s.FP8_BLOCK


@pytest.mark.parametrize("case", sorted(RECORD))
def test_routed_experts_route_as_sglang_decided(cases: dict[str, Path], case: str) -> None:
    experts = [rt for rt in _resolver(cases[case]).routes() if rt.kind == r.ROUTED_EXPERTS]
    assert experts
    for rt in experts:
        if rt.verdict == REFUSED:  # SGLang stops before serving them (recorded: dspark ``refuses``)
            assert RECORD[case]["draft"]["dspark"]["refuses"] and rt.prefix.startswith("stages."), rt.prefix
            continue
        want = _sglang_expert_format(case, rt.prefix)
        assert rt.vllm is not None and rt.vllm.scheme.format == want, rt.prefix
        assert rt.stored is not None
        assert rt.verdict == (OK if rt.stored.format == want or (want == s.BF16 and not rt.stored.quantized)
                              else MISROUTED), rt.prefix


@pytest.mark.parametrize("case", sorted(c for c in RECORD if "model_quant_config" in RECORD[c]["draft"]))
def test_the_draft_model_quant_config_is_the_one_sglang_built(cases: dict[str, Path], case: str) -> None:
    """Qwen3.5: the quant config the MTP class builds with (qwen3_5_mtp.py ``_mtp_quant_config``, run by
    the recorder on the loader's config) is the one the engine model answers the draft with."""
    model: Any = _resolver(cases[case]).vllm
    assert model._draft_quant() == RECORD[case]["draft"]["model_quant_config"]


def _verdicts(path: Path) -> dict[str, str]:
    return {rt.prefix: rt.verdict for rt in _resolver(path).routes()}


def test_s1_sglang_misroutes_the_target_and_loads_the_draft(cases: dict[str, Path]) -> None:
    """S1 and S1-DSpark: SGLang builds every routed-expert layer MXFP4 (the header probe says
    fp4, no per-prefix switch), so the target's NVFP4 experts are misrouted, the MXFP4 draft
    (``model.decoder``, ``stages.{k}``) loads as stored: vLLM's opposite."""
    s1 = _verdicts(cases["s1"])
    assert s1["model.layers.0.mlp.experts"] == s1["model.layers.1.mlp.experts"] == MISROUTED
    assert s1["model.decoder.mlp.experts"] == OK
    assert sorted(p for p, v in s1.items() if v != OK) == ["model.layers.0.mlp.experts", "model.layers.1.mlp.experts"]
    dspark = _verdicts(cases["s1-dspark"])
    # S1-DSpark declares no Markov head: SGLang's DSpark refuses it (recorded ``dspark.refuses``)
    assert RECORD["s1-dspark"]["draft"]["dspark"]["refuses"].startswith("ValueError: DSpark V4 draft requires")
    assert {dspark[f"stages.{k}.mlp.experts"] for k in range(3)} == {REFUSED}
    assert dspark["model.layers.0.mlp.experts"] == MISROUTED
    # the hybrid export (MIXED_PRECISION): NVFP4 target, draft prefixes excluded -> both halves right
    assert set(_verdicts(cases["s1-hybrid"]).values()) == {OK}


@pytest.mark.parametrize("case", ["s3", "s8"])
def test_native_and_bf16_checkpoints_load_as_stored(cases: dict[str, Path], case: str) -> None:
    assert set(_verdicts(cases[case]).values()) == {OK}


def test_sglang_builds_the_deepseek_v3_nextn_draft_without_the_modelopt_config(cases: dict[str, Path],
                                                                               capsys) -> None:
    """S8-NVFP4 (DeepSeek-V3, ModelOpt NVFP4, its NextN attention BF16, its MLP NVFP4): SGLang's
    DeepseekModelNextN drops a modelopt_fp4 quant config (deepseek_nextn.py), so the draft is built
    unquantized whatever the exclusion list says. Recorded by building SGLang's draft model and running
    its load_weights: the BF16 attention loads, the NVFP4 shared experts' scales have no parameter and
    the load stops (KeyError). Before: a ModelOpt NVFP4 draft was assumed, with SG203 on the attention
    and an SG701 "AssertionError" inferred from vLLM's loader."""
    model = RECORD["s8-nvfp4"]["draft"]["model"]
    assert model["built"]["model.decoder.self_attn.o_proj"].endswith("UnquantizedLinearMethod")
    assert model["built"]["model.decoder.mlp.experts"].endswith("UnquantizedFusedMoEMethod")
    assert model["load"] == "KeyError: 'model.decoder.mlp.shared_experts.gate_up_proj.input_scale'"
    sglang = _verdicts(cases["s8-nvfp4"])
    assert sglang["model.decoder.self_attn.o_proj"] == OK
    assert sglang["model.decoder.mlp.experts"] == MISROUTED
    assert sglang["model.decoder.mlp.shared_experts.gate_up_proj"] == REFUSED
    assert main(["lint", str(cases["s8-nvfp4"]), "--engine", KEY, "--format", "json"]) == 1
    found = json.loads(capsys.readouterr().out)["findings"]
    codes = {f["code"] for f in found}
    assert "SG203" not in codes and "SG101" not in codes
    (refusal,) = [f for f in found if f["code"] == "SG701"]
    assert refusal["raises"] == model["load"]  # the recorded exception, not an inference


def test_dspark_stages_sglang_never_builds_are_not_built(cases: dict[str, Path], tmp_path: Path) -> None:
    """SGLang builds one DSpark stage per ``dspark_target_layer_ids`` entry (deepseek_v4_dspark.py;
    recorded: ``parse_dspark_draft_config`` gives S1-DSpark's two ids, two stages). S1-DSpark stores 3:
    with the Markov head SGLang requires declared (``dspark_markov_rank``, as the published DSpark
    configs carry it), stage 2 is not built (load_weights drops it), stages 0-1 route as before.
    Before: SGLang was modelled with vLLM's count, 3 stages built."""
    recorded = RECORD["s1-dspark"]["draft"]["dspark"]
    assert (recorded["target_layer_ids"], recorded["stages"], recorded["markov_rank"]) == ([0, 1], 2, 0)
    model: Any = _resolver(cases["s1-dspark"]).vllm
    assert model.dspark_stages() == recorded["stages"]
    src = cases["s1-dspark"]
    path = tmp_path / "s1d-markov"
    shutil.copytree(src, path)
    config = json.loads((path / "config.json").read_text())
    config["dspark_markov_rank"] = 256
    (path / "config.json").write_text(json.dumps(config))
    routes = {rt.prefix: rt for rt in _resolver(path).routes()}
    assert routes["stages.2.mlp.experts"].vllm.method == "not built"
    assert routes["stages.2.self_attn.wq_b"].vllm.method == "not built"
    assert routes["stages.1.mlp.experts"].verdict == OK and routes["stages.1.mlp.experts"].vllm.method != "not built"
    assert REFUSED not in {rt.verdict for rt in routes.values()}


def test_route_engine_all_on_s1_shows_where_sglang_and_vllm_differ(cases: dict[str, Path], capsys,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    ckpt = str(cases["s1"])
    assert main(["route", ckpt, "--engine", "all"]) == 1
    out = capsys.readouterr().out
    assert "sglang-0.5.23: mxfp4 misrouted" in out and "sglang-0.5.23: mxfp4 ok" in out
    assert "vllm-0.33: nvfp4 misrouted" in out
    assert "the engines differ on 3 module(s)" in out
    assert max(map(len, out.splitlines())) <= 80
    assert main(["route", ckpt, "--engine", "all", "--json"]) == 1
    records = json.loads(capsys.readouterr().out)["records"]
    by = {(x["engine"], x["runtime_prefix"]): x for x in records}
    assert by[(KEY, "model.decoder.mlp.experts")]["verdict"] == "ok"
    assert by[("vllm-0.33", "model.layers.2.ffn.experts")]["verdict"] == "misrouted"
    assert by[(KEY, "model.layers.0.mlp.experts")]["verdict"] == "misrouted"


def test_lint_names_sglang(cases: dict[str, Path], capsys) -> None:
    assert main(["lint", str(cases["s1"]), "--engine", KEY, "--format", "json"]) == 1
    found = json.loads(capsys.readouterr().out)
    records = found["findings"] if isinstance(found, dict) and "findings" in found else found["records"]
    assert {f["engine"] for f in records} == {"SGLang 0.5.23"}
    assert "SG201" in {f["code"] for f in records}


def test_a_stack_without_sglang_facts_is_unknown(tmp_path: Path) -> None:
    """Qwen3.5 MTP under GPTQ (auto-round, factory q0): SGLang's Qwen3.5 classes are modelled, its
    GPTQ quant config is not -> unknown with the reason, never ok (SG205)."""
    from specguard.factory import write_scenario

    write_scenario("q0", tmp_path / "q0")
    routes = _resolver(tmp_path / "q0").routes()
    quantizable = [rt for rt in routes if rt.kind in (r.LINEAR, r.ROUTED_EXPERTS)]
    assert quantizable and {rt.verdict for rt in quantizable} == {UNKNOWN}
    assert "SGLang 0.5.23's gptq quant config is not modelled" in quantizable[0].reason
    assert main(["route", str(tmp_path / "q0"), "--engine", KEY]) == 3


def test_speculative_draft_model_quantization_is_sglangs_launch_flag(cases: dict[str, Path], capsys,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """S8-NVFP4 launched with ``--speculative-draft-model-quantization unquant`` (serving_hook.py: the
    draft ModelConfig gets no quantization): its BF16 MTP attention then loads as stored, its NVFP4
    experts do not; lint's fix names the flag. Only an SGLang run takes it."""
    monkeypatch.setenv("COLUMNS", "200")
    ckpt = str(cases["s8-nvfp4"])
    flag = ["--speculative-draft-model-quantization", "unquant"]
    assert main(["route", ckpt, "--engine", KEY, "--json", *flag]) == 1
    by = {x["runtime_prefix"]: x["verdict"] for x in json.loads(capsys.readouterr().out)["records"]}
    assert by["model.decoder.self_attn.o_proj"] == "ok"  # misrouted without the flag (test above)
    assert by["model.decoder.mlp.experts"] == "misrouted"
    assert main(["lint", ckpt, "--engine", KEY, *flag]) == 1
    out = capsys.readouterr().out
    assert "fix: launch SGLang without --speculative-draft-model-quantization unquant" in out
    assert "vLLM" not in out
    # the checkpoint's own method named: the same quant config as without the flag
    assert main(["route", ckpt, "--engine", KEY, "--speculative-draft-model-quantization", "modelopt_fp4"]) == 1
    capsys.readouterr()
    assert main(["route", ckpt, "--engine", "vllm-0.33", *flag]) == 2
    assert "--engine sglang-0.5.23" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["route", "--help"])
    assert "--speculative-draft-model-quantization" in capsys.readouterr().out


def test_fix_for_sglang_writes_what_lint_prints(cases: dict[str, Path], tmp_path: Path, capsys,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """S1 under SGLang: its NVFP4 target experts need SGLang's hybrid form (recorded: s1-hybrid
    routes clean). Lint prints the edits, `fix --engine sglang-0.5.23` writes those, and the
    repaired checkpoint routes clean under SGLang; no vLLM advice (plugin, vllm serve) is given."""
    monkeypatch.setenv("COLUMNS", "200")
    ckpt = str(cases["s1"])
    capsys.readouterr()
    assert main(["lint", ckpt, "--engine", KEY, "--format", "json"]) == 1
    report = json.loads(capsys.readouterr().out)
    edits = [e for f in report["findings"] if f["code"] == "SG201" for e in f["edits"]]
    assert {(tuple(e["path"]), json.dumps(e["value"])) for e in edits} == {
        (("quantization_config", "quant_algo"), '"MIXED_PRECISION"'), (("quantization_config", "group_size"), "16")}
    assert not any("plugin" in (f["fix"] or "") for f in report["findings"])
    out = tmp_path / "out"
    assert main(["fix", ckpt, "--engine", KEY, "--out", str(out), "--diff"]) == 0
    printed = capsys.readouterr()
    assert "vllm serve" not in printed.out and "sglang.launch_server" in printed.out
    block = json.loads((out / "config.json").read_text())["quantization_config"]
    assert (block["quant_algo"], block["group_size"], block["moe_quant_algo"]) == ("MIXED_PRECISION", 16, "NVFP4")
    Resolver.clear_cache()
    assert {rt.verdict for rt in Resolver.open(out, engine=KEY).routes()} == {OK}
