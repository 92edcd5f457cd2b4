"""What a newcomer's mistakes print: a file inside a checkpoint instead of its
directory, the folder `factory s4` writes (target/ and drafter/), a truncated
shard, a mistyped path, counts of one (issue 24, items 8, 9, 17)."""

from __future__ import annotations

import shutil

import pytest

from specguard.checkpoint.source import open_checkpoint
from specguard.checkpoint.writer import save_file
from specguard.cli import main


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture(scope="module")
def single_file(scenarios, tmp_path_factory):
    """S1's tensors in one model.safetensors beside its config.json (no index)."""
    src = open_checkpoint(scenarios["s1"].path)
    d = tmp_path_factory.mktemp("single") / "s1"
    save_file({n: src.read(n) for n in src.tensors}, d / "model.safetensors")
    shutil.copy(scenarios["s1"].path / "config.json", d / "config.json")
    return d


@pytest.mark.parametrize("command", ["lint", "route"])
def test_a_weights_file_is_read_with_the_config_beside_it(single_file, capsys, command):
    code_dir, out_dir, _ = _run(capsys, command, str(single_file))
    code_file, out_file, err = _run(capsys, command, str(single_file / "model.safetensors"))
    assert "no config.json" not in err
    assert code_file == code_dir == 1
    assert out_file.replace(str(single_file / "model.safetensors"), "X") == out_dir.replace(str(single_file), "X")


def test_one_shard_of_an_indexed_checkpoint_asks_for_the_directory(scenarios, capsys):
    s1 = scenarios["s1"].path
    shard = sorted(s1.glob("*.safetensors"))[0]
    code, _, err = _run(capsys, "lint", str(shard))
    assert code == 2 and err.count("\n") == 1
    assert "pass the directory" in err and str(s1) in err


@pytest.mark.parametrize("name", ["config.json", "model.safetensors.index.json"])
def test_config_or_index_asks_for_the_directory(scenarios, capsys, name):
    s1 = scenarios["s1"].path
    code, _, err = _run(capsys, "inspect", str(s1 / name))
    assert code == 2 and err.count("\n") == 1
    assert f"pass the directory ({s1})" in err and "header length" not in err


def test_a_folder_of_target_and_drafter_says_how_to_pass_them(scenarios, capsys):
    root = scenarios["s4"].path.parent
    assert {p.name for p in root.iterdir()} == {"target", "drafter"}
    code, _, err = _run(capsys, "lint", str(root))
    assert code == 2 and err.count("\n") == 1
    assert "drafter/, target/" in err and f"{root / 'target'} --draft {root / 'drafter'}" in err


@pytest.mark.parametrize("command", ["lint", "route"])
def test_the_target_alone_names_the_drafter_beside_it(scenarios, capsys, command):
    target, drafter = scenarios["s4"].path, scenarios["s4"].drafter_path
    _, _, err = _run(capsys, command, str(target))
    assert f"note: {drafter} beside {target} looks like its separate drafter" in err
    assert f"pass --draft {drafter}" in err
    _, _, err = _run(capsys, command, str(target), "--draft", str(drafter))
    assert "note:" not in err


def test_a_checkpoint_without_a_drafter_beside_it_gets_no_note(scenarios, capsys):
    _, _, err = _run(capsys, "lint", str(scenarios["s2"].path))
    assert "note:" not in err


def test_a_truncated_shard_says_truncated(scenarios, tmp_path, capsys):
    d = tmp_path / "s1"
    shutil.copytree(scenarios["s1"].path, d)
    shard = sorted(d.glob("*.safetensors"))[-1]
    shard.write_bytes(shard.read_bytes()[:-100])
    code, _, err = _run(capsys, "lint", str(d))
    assert code == 2 and err.count("\n") == 1 and "truncated" in err


def test_a_mistyped_path_with_a_slash_gives_both_readings(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    code, _, err = _run(capsys, "lint", "out/s1-fixd")
    assert code == 2 and err.count("\n") == 1
    assert "no such local path" in err and "not in the local Hugging Face cache" in err


def test_counts_of_one_are_singular():
    from specguard.terminal import plural

    assert plural(1, "hard link") == "1 hard link" and plural(4, "hard link") == "4 hard links"
    assert plural(1, "held-out prompt") == "1 held-out prompt"
