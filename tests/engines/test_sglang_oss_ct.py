"""SGLang 0.5.23's gpt-oss (``Mxfp4Config``) and compressed-tensors, per module (docs/engines.md
"SGLang 0.5.23: gpt-oss, MXFP4, compressed-tensors").

The record (plans/sglang-0.5.23/gpt_oss.json, compressed_tensors.json) is SGLang run on CPU:
per case its ModelConfig (target and NextN draft), the quant-config class its loader builds,
and per SGLang runtime prefix what that config's own matching answered (compressed-tensors:
``should_ignore_layer`` and ``get_scheme_dict``, asked with the layer class SGLang builds there;
``Mxfp4Config.get_quant_method`` for a linear). test_sglang_recorded.py re-records it in its one
SGLang start. These tests write the same checkpoints and check the engine model
(engines/sglang/v0_5_23.py) against the record, then the verdicts that follow."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from specguard.cli import main
from specguard.formats import scheme as s
from specguard.layouts import roles as r
from specguard.resolve import MISROUTED, OK, UNKNOWN, Resolver
from tests.engines import overlays

KEY = "sglang-0.5.23"
PLANS = overlays.ROOT / "src/specguard/plans/sglang-0.5.23"
RECORD = {name: case for file in ("gpt_oss.json", "compressed_tensors.json")
          for name, case in json.loads((PLANS / file).read_text())["cases"].items()}


def _load(name: str, path: Path) -> Any:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(name, module)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def cases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The recorded checkpoints, written as scripts/record_sglang.py writes them."""
    script = _load("record_sglang", overlays.ROOT / "scripts/record_sglang.py")
    published = script._published()
    root = tmp_path_factory.mktemp("sglang-oss-ct")
    out: dict[str, Path] = {}
    for name in script.CT_SCENARIOS:
        from specguard.factory import write_scenario

        write_scenario(name, root / name)
        if name.startswith("s"):  # DeepSeek-V4
            script._complete(root / name / "config.json")
        out[name] = root / name
    for name in (*script.OSS, *script.GLM_AIR):
        out[name] = published.build(name, root / name, 4)
    out[script.SGLANG_NAMES] = script.sglang_names(published, root)
    assert set(out) == set(RECORD)
    return out


def _routes(path: Path, **kw: Any) -> dict[str, Any]:
    return {rt.prefix: rt for rt in Resolver.open(path, engine=KEY, **kw).routes()}


@pytest.mark.parametrize("case", sorted(RECORD))
def test_engine_model_agrees_with_sglangs_own_decisions(cases: dict[str, Path], case: str) -> None:
    resolver = Resolver.open(cases[case], engine=KEY)
    model: Any = resolver.vllm
    for side in ("target", "draft"):
        facts = RECORD[case][side]
        assert model.quant_class == facts["quant_config"]["class"], side
        assert model.is_fp4_experts is facts["is_fp4_experts"], side
        if model.quant_class == facts["quant_config"]["class"] and facts["quant_config"]["class"].endswith(
                "CompressedTensorsConfig"):
            assert facts["quant_config"]["packed_modules_mapping"] == {k: list(v) for k, v in model._ct_fused().items()}
        recorded = facts["quant_config"]["prefixes"]
        assert set(recorded) == set(resolver.prefixes())
        assert {p: model.matching(p) for p in recorded} == recorded, side


