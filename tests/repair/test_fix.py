"""`specguard fix` on every factory scenario: the repaired directory routes and lints
clean on each platform class, the source is never touched, and bad input writes nothing."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from specguard.checkpoint.source import open_checkpoint
from specguard.cli import main
from specguard.factory import SCENARIOS
from specguard.repair import shards
from tests.repair.conftest import fix

PLATFORMS = ("cuda", "rocm", "cpu")
BROKEN = {"s1", "s1-dspark", "s1-u8", "s2", "s4", "s6-bf16", "s7", "q1", "q1-listed", "q2", "q3", "q4-fc"}
CLEAN = {"s3", "s3-fp8", "s6", "s8", "s8-nvfp4", "q0", "q0-ct", "q1-dense"}
UNREPAIRABLE = {"s5", "q4"}


def test_every_scenario_is_classified() -> None:
    assert set(SCENARIOS) == BROKEN | CLEAN | UNREPAIRABLE


def _digest(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def _route_and_lint(out: Path, platform: str, drafter: bool) -> tuple[int, int]:
    paths = [str(out / "target"), "--draft", str(out / "drafter")] if drafter else [str(out)]
    route = main(["route", *paths, "--platform", platform, "--json"])
    lint = main(["lint", *paths, "--platform", platform, "--fail-on", "error", "--format", "json"])
    return route, lint


@pytest.mark.parametrize("name", sorted(BROKEN))
@pytest.mark.parametrize("choice", ["all", "cuda", "cpu"])
def test_repaired_routes_ok_and_lints_without_errors(scenarios, repaired, name: str, choice: str,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    before = _digest(scenarios[name].path.parent)
    out = repaired(name, choice)
    assert out is not None and out.is_dir()
    drafter = scenarios[name].drafter_path is not None
    for platform in PLATFORMS if choice == "all" else (choice,):
        capsys.readouterr()
        assert _route_and_lint(out, platform, drafter) == (0, 0), (platform, capsys.readouterr().out[-2000:])
    assert _digest(scenarios[name].path.parent) == before  # the source is never written
    assert not [p for p in out.parent.iterdir() if p.name.startswith(f".{out.name}")]  # no temp sibling


@pytest.mark.parametrize("name", sorted(CLEAN))
def test_clean_scenarios_need_nothing(scenarios, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                      name: str) -> None:
    assert fix(scenarios[name].path, tmp_path / "out") == 0
    assert "nothing to repair" in capsys.readouterr().out
    assert not (tmp_path / "out").exists()


def test_fix_on_a_repaired_checkpoint_needs_nothing(repaired, capsys: pytest.CaptureFixture[str],
                                                    tmp_path: Path) -> None:
    for name in ("s1", "s2"):
        assert fix(repaired(name), tmp_path / name) == 0
        assert "nothing to repair" in capsys.readouterr().out


def test_twice_gives_the_same_directory(scenarios, repaired, tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    again = tmp_path / "again"
    assert fix(scenarios["s1"].path, again) == 0
    assert _digest(again) == _digest(repaired("s1"))
    inodes = {p.name: p.stat().st_ino for p in again.iterdir()}
    capsys.readouterr()
    assert fix(scenarios["s1"].path, again) == 0  # into the same DIR: it already holds this repair
    assert "already holds this repair; left as it is" in capsys.readouterr().out
    assert {p.name: p.stat().st_ino for p in again.iterdir()} == inodes
    assert sorted(p.name for p in tmp_path.iterdir()) == ["again"]


def test_a_nan_scale_byte_is_not_rounded_into_bf16(scenarios, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "s1-nan"
    src.mkdir()
    for p in scenarios["s1"].path.iterdir():
        (src / p.name).write_bytes(p.read_bytes())
    ckpt = open_checkpoint(src)
    t = ckpt.tensors["mtp.0.ffn.experts.1.w2.scale"]
    with open(src / t.file, "r+b") as f:
        f.seek(t.offsets[0])
        f.write(b"\xff")  # E8M0 NaN
    assert fix(src, tmp_path / "out") == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("specguard: error: mtp.0.ffn.experts.1.w2: ") and "nothing written" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s1-nan"]


def test_s5_says_what_is_missing_and_writes_nothing(scenarios, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "s5"
    assert fix(scenarios["s5"].path, out) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err
    assert "without input_scale, weight_scale_2" in err and "mtp 0 · ffn.experts 0-3 · w1,w2,w3" in err
    assert "nothing written" in err
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_config_first_writes_only_the_config(scenarios, repaired) -> None:
    src, out = scenarios["s2"].path, repaired("s2")
    written = [p.name for p in out.iterdir() if p.stat().st_ino != (src / p.name).stat().st_ino]
    assert written == ["config.json"]
    assert {p.name for p in out.iterdir()} == {p.name for p in src.iterdir()}
    q = json.loads((out / "config.json").read_text())["quantization_config"]
    assert q["ignore"] == ["lm_head", r"re:model\.layers\.2\."]  # the dead re:.*mtp\..* dropped


def test_s1_on_cuda_is_the_v41_ignore_list(repaired) -> None:
    q = json.loads((repaired("s1", "cuda") / "config.json").read_text())["quantization_config"]
    assert q["ignore"] == ["mtp.0.ffn.experts"] and "ignored_layers" not in q


def test_s1_on_cpu_reencodes_only_the_draft_experts_exactly(scenarios, repaired) -> None:
    src, out = scenarios["s1"].path, repaired("s1", "cpu")
    index = json.loads((out / "model.safetensors.index.json").read_text())["weight_map"]
    old = json.loads((src / "model.safetensors.index.json").read_text())["weight_map"]
    assert set(old) - set(index) == {f"mtp.0.ffn.experts.{e}.{w}.scale" for e in range(4) for w in ("w1", "w2", "w3")}
    changed = {p.name for p in out.iterdir() if p.stat().st_ino != (src / p.name).stat().st_ino}
    shard = {index["mtp.0.ffn.experts.0.w1.weight"]}
    assert changed == {"config.json", "model.safetensors.index.json"} | shard
    a, b = open_checkpoint(src), open_checkpoint(out)
    in_shard = [n for n, t in a.tensors.items() if t.file in shard]
    assert len(in_shard) > 24  # the shard holds other draft modules, copied as they were
    for name in in_shard:
        if name.startswith("mtp.0.ffn.experts.") and name.endswith(".weight"):
            scale = a.read(name.removesuffix("weight") + "scale")
            assert b.tensors[name].dtype == "BF16"
            assert np.array_equal(b.read(name).astype(np.float32), _mxfp4_reference(a.read(name), scale)), name
        elif not name.startswith("mtp.0.ffn.experts."):
            tb, ta = b.tensors[name], a.tensors[name]
            assert (tb.name, tb.dtype, tb.shape) == (ta.name, ta.dtype, ta.shape)
            assert b.read_bytes(name) == a.read_bytes(name)
    q = json.loads((out / "config.json").read_text())["quantization_config"]
    assert q["ignored_layers"] == ["model.layers.2.ffn.experts"]


def _mxfp4_reference(packed: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """OCP MX: low nibble first, E2M1 element times 2^(e8m0 - 127) per 32 elements."""
    b = packed.view(np.uint8)
    nibbles = np.stack([b & 0xF, b >> 4], axis=-1).reshape(*b.shape[:-1], -1)
    values = nibbles.astype(np.uint8).view(ml_dtypes.float4_e2m1fn).astype(np.float32)
    exps = scale.view(np.uint8).astype(np.int32) - 127
    return values * np.repeat(np.exp2(exps.astype(np.float64)).astype(np.float32), 32, axis=-1)


def test_output_names_the_change_and_the_added_size(scenarios, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    assert fix(scenarios["s1"].path, tmp_path / "o") == 0
    out = capsys.readouterr().out
    assert 'add "model.layers.2.ffn.experts" to config.json quantization_config.ignored_layers' in out
    assert 'remove "mtp.*" from config.json quantization_config.ignored_layers' in out
    assert "re-encode 12 module(s) to bf16 (exact): mtp 0 · ffn.experts 0-3 · w1,w2,w3" in out
    assert "adds 577.4 KB" in out and "verified: route 44/44 ok on cuda, rocm, cpu; lint: no error" in out


# --- the output directory ----------------------------------------------------------------


def test_out_must_be_new_or_empty_and_outside_the_source(scenarios, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    src = scenarios["s1"].path
    full = tmp_path / "full"
    full.mkdir()
    (full / "x").write_text("keep")
    assert fix(src, full) == 2
    assert (full / "x").read_text() == "keep" and len(list(full.iterdir())) == 1
    assert fix(src, src / "inside") == 2
    assert not (src / "inside").exists()
    printed = capsys.readouterr()
    errors = printed.err.strip().splitlines()
    assert len(errors) == 2 and "new or empty" in errors[0] and "outside the source" in errors[1]
    assert printed.out == ""  # refused before the plan is printed
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    assert fix(src, a_file) == 2
    printed = capsys.readouterr()
    assert printed.out == "" and "new or empty" in printed.err
    empty = tmp_path / "empty"
    empty.mkdir()
    assert fix(src, empty, "--platform", "cuda") == 0 and (empty / "config.json").exists()


def test_ctrl_c_leaves_nothing(scenarios, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(shards, "write_shard", interrupted)
    assert fix(scenarios["s1"].path, tmp_path / "out") == 130
    assert list(tmp_path.iterdir()) == []


def test_bad_input_is_one_line_and_writes_nothing(scenarios, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad"
    bad.mkdir()
    for p in scenarios["s1"].path.iterdir():
        os.link(p, bad / p.name)
    (bad / "model-00005-of-00005.safetensors").unlink()
    assert fix(bad, tmp_path / "out") == 2
    assert fix(scenarios["s1"].path, tmp_path / "out2", "--remote") == 2
    assert main(["fix", str(scenarios["s1"].path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3 and all(line.startswith("specguard: error: ") for line in err)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad"]


def test_hf_cache_repo_links_the_blobs(scenarios, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from huggingface_hub import constants

    cache = tmp_path / "hub"
    repo = cache / "models--org--s2"
    snap, blobs = repo / "snapshots" / ("a" * 40), repo / "blobs"
    snap.mkdir(parents=True)
    blobs.mkdir()
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("a" * 40)
    for i, p in enumerate(sorted(scenarios["s2"].path.iterdir())):
        blob = blobs / f"blob{i}"
        blob.write_bytes(p.read_bytes())
        os.symlink(blob, snap / p.name)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    out = tmp_path / "out"
    assert fix("org/s2", out) == 0
    for p in out.iterdir():
        if p.name != "config.json":
            assert p.stat().st_ino == (snap / p.name).resolve().stat().st_ino  # the blob itself


def test_diff_prints_the_change_and_an_override_only_where_it_fixes(
    scenarios, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["fix", str(scenarios["s1"].path), "--platform", "cuda", "--diff"]) == 0
    out = capsys.readouterr().out
    assert '-      "mtp.*"' in out and '+      "mtp.0.ffn.experts"' in out
    assert "--hf-overrides '{\"quantization_config\":{" in out
    assert main(["fix", str(scenarios["s1-dspark"].path), "--platform", "cuda", "--diff"]) == 0
    out = capsys.readouterr().out
    assert "no --hf-overrides: the DSpark draft builds its own quant config" in out
    assert main(["fix", str(scenarios["s1"].path), "--diff"]) == 0  # cpu: re-encoding is no config change
    assert "no --hf-overrides: re-encoded tensors" in capsys.readouterr().out


def test_remote_checkpoint_gets_the_diff_over_http(scenarios, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """--remote --diff: headers over real HTTP range requests, the change printed, nothing written."""
    from huggingface_hub import constants

    from tests.checkpoint.hubserver import HubServer

    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    with HubServer({"acme/s2": scenarios["s2"].path}) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
        assert main(["fix", "acme/s2", "--remote", "--diff"]) == 0
    out = capsys.readouterr().out
    assert "re:model" in out and "--- acme/s2/config.json" in out
    assert "vllm serve acme/s2 --hf-overrides '" in out
    assert not (tmp_path / "cache").exists() or not list((tmp_path / "cache").rglob("*.safetensors"))


# --- the ModelOpt stack, where the claim lives in config.json or hf_quant_config.json --------------


def _modelopt_without_attention_entry(src: Path, dest: Path, *, config_json: bool) -> Path:
    """S8-nvfp4 whose exclusion list forgot layer 1's BF16 attention (ModelOpt then builds it NVFP4)."""
    dest.mkdir()
    for p in src.iterdir():
        os.link(p, dest / p.name)
    cfg = json.loads((src / "config.json").read_text())
    hf = json.loads((src / "hf_quant_config.json").read_text())
    hf["quantization"]["exclude_modules"].remove("model.layers.1.self_attn*")
    if config_json:
        cfg["quantization_config"]["ignore"].remove("model.layers.1.self_attn*")
    else:
        del cfg["quantization_config"]  # the claim lives in hf_quant_config.json only
    for name, obj in (("config.json", cfg), ("hf_quant_config.json", hf)):
        (dest / name).unlink()
        (dest / name).write_text(json.dumps(obj, indent=2))
    return dest


