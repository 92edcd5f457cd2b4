"""``specguard factory``: writes a scenario, refuses bad input with one line and exit 2."""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
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


def _lint_the_sample(cache: Path, preexec=None) -> subprocess.CompletedProcess:
    env = {**os.environ, "XDG_CACHE_HOME": str(cache)}
    return subprocess.run([sys.executable, "-m", "specguard.cli", "lint"], env=env, capture_output=True,
                          text=True, timeout=300, preexec_fn=preexec)


def _one_line_naming(proc: subprocess.CompletedProcess, cache: Path, why: str) -> None:
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert str(cache / "specguard") in proc.stderr and why in proc.stderr


def test_a_full_disk_names_where_the_sample_goes(tmp_path: Path) -> None:
    """A real ENOSPC: a 256 KiB tmpfs (needs root to mount) as the cache; the sample is ~2 MB."""
    cache = tmp_path / "cache"
    cache.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(cache)],
                                           capture_output=True).returncode != 0:
        pytest.skip("mounting a small tmpfs needs root")
    try:
        _one_line_naming(_lint_the_sample(cache), cache, "No space left on device")
        assert not [p for p in (cache / "specguard").iterdir()]  # the partial copy is gone
    finally:
        subprocess.run(["umount", str(cache)], check=True)


def test_a_file_size_limit_names_where_the_sample_goes(tmp_path: Path) -> None:
    """A real EFBIG from write(): RLIMIT_FSIZE of 64 KiB on the process (no root needed)."""
    def limited() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # fail the write instead of killing the process
        resource.setrlimit(resource.RLIMIT_FSIZE, (65536, 65536))

    cache = tmp_path / "cache"
    _one_line_naming(_lint_the_sample(cache, limited), cache, "File too large")