def test_gpt_oss_20b_loads_as_stored_under_sglang(cases: dict[str, Path]) -> None:
    """openai/gpt-oss-20b's config: Mxfp4Config (recorded), whose ``from_config`` never reads
    ``modules_to_not_convert`` (``ignored_layers`` None, a linear gets None), and gpt_oss.py hands
    the quant config to the experts only: attention, router, embedding and head are built BF16,
    the experts MXFP4 (Mxfp4MoEMethod), so every module loads as stored."""
    facts = RECORD["gpt-oss-20b"]["target"]
    assert facts["quant_config"]["class"].endswith("mxfp4.Mxfp4Config")
    assert facts["quant_config"]["ignored_layers"] is None and facts["quant_config"]["is_checkpoint_mxfp4_serialized"]
    assert facts["quant_config"]["prefixes"]["model.layers.0.self_attn.qkv_proj"] == {"mxfp4_linear": None}
    routes = _routes(cases["gpt-oss-20b"])
    assert {rt.verdict for rt in routes.values()} == {OK}
    experts = routes["model.layers.0.mlp.experts"]
    assert experts.vllm.method == "Mxfp4MoEMethod" and experts.vllm.scheme.format == s.MXFP4
    for prefix in ("model.layers.0.self_attn.qkv_proj", "model.layers.0.mlp.router", "lm_head"):
        assert not routes[prefix].vllm.scheme.quantized, prefix
        assert "without the quant config" in routes[prefix].vllm.reason


def test_eagle3_over_gpt_oss_target_side_is_modelled(cases: dict[str, Path]) -> None:
    """The target of an EAGLE-3 drafter, opened as ``route TARGET --draft DRAFTER`` opens it (the
    drafter is laid out by its own Resolver): SGLang's gpt-oss build, not unknown."""
    routes = _routes(cases["gpt-oss-20b"], own_draft=False)
    assert routes and {rt.verdict for rt in routes.values()} == {OK}


def test_gpt_oss_under_another_stack_is_unknown(cases: dict[str, Path], tmp_path: Path) -> None:
    """gpt-oss under compressed-tensors: no SGLang fact recorded (its loader's expert mapping for
    non-mxfp4 stacks is not modelled): unknown with the reason, never ok (SG205, exit 3)."""
    src = cases["gpt-oss-20b"]
    dst = tmp_path / "oss-ct"
    dst.mkdir()
    for f in src.iterdir():
        (dst / f.name).symlink_to(f)
    config = json.loads((src / "config.json").read_text())
    config["quantization_config"] = {"quant_method": "compressed-tensors", "format": "float-quantized",
                                     "config_groups": {"g": {"targets": ["Linear"], "weights": {
                                         "num_bits": 8, "type": "float", "strategy": "channel"}}}}
    (dst / "config.json").unlink()
    (dst / "config.json").write_text(json.dumps(config))
    routes = _routes(dst)
    quantizable = [rt for rt in routes.values() if rt.kind in (r.LINEAR, r.ROUTED_EXPERTS)]
    assert quantizable and {rt.verdict for rt in quantizable} == {UNKNOWN}
    assert "gpt-oss under CompressedTensorsConfig is not modelled" in quantizable[0].reason
    assert main(["route", str(dst), "--engine", KEY]) == 3


