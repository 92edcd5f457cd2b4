"""Choosing the engine per run: ``--engine NAME|all`` on route and lint
(docs/engines.md). What each engine builds is checked against its own code in
test_engine_versions.py; these check that the choice reaches the output."""

from __future__ import annotations

import json
from pathlib import Path

from specguard.cli import main
from specguard.engines import registry
from specguard.factory import write_scenario


def _s8_exclude_modules(root: Path) -> Path:
    write_scenario("s8-nvfp4", root)
    config = json.loads((root / "config.json").read_text())
    config["quantization_config"]["exclude_modules"] = config["quantization_config"].pop("ignore")
    (root / "config.json").write_text(json.dumps(config))
    (root / "hf_quant_config.json").unlink()
    return root


def test_default_engine_is_the_installed_modelled_one() -> None:
    from importlib.metadata import version

    assert registry.installed() == "vllm-" + ".".join(version("vllm").split(".")[:2])
    assert set(registry.keys()) >= {"vllm-0.33", "vllm-0.32"}


def test_route_and_lint_name_the_chosen_engine(tmp_path: Path, capsys) -> None:
    ckpt = str(_s8_exclude_modules(tmp_path / "s8x"))
    assert main(["route", ckpt, "--engine", "vllm-0.33"]) == 0
    assert main(["route", ckpt, "--engine", "vllm-0.32"]) == 1
    out = capsys.readouterr().out
    assert "vLLM 0.32 builds" in out and "misrouted" in out
    assert main(["lint", ckpt, "--engine", "vllm-0.32", "--format", "json"]) == 1
    findings = json.loads(capsys.readouterr().out)
    records = findings["findings"] if isinstance(findings, dict) and "findings" in findings else findings["records"]
    assert records and {f["engine"] for f in records} == {"vLLM 0.32"}
    assert main(["lint", ckpt, "--engine", "vllm-0.33"]) == 0


def test_route_engine_all_matrix_and_json(tmp_path: Path, capsys) -> None:
    ckpt = str(_s8_exclude_modules(tmp_path / "s8x"))
    assert main(["route", ckpt, "--engine", "all"]) == 1
    out = capsys.readouterr().out
    assert "vllm-0.33" in out and "vllm-0.32" in out
    assert "nvfp4 misrouted" in out and "bf16 ok" in out
    # 14 on the vLLM side; SGLang builds the NextN draft unquantized (deepseek_nextn.py, recorded) and
    # refuses its NVFP4 shared experts' scales: 3 more
    assert "the engines differ on 17 module(s)" in out
    assert main(["route", ckpt, "--engine", "all", "--json"]) == 1
    records = json.loads(capsys.readouterr().out)["records"]
    per_engine = {e: [r for r in records if r["engine"] == e] for e in ("vllm-0.33", "vllm-0.32")}
    assert len(per_engine["vllm-0.33"]) == len(per_engine["vllm-0.32"]) > 0
    assert {r["verdict"] for r in per_engine["vllm-0.33"]} == {"ok"}
    assert "misrouted" in {r["verdict"] for r in per_engine["vllm-0.32"]}


def _worst(codes: list[int]) -> int:
    """A misroute or failure (1) beats could-not-vouch (3) beats clean (0)."""
    return 1 if 1 in codes else 3 if 3 in codes else 0


# (scenario, route's code per engine in registry order): q0 loads as stored on vLLM and is not
# modelled on SGLang (unknown only); q1 is misrouted on vLLM and unknown on SGLang; s6 is clean.
EXITS = {"q0": [0, 0, 3], "q1": [1, 1, 3], "s6": [0, 0, 0]}


def test_engine_all_exits_as_the_worst_single_engine(tmp_path: Path, capsys) -> None:
    engines = registry.keys()
    assert engines == ("vllm-0.33", "vllm-0.32", "sglang-0.5.23")
    for name, want in EXITS.items():
        ckpt = str(write_scenario(name, tmp_path / name).path)
        for command in ("route", "lint"):
            single = [main([command, ckpt, "--engine", key]) for key in engines]
            if command == "route":
                assert single == want, name
            capsys.readouterr()
            assert main([command, ckpt, "--engine", "all"]) == _worst(single), (name, command, single)
            if command == "route":
                assert main([command, ckpt, "--engine", "all", "--json"]) == _worst(single), name
            capsys.readouterr()


def test_lint_engine_all_names_each_engine(tmp_path: Path, capsys) -> None:
    ckpt = str(_s8_exclude_modules(tmp_path / "s8x"))
    assert main(["lint", ckpt, "--engine", "all", "--format", "json"]) == 1
    findings = json.loads(capsys.readouterr().out)["findings"]
    by_engine = {f["engine"] for f in findings}
    assert "vLLM 0.32" in by_engine and "vLLM 0.33" not in by_engine  # 0.33 loads it as stored
    assert main(["lint", ckpt, "--engine", "all"]) == 1
    out = capsys.readouterr().out
    for engine in registry.keys():  # noqa: SIM118 (a function, not a dict)
        assert f"[{engine}]:" in out  # every engine's summary line, clean ones included


def test_matrix_says_not_built_where_an_engine_builds_nothing(tmp_path: Path, capsys) -> None:
    """SGLang's NextN draft serves the target's head (set_embed_and_head): the matrix says
    "not built", not a format (the route's scheme is unknown, and unknown is never "ok")."""
    ckpt = str(write_scenario("s6", tmp_path / "s6").path)
    assert main(["route", ckpt, "--engine", "all", "--all"]) == 0
    out = capsys.readouterr().out
    assert "not built" in out and "unknown ok" not in out


def test_the_launcher_check_for_sglang(tmp_path: Path, capsys) -> None:
    """docs/engines.md "Checking before sglang.launch_server": the command a launcher runs, its exit
    code and the JSON it reads (SGLang's own prefixes, the edits `fix` writes), on S6-BF16 (a BF16
    NextN layer under fp8 excluding nothing); and S8-NVFP4, which SGLang refuses (SG701, recorded)."""
    ckpt = str(write_scenario("s6-bf16", tmp_path / "s6b").path)
    assert main(["lint", ckpt, "--engine", "sglang-0.5.23", "--format", "json"]) == 1
    findings = json.loads(capsys.readouterr().out)["findings"]
    assert {f["engine"] for f in findings} == {"SGLang 0.5.23"}
    prefixes = {p for f in findings for p in f.get("runtime_prefixes", ())}
    assert "model.decoder.self_attn.fused_qkv_a_proj_with_mqa" in prefixes
    edits = [e for f in findings for e in f["edits"]]
    assert any(e["path"] == ["quantization_config", "ignored_layers"] and e["op"] == "extend" for e in edits)
    fixed = tmp_path / "fixed"
    assert main(["fix", ckpt, "--out", str(fixed), "--engine", "sglang-0.5.23"]) == 0
    capsys.readouterr()
    assert main(["lint", str(fixed), "--engine", "sglang-0.5.23", "--format", "json"]) == 0
    capsys.readouterr()
    s8n = str(write_scenario("s8-nvfp4", tmp_path / "s8n").path)
    assert main(["lint", s8n, "--engine", "sglang-0.5.23", "--format", "json"]) == 1
    refused = [f for f in json.loads(capsys.readouterr().out)["findings"] if f["code"] == "SG701"]
    assert refused and refused[0]["raises"].startswith("KeyError: 'model.decoder.mlp.shared_experts.gate_up_proj.")
