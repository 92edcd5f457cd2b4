"""`specguard fix --engine NAME|all` (issue 27 item 2): the repair an engine loads as stored,
re-routed under that engine; `all`: one repair every modelled engine loads as stored, or one
line naming the engine it cannot satisfy. And a checkpoint with modules specguard cannot
vouch for: what can be repaired is, the rest is named (exit 3, as route and lint).

The engines differ where tests/engines/test_engine_versions.py proves it from each version's
own code: a ModelOpt block in config.json that spells its list ``exclude_modules`` is read
by vLLM 0.33 (``ignore``, else ``exclude_modules``) and ignored by 0.32 (``ignore`` only).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from specguard.checkpoint.source import open_checkpoint
from specguard.cli import main
from specguard.engines import registry
from specguard.repair.plan import open_resolvers
from specguard.resolve import OK, UNKNOWN
from specguard.usage import EXIT_UNVOUCHED

ENGINES = ("vllm-0.33", "vllm-0.32")


def _edited(src: Path, dst: Path, edit) -> Path:
    """A copy of checkpoint ``src`` whose config.json ``edit(config)`` changed (bytes untouched)."""
    shutil.copytree(src, dst)
    config = json.loads((dst / "config.json").read_text())
    edit(config)
    (dst / "config.json").write_text(json.dumps(config))
    return dst


@pytest.fixture(scope="module")
def s8x(scenarios, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """S8-NVFP4 with config.json's ModelOpt list spelled ``exclude_modules``, no hf_quant_config.json."""
    def spell(config: dict) -> None:
        block = config["quantization_config"]
        block["exclude_modules"] = block.pop("ignore")

    out = _edited(scenarios["s8-nvfp4"].path, tmp_path_factory.mktemp("s8x") / "s8x", spell)
    (out / "hf_quant_config.json").unlink()
    return out


def _verdicts(path: Path, engine: str, platform: str = "cuda") -> set[str]:
    rs = open_resolvers(open_checkpoint(path), None, platform, None, engine)
    return {str(rt.verdict) for r in rs for rt in r.routes()}


def _lint_edits(capsys: pytest.CaptureFixture[str], src: Path, engine: str) -> list[dict]:
    capsys.readouterr()
    main(["lint", str(src), "--engine", engine, "--platform", "cuda", "--format", "json"])
    report = json.loads(capsys.readouterr().out)
    return [e for f in report["findings"] if f["applicability"] != "display-only" for e in f["edits"]]


def test_the_engines_differ_on_the_source(s8x: Path) -> None:
    assert _verdicts(s8x, "vllm-0.33") == {OK}
    assert _verdicts(s8x, "vllm-0.32") == {OK, "misrouted"}


