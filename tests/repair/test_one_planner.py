"""One fix model (issue 24 item 2): the edits `specguard lint --format json` prints for a
platform, applied to the checkpoint's config.json, give the config `specguard fix
--platform P --out DIR` writes; lint's fixes and fix's repair come from one planner."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specguard.cli import main
from specguard.declared.edits import ConfigEdit, apply_all


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
    """S4: the drafter's config.json is the one to edit, and lint says so."""
    info = scenarios["s4"]
    main(["lint", str(info.path), "--draft", str(info.drafter_path), "--platform", "cuda"])
    text = capsys.readouterr().out
    assert f"{info.drafter_path.name}/config.json quantization_config.ignore" in text.replace("\n", " ")
