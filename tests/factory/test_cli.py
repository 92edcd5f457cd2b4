"""``specguard factory``: writes a scenario, refuses bad input with one line and exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from specguard.factory import sample_checkpoint
from specguard.factory.cli import main


def test_writes_a_scenario(tmp_path: Path, capsys) -> None:
    assert main(["s3", str(tmp_path / "out"), "--seed", "3"]) == 0
    assert (tmp_path / "out" / "model.safetensors.index.json").is_file()
    assert "s3" in capsys.readouterr().out


def test_s4_writes_target_and_drafter(tmp_path: Path) -> None:
    assert main(["s4", str(tmp_path / "out")]) == 0
    assert (tmp_path / "out" / "target" / "config.json").is_file()
    assert (tmp_path / "out" / "drafter" / "config.json").is_file()


@pytest.mark.parametrize("argv", [
    ["s9", "{out}"],
    ["s1", "{nonempty}"],
    ["s1", "{file}"],
    ["s1", "{out}", "--seed", "x"],
    ["s1"],
])
def test_bad_input_one_line_exit_2(tmp_path: Path, capsys, argv) -> None:
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "keep.txt").write_text("x")
    (tmp_path / "afile").write_text("x")
    paths = {"out": tmp_path / "new", "nonempty": tmp_path / "full", "file": tmp_path / "afile"}
    args = [a.format(**paths) for a in argv]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("specguard: error: ")
    assert (tmp_path / "full" / "keep.txt").read_text() == "x"
    assert not (tmp_path / "new").exists()


def test_empty_existing_dir_is_fine(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    assert main(["s7", str(tmp_path / "empty")]) == 0


def test_sample_checkpoint_generated_once_into_the_cache(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    first = sample_checkpoint()
    assert first.is_relative_to(tmp_path / "cache" / "specguard")
    index = first / "model.safetensors.index.json"
    stamp = index.stat().st_mtime_ns
    assert sample_checkpoint() == first and index.stat().st_mtime_ns == stamp
    assert '"moe_quant_algo": "NVFP4"' in (first / "config.json").read_text()
    assert not [p for p in first.parent.iterdir() if p.name.startswith(".sample-")]