def test_fix_for_032_writes_the_list_032_reads(s8x: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    assert main(["fix", str(s8x), "--out", str(out), "--engine", "vllm-0.32", "--platform", "cuda"]) == 0
    block = json.loads((out / "config.json").read_text())["quantization_config"]
    old = json.loads((s8x / "config.json").read_text())["quantization_config"]["exclude_modules"]
    assert block["ignore"][: len(old)] == old  # 0.33 reads ignore first: nothing it excluded is lost
    for engine in ENGINES:  # re-routed under each engine: every module as stored
        assert _verdicts(out, engine) == {OK}, engine
    # lint's printed fix under 0.32 is the fix `fix --engine vllm-0.32` writes
    edits = _lint_edits(capsys, s8x, "vllm-0.32")
    assert [(e["path"], e["op"]) for e in edits] and all(e["path"] == ["quantization_config", "ignore"]
                                                          for e in edits)
    assert sorted({v for e in edits for v in e["value"]}) == sorted(block["ignore"])


def test_fix_for_033_has_nothing_to_repair(s8x: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    assert main(["fix", str(s8x), "--out", str(out), "--engine", "vllm-0.33"]) == 0
    assert "nothing to repair" in capsys.readouterr().out and not out.exists()


def test_fix_all_engines_is_verified_under_each(glm_both_files: Path, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    """(S8-NVFP4 served this before; SGLang's draft of it is now unrepairable, test below.)"""
    out = tmp_path / "out"
    assert main(["fix", str(glm_both_files), "--out", str(out), "--engine", "all"]) == 0
    text = capsys.readouterr().out
    assert "misrouted on vLLM 0.33 (cuda, rocm, cpu), vLLM 0.32 (cuda, rocm, cpu), SGLang 0.5.23 (cuda)" in text
    assert "ok on vLLM 0.33 (cuda, rocm, cpu), vLLM 0.32 (cuda, rocm, cpu), SGLang 0.5.23 (cuda)" in text
    for engine in ENGINES:
        for platform in ("cuda", "rocm", "cpu"):
            assert _verdicts(out, engine, platform) == {OK}, (engine, platform)


def test_fix_all_names_the_engine_it_cannot_satisfy(s8x: Path, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """An architecture only vLLM 0.33's registry lists: 0.32 refuses it at start-up (SG701),
    and no config edit changes that."""
    src = _edited(s8x, tmp_path / "step5", lambda c: c.update(architectures=["Step5ForCausalLM"]))
    out = tmp_path / "out"
    assert main(["fix", str(src), "--out", str(out), "--engine", "all"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("specguard: error: vLLM 0.32: ")
    assert "refused" in err and "Step5ForCausalLM" in err
    assert not out.exists()
    assert main(["fix", str(src), "--out", str(out), "--engine", "vllm-0.33"]) == 0  # 0.33 alone: fine


def test_fix_all_iterates_the_registry(scenarios, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """A registered engine is one `--engine all` repairs for, with no change to fix."""
    def other() -> registry.Engine:
        return registry.Engine("vllm-0.32-copy", "vLLM 0.32 (copy)", registry.engine("vllm-0.32").model)

    # SGLang builds S1's *target* experts MXFP4 over NVFP4 bytes (Fp8Config.is_fp4_experts: one answer
    # for every layer); its hybrid form (quant_algo MIXED_PRECISION + group_size) repairs that beside
    # vLLM's V4.1 ignore entry on cuda: `all` writes one repair all three engines load, verified.
    out = tmp_path / "out"
    assert main(["fix", str(scenarios["s1"].path), "--out", str(out), "--engine", "all", "--platform", "cuda"]) == 0
    assert "ok on vLLM 0.33 (cuda), vLLM 0.32 (cuda), SGLang 0.5.23 (cuda)" in capsys.readouterr().out
    # on every platform class vLLM's CPU class needs the draft's experts re-encoded BF16, which the
    # hybrid form builds MXFP4 under SGLang: no one repair serves both, `all` names SGLang, writes nothing
    out = tmp_path / "out-every-class"
    assert main(["fix", str(scenarios["s1"].path), "--out", str(out), "--engine", "all"]) == 2
    assert "SGLang 0.5.23" in capsys.readouterr().err and not out.exists()
    out = tmp_path / "out-copy"
    monkeypatch.delitem(registry._FACTORIES, "sglang-0.5.23")
    monkeypatch.setitem(registry._FACTORIES, "vllm-0.32-copy", other)
    assert main(["fix", str(scenarios["s1"].path), "--out", str(out), "--engine", "all", "--platform", "cuda"]) == 0
    assert "ok on vLLM 0.33 (cuda), vLLM 0.32 (cuda), vLLM 0.32 (copy) (cuda)" in capsys.readouterr().out


def test_unvouched_modules_are_left_and_named(scenarios, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    """S7 (a promised MTP layer no tensor holds) under a quant stack specguard does not model
    (FBGEMM FP8): the missing layer is repaired; the 15 modules whose build specguard cannot
    say are left as they are and named; exit 3. (Before: exit 2, "no repair strategy for unknown".)"""
    src = _edited(scenarios["s7"].path, tmp_path / "s7u", lambda c: c.update(
        quantization_config={"quant_method": "fbgemm_fp8", "activation_scale_ub": 1200.0,
                             "modules_to_not_convert": []}))
    assert UNKNOWN in _verdicts(src, "vllm-0.33")
    out = tmp_path / "out"
    assert main(["fix", str(src), "--out", str(out)]) == EXIT_UNVOUCHED
    text = capsys.readouterr().out
    assert json.loads((out / "config.json").read_text())["num_nextn_predict_layers"] == 0
    assert "ok, 15 unknown on cuda, rocm, cpu" in text
    line = next(x for x in text.splitlines() if x.startswith("could not vouch"))
    assert "15 module(s)" in line and "FBGEMMFp8Config" in line
    # nothing left to repair: still says what it cannot vouch for
    again = tmp_path / "again"
    assert main(["fix", str(out), "--out", str(again)]) == EXIT_UNVOUCHED
    assert "nothing to repair that specguard can vouch for" in capsys.readouterr().out
    assert not again.exists()


def test_fix_all_on_s8_nvfp4_names_the_draft_sglang_builds_without_its_quant_config(
        scenarios, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """S8-NVFP4 loads as stored under both vLLM versions; SGLang builds its NextN draft without the
    modelopt_fp4 config (deepseek_nextn.py; recorded: deepseek_v4.json ``s8-nvfp4`` ``model``), so its
    NVFP4 MLP is misrouted and no config edit repairs it: `fix --engine all` exits 2 naming SGLang and
    writes nothing (before: SGLang was modelled building the draft NVFP4, and the repair added
    ``model.decoder.self_attn.*`` entries that SGLang never reads for this draft)."""
    src, engines = scenarios["s8-nvfp4"].path, registry.keys()
    assert {e: _verdicts(src, e) for e in engines} == {
        "vllm-0.33": {OK}, "vllm-0.32": {OK}, "sglang-0.5.23": {OK, "misrouted", "refused"}}
    out = tmp_path / "out"
    assert main(["fix", str(src), "--out", str(out), "--engine", "all"]) == 2
    err = capsys.readouterr().err
    assert "SGLang 0.5.23" in err and "model.decoder.mlp" in err and "deepseek_nextn.py" in err
    assert not out.exists()


def test_fix_all_repairs_s6_bf16_with_the_shard_names_sglang_matches(scenarios, tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """S6-BF16 (a BF16 MTP layer under ``fp8`` excluding nothing): SGLang's Fp8Config matches a fused
    layer by its shards' names (utils.py ``is_layer_skipped``: ``gate_up_proj`` -> ``gate_proj``,
    ``up_proj``), so ``model.decoder.mlp.shared_experts.gate_up_proj`` as an entry leaves it FP8
    (plans/sglang-0.5.23/deepseek_v4.json ``s6-bf16-fixed`` records SGLang skipping the shards'
    names). The repair for every engine names the shards for SGLang and the fused layer for vLLM;
    before, it named the fused layer for both and refused ("still misrouted after the repair")."""
    src, engines = scenarios["s6-bf16"].path, registry.keys()
    out = tmp_path / "out"
    assert main(["fix", str(src), "--out", str(out), "--engine", "all"]) == 0
    assert "ok on vLLM 0.33 (cuda, rocm, cpu), vLLM 0.32 (cuda, rocm, cpu), SGLang 0.5.23 (cuda)" in \
        capsys.readouterr().out
    ignored = json.loads((out / "config.json").read_text())["quantization_config"]["ignored_layers"]
    assert {"model.decoder.mlp.shared_experts.gate_proj", "model.decoder.mlp.shared_experts.up_proj",
            "model.layers.2.mlp.shared_experts.gate_up_proj"} <= set(ignored)
    assert "model.decoder.mlp.shared_experts.gate_up_proj" not in ignored
    for engine in engines:  # re-routed under each engine: every module as stored
        assert _verdicts(out, engine) == {OK}, engine
    # lint prints the repair fix writes
    edits = _lint_edits(capsys, src, "sglang-0.5.23")
    assert any("model.decoder.mlp.shared_experts.up_proj" in json.dumps(e) for e in edits)


def test_fix_extends_the_modules_to_not_convert_list_the_engines_read(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """The published Qwen3.8 FP8 release lists its BF16 modules in ``modules_to_not_convert``;
    Fp8Config reads ``ignored_layers`` first (vLLM: when filled; SGLang: when present), so a repair
    that added ``ignored_layers`` beside it built the target's BF16 linears FP8 and was refused
    ("still misrouted after the repair"). The repair extends the list the engines read, and names
    each engine's spelling of the MTP's fused layers (SGLang: the shards')."""
    from tests.lint.test_published_checkpoints import published

    src = published.build("qwen3.8-2.4t-a95b-fp8-mtp-bf16-not-excluded", tmp_path / "q", 4)
    before = json.loads((src / "config.json").read_text())["quantization_config"]["modules_to_not_convert"]
    out = tmp_path / "out"
    assert main(["fix", str(src), "--out", str(out), "--engine", "all"]) == 0
    assert "verified: route" in capsys.readouterr().out
    qc = json.loads((out / "config.json").read_text())["quantization_config"]
    assert "ignored_layers" not in qc
    assert qc["modules_to_not_convert"][:len(before)] == before
    listed = set(qc["modules_to_not_convert"])
    assert {"mtp.fc", "mtp.layers.0.self_attn.qkv_proj", "mtp.layers.0.self_attn.q_proj"} <= listed
    for engine in registry.keys():  # noqa: SIM118 (a function, not a dict)
        assert _verdicts(out, engine) == {OK}, engine


def _published_builder():
    import importlib.util
    import sys

    root = Path(__file__).resolve().parents[2]
    spec = importlib.util.spec_from_file_location("published_sparse", root / "scripts/published_sparse.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("published_sparse", module)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def glm_both_files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The published GLM-4.7 NVFP4 copy (4 layers + its BF16 NextN layer) as ModelOpt >= 0.31 exports it:
    the claim in config.json's ``quantization_config`` too (vLLM transformers_utils/config.py
    ``get_config``: "ModelOpt 0.31.0 and after saves the quantization config in the model config file"),
    hf_quant_config.json beside it; one layer's BF16 attention entry lost from both lists."""
    path = _published_builder().build("glm-4.7-nvfp4", tmp_path_factory.mktemp("glm2") / "glm", 4)
    hf = json.loads((path / "hf_quant_config.json").read_text())
    hf["quantization"]["exclude_modules"].remove("model.layers.1.self_attn*")
    (path / "hf_quant_config.json").write_text(json.dumps(hf))
    config = json.loads((path / "config.json").read_text())
    q = hf["quantization"]
    config["quantization_config"] = {"quant_method": "modelopt", "quant_algo": q["quant_algo"],
                                     "group_size": q["group_size"], "producer": hf["producer"],
                                     "ignore": list(q["exclude_modules"])}
    (path / "config.json").write_text(json.dumps(config))
    return path


@pytest.mark.parametrize("engine", ["vllm-0.33", "vllm-0.32", "sglang-0.5.23", "all"])
def test_fix_keeps_hf_quant_config_json_saying_what_config_json_says(glm_both_files: Path, tmp_path: Path,
                                                                     engine: str, capsys) -> None:
    """Both engines read config.json's list and not hf_quant_config.json's when config.json has one
    (vLLM transformers_utils/config.py ``get_config``; SGLang configs/model_config.py
    ``_parse_quant_hf_config``); other readers the standalone file. `fix` edits both alike, so lint
    has no SG103 left under any engine and lint's printed fix names both files (before: config.json
    only; the fixed output then kept an SG103 warning under SGLang and an SG103 error under vLLM)."""
    src = glm_both_files
    assert main(["lint", str(src), "--engine", "sglang-0.5.23", "--format", "json"]) == 1
    printed = [e for f in json.loads(capsys.readouterr().out)["findings"] for e in f["edits"]]
    assert {e["file"] for e in printed} == {"config.json", "hf_quant_config.json"}
    out = tmp_path / "out"
    assert main(["fix", str(src), "--out", str(out), "--engine", engine]) == 0
    capsys.readouterr()
    config = json.loads((out / "config.json").read_text())["quantization_config"]["ignore"]
    hf = json.loads((out / "hf_quant_config.json").read_text())["quantization"]["exclude_modules"]
    assert hf == config and "lm_head" in hf
    for lint_engine in registry.keys():  # noqa: SIM118 (a function, not a dict): no SG103 under any engine
        main(["lint", str(out), "--engine", lint_engine, "--format", "json"])
        codes = {f["code"] for f in json.loads(capsys.readouterr().out)["findings"]}
        assert "SG103" not in codes, (engine, lint_engine)
        if engine in ("all", lint_engine):
            assert _verdicts(out, lint_engine) == {OK}, lint_engine