@pytest.mark.parametrize("config_json", [True, False])
def test_modelopt_exclusions_go_where_the_claim_lives(scenarios, tmp_path: Path, config_json: bool) -> None:
    src = _modelopt_without_attention_entry(scenarios["s8-nvfp4"].path, tmp_path / "src", config_json=config_json)
    assert main(["route", str(src)]) == 1  # misrouted before
    out = tmp_path / "out"
    assert fix(src, out) == 0
    assert _route_and_lint(out, "cuda", False) == (0, 0)
    changed = sorted(p.name for p in out.iterdir() if p.stat().st_ino != (src / p.name).resolve().stat().st_ino)
    if config_json:  # the engines read config.json's list; hf_quant_config.json's is edited alike (no SG103)
        assert changed == ["config.json", "hf_quant_config.json"]
        entries = json.loads((out / "config.json").read_text())["quantization_config"]["ignore"]
        assert json.loads((out / "hf_quant_config.json").read_text())["quantization"]["exclude_modules"] == entries
    else:
        assert changed == ["hf_quant_config.json"]
        entries = json.loads((out / "hf_quant_config.json").read_text())["quantization"]["exclude_modules"]
    # layer 1 also holds NVFP4 MLP modules: its attention is excluded by exact names, not model.layers.1.*
    added = [e for e in entries if e.startswith("model.layers.1.")]
    assert added and all("self_attn" in e for e in added), added


