"""One fix model (issue 24 item 2): the edits `specguard lint --format json` prints for a
platform, applied to the checkpoint's config.json, give the config `specguard fix
--platform P --out DIR` writes; lint's fixes and fix's repair come from one planner."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from specguard.cli import main
from specguard.declared.edits import ConfigEdit, apply_all
from specguard.lint import lint
from specguard.resolve import OK, Resolver


def _lint_edits(capsys: pytest.CaptureFixture[str], paths: list[str], platform: str) -> tuple[list[dict], dict]:
    main(["lint", *paths, "--platform", platform, "--format", "json"])
    report = json.loads(capsys.readouterr().out)
    applied = [f for f in report["findings"] if f["applicability"] in ("safe", "platform-specific",
                                                                        "needs-reencode")]
    return [e for f in applied for e in f["edits"]], report


def _applied(src: Path, edits: list[dict]) -> dict:
    config = json.loads((src / "config.json").read_text())
    parsed = [ConfigEdit(e["file"], tuple(e["path"]), e["op"], e["value"], e["index"]) for e in edits]
    return apply_all(parsed, config, None)[0]


@pytest.mark.parametrize(("name", "platform"), [("s1", "cuda"), ("s1", "cpu"), ("s2", "cuda")])
def test_lint_edits_are_the_config_fix_writes(scenarios, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                              name: str, platform: str) -> None:
    src = scenarios[name].path
    edits, report = _lint_edits(capsys, [str(src)], platform)
    assert edits, report  # before the planner was shared, S1's three repairs disagreed
    out = tmp_path / "out"
    assert main(["fix", str(src), "--platform", platform, "--out", str(out)]) == 0
    assert _applied(src, edits) == json.loads((out / "config.json").read_text())


def test_s1_gets_one_repair_per_platform(scenarios, capsys: pytest.CaptureFixture[str]) -> None:
    """S1 on CUDA: ignore += the V4.1 expert name (platform-specific) and the dead
    ignored_layers entry dropped; on CPU: a re-encode, which fix writes."""
    src = str(scenarios["s1"].path)
    _, cuda = _lint_edits(capsys, [src], "cuda")
    by_code = {f["code"]: f for f in cuda["findings"]}
    assert by_code["SG201"]["applicability"] == "platform-specific"
    assert by_code["SG201"]["platforms"] == ["cuda", "rocm"]
    assert by_code["SG201"]["edits"] == [{"file": "config.json", "path": ["quantization_config", "ignore"],
                                          "op": "extend", "value": ["mtp.0.ffn.experts"], "index": None}]
    assert by_code["SG101"]["edits"] == [{"file": "config.json", "path": ["quantization_config", "ignored_layers"],
                                          "op": "discard", "value": ["mtp.*"], "index": None}]
    _, cpu = _lint_edits(capsys, [src], "cpu")
    sg201 = next(f for f in cpu["findings"] if f["code"] == "SG201")
    assert sg201["applicability"] == "needs-reencode" and len(sg201["reencode"]) == 12


def test_separate_drafter_edits_name_the_drafter(scenarios, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """S4 (issue 24 item 4): SG201 keeps declared (file and key), built (class, and whose
    config.json the switch came from) and stored apart, and the fix names the drafter's file."""
    info = scenarios["s4"]
    main(["lint", str(info.path), "--draft", str(info.drafter_path), "--platform", "cuda", "--format", "json"])
    sg201 = next(f for f in json.loads(capsys.readouterr().out)["findings"] if f["code"] == "SG201")
    msg = sg201["message"]
    assert f"declared mxfp4 (deepseek, e8m0, g32) by {info.drafter_path}/config.json expert_dtype=fp4" in msg
    assert f"moe_quant_algo=NVFP4 and no ModelOpt-style ignore list, read from the target's {info.path}/config.json" \
        in msg
    assert f"to {info.drafter_path}/config.json quantization_config.ignore" in sg201["fix"]


def _s2_with_projections_built_as_stored(src: Path, dst: Path) -> Path:
    """S2 (compressed-tensors DeepSeek-V4, BF16 MTP block, dead ``re:.*mtp\\..*``) whose config
    also names e_proj/h_proj by runtime prefix: those two build BF16 as stored."""
    dst.mkdir()
    for f in src.iterdir():
        if f.name != "config.json":
            os.link(f, dst / f.name)
    cfg = json.loads((src / "config.json").read_text())
    cfg["quantization_config"]["ignore"] += ["model.layers.2.e_proj", "model.layers.2.h_proj"]
    (dst / "config.json").write_text(json.dumps(cfg))
    return dst


def test_ct_export_with_a_dead_mtp_pattern_is_repaired(scenarios, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 24 item 3: modules that build as stored are ``ok`` (the dead pattern is SG101's),
    and fix repairs the misrouted MTP attention, experts and shared experts."""
    src = _s2_with_projections_built_as_stored(scenarios["s2"].path, tmp_path / "ct")
    r = Resolver.open(src)
    verdicts = {rt.prefix: rt.verdict for rt in r.routes()}
    assert verdicts["model.layers.2.e_proj"] == verdicts["model.layers.2.h_proj"] == OK
    assert "model.layers.2.ffn.experts" in {p for p, v in verdicts.items() if v != OK}
    out = tmp_path / "out"
    assert main(["fix", str(src), "--out", str(out)]) == 0
    assert "verified: route" in capsys.readouterr().out
    assert all(rt.verdict == OK for rt in Resolver.open(out).routes())
    assert "SG101" not in {f.code for f in lint([Resolver.open(out)]).findings}  # the dead entry is dropped


def test_no_drafter_left_is_said(scenarios, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """S7: fix lowers num_nextn_predict_layers to 0 and says to serve without a speculative config."""
    assert main(["fix", str(scenarios["s7"].path), "--out", str(tmp_path / "o")]) == 0
    out = capsys.readouterr().out
    assert "note: the model then has no drafter: serve it without --speculative-config" in out
    assert "ZeroDivisionError" in out
    main(["lint", str(scenarios["s7"].path), "--format", "json"])
    sg301 = json.loads(capsys.readouterr().out)["findings"][0]
    assert sg301["edits"] == [{"file": "config.json", "path": ["num_nextn_predict_layers"], "op": "set",
                               "value": 0, "index": None}]
    assert "no drafter" in sg301["fix"]