def test_s2_under_sglang_per_module(cases: dict[str, Path]) -> None:
    """S2 (DeepSeek-V4, compressed-tensors NVFP4 experts + FP8 block linears, BF16 MTP, ignore
    ``re:.*mtp\\..*``). Recorded from SGLang's own matching: its NextN draft is built at
    ``model.decoder.*``/``model.e_proj``/``model.h_proj``, which the ``mtp`` regex does not match,
    so the ``Linear`` group (FP8 block) builds every draft linear and the draft experts over BF16
    bytes; the experts' NVFP4 regex is written in checkpoint names (``ffn.experts.N.w1``) and
    SGLang asks ``mlp.experts.0.gate_proj``, so the target's NVFP4 experts fall to the ``FusedMoE``
    class target (Linear's FP8 block group). The target's FP8 ``wo_a`` is built BF16
    (deepseek_v4.py: only an Fp8Config with 128x128 blocks keeps wo_a's quant config)."""
    target = RECORD["s2"]["target"]["quant_config"]["prefixes"]
    assert target["model.layers.0.mlp.experts"]["ct_scheme"] == "w8float-block-b128x128-a8"
    draft = RECORD["s2"]["draft"]
    assert draft["architecture"] == "DeepseekV4ForCausalLMNextN"
    assert draft["quant_config"]["prefixes"]["model.decoder.self_attn.wq_b"]["ct_ignored"] is False
    routes = _routes(cases["s2"])
    wrong = {p: rt.vllm.scheme.format for p, rt in routes.items() if rt.verdict == MISROUTED}
    assert wrong == {
        "model.layers.0.mlp.experts": s.FP8_BLOCK, "model.layers.1.mlp.experts": s.FP8_BLOCK,
        "model.layers.0.self_attn.wo_a": s.BF16, "model.layers.1.self_attn.wo_a": s.BF16,
        "model.decoder.self_attn.wqkv_a": s.FP8_BLOCK, "model.decoder.self_attn.wq_b": s.FP8_BLOCK,
        "model.decoder.self_attn.wo_b": s.FP8_BLOCK, "model.decoder.mlp.experts": s.FP8_BLOCK,
        "model.decoder.mlp.shared_experts.gate_up_proj": s.FP8_BLOCK,
        "model.decoder.mlp.shared_experts.down_proj": s.FP8_BLOCK,
        "model.e_proj": s.FP8_BLOCK, "model.h_proj": s.FP8_BLOCK}
    assert routes["model.decoder.self_attn.wo_a"].verdict == OK  # BF16, built without the quant config
    assert routes["model.layers.0.self_attn.wq_b"].verdict == OK  # the target's FP8 block linears
    assert routes["model.decoder.mlp.gate"].verdict == OK  # MoEGate: no quant config


def test_glm_air_exclusion_written_for_vllm_prefixes_matches_nothing_under_sglang(
        cases: dict[str, Path], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """GLM-4.5-Air FP8 (compressed-tensors FP8 channel) whose BF16 nextn layer is excluded as
    ``re:model.layers.4.*`` (vLLM's runtime prefixes): vLLM loads it as stored; SGLang builds the
    NextN layer as ``model.decoder.*`` (and GLM's NextN keeps a compressed-tensors quant config,
    glm4_moe_nextn.py drops only modelopt_fp4), its own ``should_ignore_layer`` (recorded) matches
    none of it, so it builds FP8 over the BF16 draft: 5 modules misrouted, SG101 on the entry."""
    path = cases["glm-4.5-air-fp8-mtp-bf16-excluded"]
    draft = RECORD["glm-4.5-air-fp8-mtp-bf16-excluded"]["draft"]["quant_config"]
    assert draft["ignore"][-1] == "re:model.layers.4.*"
    assert draft["prefixes"]["model.decoder.self_attn.qkv_proj"] == {"ct_ignored": False,
                                                                     "ct_scheme": "w8float-channel-a8"}
    sglang = _routes(path)
    bad = sorted(p for p, rt in sglang.items() if rt.verdict != OK)
    assert bad == ["model.decoder.mlp.experts", "model.decoder.mlp.shared_experts.down_proj",
                   "model.decoder.mlp.shared_experts.gate_up_proj", "model.decoder.self_attn.o_proj",
                   "model.decoder.self_attn.qkv_proj"]
    assert {sglang[p].verdict for p in bad} == {MISROUTED}
    assert sglang["model.eh_proj"].verdict == OK  # glm4_moe_nextn.py: a plain nn.Linear
    vllm = {rt.prefix: rt.verdict for rt in Resolver.open(path, engine="vllm-0.33").routes()}
    assert set(vllm.values()) == {OK}
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["route", str(path), "--engine", "all"]) == 1
    out = capsys.readouterr().out
    # the 5 misrouted, and the nextn head SGLang does not build (the target's serves)
    assert "sglang-0.5.23: 45 ok · 5 misrouted" in out and "vllm-0.33: 50 ok" in out
    assert "the engines differ on 6 module(s)" in out and max(map(len, out.splitlines())) <= 80
    # the FP8 copy as published (its nextn layer FP8 too) loads as stored under both
    assert {rt.verdict for rt in _routes(cases["glm-4.5-air-fp8"]).values()} == {OK}