def test_no_override_for_a_claim_in_hf_quant_config(scenarios, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    src = _modelopt_without_attention_entry(scenarios["s8-nvfp4"].path, tmp_path / "src", config_json=False)
    assert main(["fix", str(src), "--diff"]) == 0
    out = capsys.readouterr().out
    assert "+++ repaired/hf_quant_config.json" in out
    assert "no --hf-overrides: the claim lives in hf_quant_config.json" in out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src"]  # --diff alone writes nothing


def test_across_filesystems_every_other_file_is_a_symlink(scenarios, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """No hard link possible (another filesystem: os.link raises EXDEV): symlinks to the
    source's files, which specguard's reader and the verification accept."""
    import errno

    from specguard.repair import write

    def cross_device(*args, **kwargs):
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    monkeypatch.setattr(write.os, "link", cross_device)
    src, out = scenarios["s1"].path, tmp_path / "out"
    assert fix(src, out) == 0
    links = {p.name for p in out.iterdir() if p.is_symlink()}
    assert links == {p.name for p in src.iterdir()} - {"config.json", "model.safetensors.index.json",
                                                       "model-00005-of-00005.safetensors"}
    assert all(os.readlink(out / n) == str(src / n) for n in links)
    monkeypatch.undo()
    assert _route_and_lint(out, "cpu", False) == (0, 0)


def test_q1_the_corrected_dynamic_is_the_only_change(scenarios, repaired) -> None:
    src, out = scenarios["q1"].path, repaired("q1")
    written = [p.name for p in out.iterdir() if p.stat().st_ino != (src / p.name).stat().st_ino]
    assert written == ["config.json"]
    q = json.loads((out / "config.json").read_text())["quantization_config"]
    assert list(q["dynamic"]) == ["-:.*mtp.*", "-:.*attn.*", "-:.*shared_expert.*"]


def test_q2_the_index_names_the_drafter_file(scenarios, repaired) -> None:
    src, out = scenarios["q2"].path, repaired("q2")
    written = [p.name for p in out.iterdir() if p.stat().st_ino != (src / p.name).stat().st_ino]
    assert written == ["model.safetensors.index.json"]
    index = json.loads((out / "model.safetensors.index.json").read_text())
    drafts = {n for n in scenarios["q2"].tensors if n.startswith("mtp.")}
    assert {n for n, f in index["weight_map"].items() if f == "model_extra_tensors.safetensors"} == drafts
    assert open_checkpoint(out).outside_index == ()


@pytest.mark.parametrize(("name", "says"), [("q4", "no repair strategy")])
def test_what_fix_cannot_write_yet_is_one_line_and_nothing_written(scenarios, tmp_path: Path, name: str, says: str,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    assert fix(scenarios[name].path, tmp_path / "out") == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and says in err
    assert not (tmp_path / "out").exists()


def test_q3_the_expert_tensors_are_renamed_byte_for_byte(scenarios, repaired) -> None:
    src, out = open_checkpoint(scenarios["q3"].path), open_checkpoint(repaired("q3"))
    old = {n for n in src.tensors if ".experts.down_proj." in n or ".experts.gate_proj." in n
           or ".experts.up_proj." in n}
    assert len(old) == 48 and not old & set(out.tensors)
    for n in old:
        head, rest = n.split(".experts.")
        proj, e, tail = rest.split(".", 2)
        new = f"{head}.experts.{e}.{proj}.{tail}"
        assert out.read_bytes(new) == src.read_bytes(n)


_PAUSED_FIX = """
import sys, time
from specguard.repair import shards
from specguard.cli import main

def paused(*args, **kwargs):
    print("writing", file=sys.stderr, flush=True)
    time.sleep(600)

shards.write_shard = paused
sys.exit(main(["fix", sys.argv[1], "--out", sys.argv[2]]))
"""


def _fix_paused_mid_write(src: Path, out: Path) -> subprocess.Popen:
    """A real ``specguard fix`` process, stopped while it writes its first shard."""
    proc = subprocess.Popen([sys.executable, "-c", _PAUSED_FIX, str(src), str(out)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None and proc.stderr.readline() == "writing\n"
    return proc


def test_a_killed_fix_leaves_a_sibling_the_next_fix_removes(scenarios, tmp_path: Path) -> None:
    """SIGTERM: the sibling goes at once (exit 143); SIGKILL: no handler runs, so the
    sibling stays until the next fix of DIR, which removes it (its process is gone)
    and leaves alone the sibling of a fix still running."""
    src, out = scenarios["s1"].path, tmp_path / "out"
    term = _fix_paused_mid_write(src, out)
    assert (tmp_path / f".out.specguard-fix-{term.pid}").is_dir()
    term.send_signal(signal.SIGTERM)
    assert term.wait(timeout=60) == 143
    assert list(tmp_path.iterdir()) == []
    killed = _fix_paused_mid_write(src, out)
    killed.send_signal(signal.SIGKILL)
    assert killed.wait(timeout=60) == -signal.SIGKILL
    orphan = tmp_path / f".out.specguard-fix-{killed.pid}"
    assert orphan.is_dir()
    running = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        live = tmp_path / f".out.specguard-fix-{running.pid}"
        live.mkdir()
        assert fix(src, out) == 0
        assert not orphan.exists() and live.is_dir() and (out / "config.json").is_file()
    finally:
        running.kill()
        running.wait()
