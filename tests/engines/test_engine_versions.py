"""vLLM 0.32 beside vLLM 0.33 (docs/engines.md): each version's plans and the two places their
builds differ, checked against that version's own code. vLLM 0.32 runs once, in a fresh
process under its overlay (tests/engines/vllm_032_probe.py); 0.33 runs in this one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specguard import Resolver
from specguard.factory import write_scenario
from tests.engines import overlays

PLANS = overlays.ROOT / "src/specguard/plans"


@pytest.fixture(scope="module")
def vllm_032(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("vllm-0.32")
    proc = overlays.run("vllm-0.32", ["-m", "tests.engines.vllm_032_probe", str(out)])
    assert proc.returncode == 0, proc.stderr[-4000:]
    return out


def test_vllm_032_plans_match_the_installed_engine(vllm_032: Path) -> None:
    facts = json.loads((vllm_032 / "modelopt.json").read_text())
    assert (facts["vllm"], facts["recorder_engine"]) == ("0.32.0", "vllm-0.32")
    assert json.loads((vllm_032 / "failed.json").read_text()) == {}
    committed = {p.name: p.read_text() for p in (PLANS / "vllm-0.32").glob("*.json")}
    fresh = {p.name: p.read_text() for p in (vllm_032 / "plans").glob("*.json")}
    assert sorted(fresh) == sorted(committed) and len(committed) > 10
    drifted = [name for name in committed if committed[name] != fresh[name]]
    assert drifted == [], f"re-record: PYTHONPATH=.engines/vllm-0.32:.engines/triton-3.7.1 " \
                          f".venv/bin/python scripts/record_plans.py ({drifted})"


def _s8_exclude_modules(root: Path) -> Path:
    """S8-nvfp4 with config.json's ModelOpt list spelled ``exclude_modules`` (the key
    hf_quant_config.json uses) and no hf_quant_config.json."""
    write_scenario("s8-nvfp4", root)
    config = json.loads((root / "config.json").read_text())
    block = config["quantization_config"]
    block["exclude_modules"] = block.pop("ignore")
    (root / "config.json").write_text(json.dumps(config))
    (root / "hf_quant_config.json").unlink()
    return root


def test_modelopt_exclude_modules_in_config_json(vllm_032: Path, tmp_path: Path) -> None:
    # vLLM 0.32's from_config reads config.json's ModelOpt list from "ignore" only ...
    read = json.loads((vllm_032 / "modelopt.json").read_text())["exclude_modules"]
    assert read == {"exclude_modules": [], "ignore": ["lm_head", "model.layers.0.self_attn*"]}
    # ... vLLM 0.33's (this process) from "ignore", else "exclude_modules".
    from vllm.model_executor.layers.quantization.modelopt import ModelOptNvFp4Config

    block = {"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16,
             "exclude_modules": ["lm_head", "model.layers.0.self_attn*"]}
    assert ModelOptNvFp4Config.from_config(block).exclude_modules == ["lm_head", "model.layers.0.self_attn*"]

    ckpt = _s8_exclude_modules(tmp_path / "s8x")
    by_engine = {e: Resolver.open(ckpt, engine=e) for e in ("vllm-0.33", "vllm-0.32")}
    attn = {e: {r.prefix: r for r in res.routes() if ".self_attn." in r.prefix and r.prefix.endswith("_proj")}
            for e, res in by_engine.items()}
    assert attn["vllm-0.33"] and {str(r.verdict) for r in attn["vllm-0.33"].values()} == {"ok"}
    assert {str(r.verdict) for r in attn["vllm-0.32"].values()} == {"misrouted"}
    assert {r.vllm.method for r in attn["vllm-0.32"].values() if r.vllm} == {"ModelOptLinearMethod"}
    assert all("vLLM 0.32" in r.reason for r in attn["vllm-0.32"].values())


def test_rocm_mtp_ignore_entries_realigned_only_by_033(vllm_032: Path, tmp_path: Path) -> None:
    # amd/mtp.py align_mtp_quant_config exists in 0.33 (this process), not in 0.32.
    from vllm.models.deepseek_v4 import quant_config

    assert hasattr(quant_config, "align_mtp_quant_config")
    assert json.loads((vllm_032 / "modelopt.json").read_text())["align_mtp_quant_config"] is False

    write_scenario("s1", tmp_path / "s1")
    config = json.loads((tmp_path / "s1/config.json").read_text())
    config["quantization_config"]["ignored_layers"] = ["mtp.0.e_proj"]
    (tmp_path / "s1/config.json").write_text(json.dumps(config))
    n = config["num_hidden_layers"]
    built = {}
    for engine in ("vllm-0.33", "vllm-0.32"):
        res = Resolver.open(tmp_path / "s1", engine=engine, platform="rocm", draft_method="mtp")
        route = next(r for r in res.routes() if r.prefix.endswith(f"layers.{n}.e_proj"))
        built[engine] = (route.vllm.method if route.vllm else None, str(route.verdict))
    # Stored FP8 block: 0.33 re-keys the exact entry onto the draft layer and builds it
    # unquantized (misrouted); 0.32 leaves it on model.mtp.0.e_proj: FP8, built as stored (ok; the
    # entry that matches nothing is SG101's to report).
    assert built["vllm-0.33"] == ("UnquantizedLinearMethod", "misrouted")
    assert built["vllm-0.32"] == ("Fp8LinearMethod", "ok")




# Published-config copies (tests/data/published/): what vLLM 0.32's own quant-config classes
# build for every runtime module (the probe's truth.json, scripts/published_truth.py under
# 0.32) against 0.33's (the committed truth.json) and against specguard's routes under
# ``--engine vllm-0.32``. Where the versions differ, DIFFER says so; for these configs they
# build the same method everywhere (docs/engines.md "vLLM 0.32 vs 0.33").
DIFFER: dict[str, dict[str, tuple[str, str]]] = {}
PUBLISHED_032 = ("deepseek-v3-fp8", "deepseek-r1-nvfp4", "glm-4.7-nvfp4", "glm-4.7-nvfp4-mtp-not-excluded",
                 "glm-4.7-nvfp4-mtp-excluded-by-checkpoint-names", "mimo-7b", "gpt-oss-20b")


@pytest.fixture(scope="module")
def published_032(vllm_032: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, dict[str, Path]]:
    from tests.lint.test_published_truth import published, truth_script

    truths = json.loads((vllm_032 / "truth.json").read_text())
    base = tmp_path_factory.mktemp("published-032")
    return truths, {name: published.build(name, base / name, truth_script.LAYERS) for name in truths}


def test_published_configs_032_vs_033(published_032: tuple[dict, dict[str, Path]]) -> None:
    truths, _ = published_032
    assert set(PUBLISHED_032) <= set(truths)
    differ = {}
    for name, got in truths.items():
        held = json.loads((overlays.ROOT / "tests/data/published" / name / "truth.json").read_text())
        assert set(got) == set(held), name
        if diff := {p: (held[p], got[p]) for p in held if held[p] != got[p]}:
            differ[name] = diff
    assert differ == DIFFER


def test_published_configs_route_as_032_builds(published_032: tuple[dict, dict[str, Path]]) -> None:
    from tests.lint.test_published_truth import _quantized, _same

    truths, paths = published_032
    for name, held in truths.items():
        routes = {rt.prefix: rt for rt in Resolver.open(paths[name], engine="vllm-0.32").routes()}
        assert all(rt.vllm is None or "vLLM 0.32" in rt.reason or rt.verdict == "ok" for rt in routes.values())
        wrong = {p: (routes[p].vllm.method, t) for p, t in held.items()
                 if not _same(routes[p].vllm.method, routes[p].kind, t)}
        assert not wrong, (name, wrong)
        misrouted = {p for p, t in held.items() if routes[p].stored.quantized != _quantized(t)}
        assert {p for p, rt in routes.items() if rt.verdict == "misrouted"} == misrouted, name


@pytest.mark.parametrize("name", ["deepseek-v4-flash", "deepseek-v4-flash-dspark"])
def test_published_deepseek_v4_routes_alike_on_both(name: str, tmp_path: Path) -> None:
    """DeepSeek-V4 MTP / DSpark copies (their quant configs read the live vLLM config, so no
    truth.json; 0.33's are checked in tests/engines/test_vllm_v0_33.py): 0.32's model differs
    from 0.33's only in the ROCm re-keying of ``mtp.{i}`` entries, which these configs lack."""
    from tests.lint.test_published_truth import published, truth_script

    path = published.build(name, tmp_path / name, truth_script.LAYERS)
    for platform in ("cuda", "rocm", "cpu"):
        by = {e: {rt.prefix: (rt.verdict, rt.vllm.method if rt.vllm else None)
                  for rt in Resolver.open(path, engine=e, platform=platform).routes()} for e in ENGINES}
        assert by["vllm-0.32"] == by["vllm-0.33"], platform


ENGINES = ("vllm-0.33", "vllm-0.32")


# The vLLM plugin on 0.32 (engines/registry.py marks vllm-0.32 ``plugin=True`` on this evidence):
# tests/integrations/plugin_checks.py run in the probe against 0.32's own classes.
def _plugin_032(vllm_032: Path) -> dict:
    return json.loads((vllm_032 / "plugin.json").read_text())


def test_plugin_contract_holds_on_032(vllm_032: Path) -> None:
    from specguard.engines.registry import plugin_engine

    assert _plugin_032(vllm_032)["contract"] == []  # every patched/called name, with its signature
    assert plugin_engine("0.32.0") is not None and plugin_engine("0.32.0").key == "vllm-0.32"


def test_plugin_routes_and_loads_s1_draft_as_stored_on_032(vllm_032: Path) -> None:
    s1 = _plugin_032(vllm_032)["s1"]
    assert "error" not in s1, s1.get("error")
    for registry in ("cpu", "cuda"):  # vllm.models.deepseek_v4 / deepseek_v41's quant config
        assert s1[registry]["vllm"] == {"0": "ModelOptNvFp4FusedMoE", "2": "ModelOptNvFp4FusedMoE"}
        assert s1[registry]["plugin"] == {"0": "ModelOptNvFp4FusedMoE", "2": "Mxfp4MoEMethod"}
        assert s1[registry]["decisions"] == ["model.layers.2.ffn.experts:mxfp4->mxfp4"]
    assert s1["load"] == "clean"  # LoadGuard (raising) around 0.32's own draft weight load


@pytest.mark.parametrize("kind", ["truncated", "missing", "lying"])
def test_plugin_on_hostile_checkpoints_is_vllm_plus_one_warning_on_032(vllm_032: Path, kind: str) -> None:
    got = _plugin_032(vllm_032)["hostile"][kind]
    assert "error" not in got, got.get("error")
    assert got["plugin"] == got["vllm"]  # the same methods, the same load outcome (vLLM's own error)
    assert got["vllm"]["load"] != "clean"  # vLLM itself refuses these files at load
    assert len(got["warnings"]) == 1 and "cannot read" in got["warnings"][0], got["warnings"]
    assert got["decisions"] == 0