def test_ignore_entries_as_sglang_matches_them(cases: dict[str, Path]) -> None:
    """Recorded from SGLang's ``should_ignore_layer``/``get_moe_scheme``: a plain entry matches a
    name or a dotted suffix of it, never a prefix, so ``model.decoder.mlp.experts`` ignores nothing
    (SGLang asks ``model.decoder.mlp.experts.0.gate_proj``) while ``decoder.self_attn.o_proj`` and
    a ``re:`` entry do; the fix therefore excludes an experts layer by a ``re:`` entry
    (repair/strategies/exclude.py)."""
    case = "glm-4.5-air-fp8-mtp-bf16-sglang-names"
    draft = RECORD[case]["draft"]["quant_config"]["prefixes"]
    assert draft["model.decoder.mlp.experts"]["ct_ignored"] is False
    assert draft["model.decoder.self_attn.o_proj"]["ct_ignored"] is True
    assert draft["model.decoder.mlp.shared_experts.down_proj"]["ct_ignored"] is True
    routes = _routes(cases[case])
    bad = sorted(p for p, rt in routes.items() if rt.verdict != OK)
    assert bad == ["model.decoder.mlp.experts", "model.decoder.self_attn.qkv_proj"]


def test_fix_all_writes_a_repair_every_engine_loads(cases: dict[str, Path], tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """GLM-4.5-Air FP8 excluded by vLLM's prefixes: ``fix --engine all`` keeps that entry (vLLM's)
    and adds SGLang's names, the experts layer as a ``re:`` entry; lint's SG203 under SGLang names
    the same edit; the repair routes clean under every engine."""
    src, out = cases["glm-4.5-air-fp8-mtp-bf16-excluded"], tmp_path / "out"
    assert main(["fix", str(src), "--engine", "all", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    ignore = json.loads((out / "config.json").read_text())["quantization_config"]["ignore"]
    assert "re:model.layers.4.*" in ignore and "re:model\\.decoder\\.mlp\\.experts(\\.|$)" in ignore
    assert "model.decoder.self_attn.qkv_proj" in ignore and "verified" in printed
    assert main(["lint", str(src), "--engine", KEY, "--format", "json"]) == 1
    edits = [e["value"] for f in json.loads(capsys.readouterr().out)["findings"] if f["code"] == "SG203"
             for e in f["edits"]]
    assert edits and all("re:model\\.decoder\\.mlp\\.experts(\\.|$)" in v for v in edits)
    for engine in ("vllm-0.33", "vllm-0.32", KEY):
        Resolver.clear_cache()
        assert {rt.verdict for rt in Resolver.open(out, engine=engine).routes()} == {OK}, engine


def test_qwen3_5_compressed_tensors_mtp_under_sglang(cases: dict[str, Path], capsys: pytest.CaptureFixture[str],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Qwen3.6 dense W4A16 (Q4-FC: the BF16 ``mtp.fc`` missing from ``ignore``): qwen3_5_mtp.py
    ``_mtp_quant_config`` keeps a compressed-tensors config for the draft (recorded), but ``fc`` is a
    plain ``nn.Linear`` there, so SGLang loads the BF16 ``fc`` as stored where vLLM builds it W4A16;
    the rest of the draft (``mtp.layers.0.*``, fused by the model's ``packed_modules_mapping``,
    recorded) is built INT4 as stored."""
    assert RECORD["q4-fc"]["draft"]["model_quant_config"].endswith("CompressedTensorsConfig")
    assert RECORD["q4-fc"]["draft"]["quant_config"]["prefixes"]["mtp.fc"]["ct_ignored"] is False
    routes = _routes(cases["q4-fc"])
    assert {rt.verdict for rt in routes.values()} == {OK}
    assert not routes["mtp.fc"].vllm.scheme.quantized
    assert routes["mtp.layers.0.self_attn.qkv_proj"].vllm.scheme.format == s.INT4_GROUP
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["route", str(cases["q4-fc"]), "--engine", "all"]) == 1
    assert "the engines differ on 1 module(s): mtp.fc" in capsys.readouterr().out
