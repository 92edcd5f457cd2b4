"""Inside vLLM the plugin reads what vLLM itself reads: shards linked from another
disk, and a repo id in vLLM's download directory at vLLM's revision."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from specguard.integrations.vllm import disk
from tests.integrations import vllm_harness as H
from tests.integrations.test_vllm_routing import MXFP4, experts_method


def _linked_copy(src: Path, root: Path) -> Path:
    """``src`` with every shard a symlink into another directory (models kept on another disk)."""
    other, ckpt = root / "other-disk", root / "ckpt"
    other.mkdir()
    ckpt.mkdir()
    for f in src.iterdir():
        if f.suffix == ".safetensors":
            shutil.copyfile(f, other / f.name)
            (ckpt / f.name).symlink_to(other / f.name)
        else:
            shutil.copyfile(f, ckpt / f.name)
    return ckpt


def test_plugin_routes_a_checkpoint_whose_shards_live_on_another_disk(
    s1_dir: Path, tmp_path: Path, cpu_vllm: None, plugin: None, specguard_log: list[Any],
) -> None:
    ckpt = _linked_copy(s1_dir, tmp_path)
    cfg = H.engine_config(str(ckpt), {"method": "mtp", "num_speculative_tokens": 1})
    H.init_single_rank(cfg)
    assert experts_method(cfg, "cuda", "model.layers.2.ffn")[0] == MXFP4  # read through the links
    assert not any("cannot read" in r.getMessage() for r in specguard_log)


def _hf_cache(cache: Path, repo_id: str, src: Path, revision: str) -> None:
    commit = "c" * 40
    repo = cache / f"models--{repo_id.replace('/', '--')}"
    shutil.copytree(src, repo / "snapshots" / commit)
    (repo / "refs").mkdir()
    (repo / "refs" / revision).write_text(commit)


def test_plugin_resolves_a_repo_id_in_vllms_download_dir_at_vllms_revision(
    s1_mtp: Any, s1_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    from vllm.config import set_current_vllm_config

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    _hf_cache(tmp_path / "downloads", "acme/s1", s1_dir, revision="v2")  # only at v2, only there
    monkeypatch.setattr(s1_mtp.load_config, "download_dir", str(tmp_path / "downloads"))
    monkeypatch.setattr(s1_mtp.model_config, "model", "acme/s1")
    monkeypatch.setattr(s1_mtp.model_config, "revision", "v2")
    disk.forget_failures()
    with set_current_vllm_config(s1_mtp):
        assert disk.engine_source_options("acme/s1") == ("v2", str(tmp_path / "downloads"))
        stored = disk.stored("acme/s1", "model.layers.2.ffn.experts", "mtp")
    assert stored is not None and stored.format == "mxfp4"
