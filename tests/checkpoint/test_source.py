"""Sources: sharded with index, single file, shards without index, HF cache; hostile indexes."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from specguard.checkpoint import CheckpointError, open_checkpoint
from specguard.checkpoint.writer import save_file, save_index


def _sharded(root, shards=3):
    weight_map = {}
    for i in range(shards):
        name = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        tensors = {f"layers.{i}.w.weight": np.zeros((4, 4), np.float32)}
        save_file(tensors, root / name)
        weight_map.update(dict.fromkeys(tensors, name))
    save_index(weight_map, root, 64 * shards)
    (root / "config.json").write_text(json.dumps({"num_hidden_layers": shards}))
    return weight_map


def test_sharded_with_index(tmp_path):
    wm = _sharded(tmp_path)
    ckpt = open_checkpoint(tmp_path)
    assert set(ckpt.tensors) == set(wm)
    assert all(ckpt.tensors[n].file == f for n, f in wm.items())
    assert ckpt.config == {"num_hidden_layers": 3}
    assert ckpt.bytes_read[0] == 0  # headers only


def test_single_file_and_shards_without_index(tmp_path):
    save_file({"a.weight": np.zeros(2, np.float32)}, tmp_path / "model.safetensors")
    assert set(open_checkpoint(tmp_path).tensors) == {"a.weight"}
    assert set(open_checkpoint(tmp_path / "model.safetensors").tensors) == {"a.weight"}
    d = tmp_path / "noindex"
    save_file({"a.weight": np.zeros(2, np.float32)}, d / "x-1.safetensors")
    save_file({"b.weight": np.zeros(2, np.float32)}, d / "x-2.safetensors")
    assert set(open_checkpoint(d).tensors) == {"a.weight", "b.weight"}


def test_read_returns_the_bytes_and_counts_them(tmp_path):
    arr = np.arange(12, dtype=np.float32).reshape(3, 4)
    save_file({"a.weight": arr, "b.weight": arr * 2}, tmp_path / "model.safetensors")
    ckpt = open_checkpoint(tmp_path)
    np.testing.assert_array_equal(ckpt.read("b.weight"), arr * 2)
    assert ckpt.bytes_read[0] == 96  # the whole 4 KiB page it lies in, as far as the file holds tensor data


def test_bytes_read_never_exceeds_the_tensor_data(tmp_path):
    # A checkpoint smaller than a page, read twice by two kinds of read (lint printed
    # "11377.778% of the checkpoint": each read counted a whole page, every time).
    save_file({"a.weight": np.zeros(9, np.float32)}, tmp_path / "model.safetensors")
    ckpt = open_checkpoint(tmp_path)
    ckpt.read_bytes_range("a.weight", 4)
    ckpt.read_ranges(["model.safetensors"], np.array([0]), np.array([ckpt.tensors["a.weight"].offsets[0]]),
                     np.array([36]))
    ckpt.read("a.weight")
    assert ckpt.bytes_read[0] == ckpt.total_bytes == 36


def test_shard_sections_from_the_headers_are_the_tensors_spans(tmp_path):
    """Lint counts pages inside each shard's tensor data: the reader gives each shard's section
    from its header (the tensors tile it), the same as the tensors' own first and last bytes."""
    from dataclasses import replace

    save_file({"a.weight": np.zeros(300, np.float32), "b.weight": np.ones(5000, np.float32)},
              tmp_path / "model-1.safetensors")
    save_file({"c.weight": np.zeros(7, np.float16)}, tmp_path / "model-2.safetensors")
    save_index({"a.weight": "model-1.safetensors", "b.weight": "model-1.safetensors",
                "c.weight": "model-2.safetensors"}, tmp_path, 300 * 4 + 5000 * 4 + 7 * 2)
    ckpt = open_checkpoint(tmp_path)
    spans = {f: (min(t.offsets[0] for t in ckpt.tensors.values() if t.file == f),
                 max(t.offsets[1] for t in ckpt.tensors.values() if t.file == f)) for f in ckpt.files}
    assert dict(ckpt.sections) == spans
    found = replace(ckpt, sections=None)  # (a file the index never names: from the tensors)
    ids, lo, hi = found._sections
    assert {f: (int(lo[i]), int(hi[i])) for f, i in ids.items()} == spans
    assert found.total_bytes == ckpt.total_bytes == 300 * 4 + 5000 * 4 + 7 * 2
    # one range charged page by page in ints (SG402) counts what the array path counts
    ckpt.read_bytes_range("b.weight", 6000)
    found.read_ranges(["model-1.safetensors"], np.array([0]), np.array([ckpt.tensors["b.weight"].offsets[0]]),
                      np.array([6000]))
    assert ckpt.bytes_read[0] == found.bytes_read[0] > 6000


def _index(root, weight_map):
    (root / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))


def test_index_names_a_missing_shard(tmp_path):
    _sharded(tmp_path)
    _index(tmp_path, {"layers.0.w.weight": "gone.safetensors"})
    with pytest.raises(CheckpointError, match=r"gone.safetensors.*does not exist"):
        open_checkpoint(tmp_path)


def test_index_names_a_tensor_the_shard_lacks(tmp_path):
    wm = _sharded(tmp_path)
    wm["layers.9.w.weight"] = wm["layers.0.w.weight"]
    _index(tmp_path, wm)
    with pytest.raises(CheckpointError, match=r"layers.9.w.weight.*shard lacks it"):
        open_checkpoint(tmp_path)


def test_tensor_in_two_shards(tmp_path):
    save_file({"a.weight": np.zeros(2, np.float32)}, tmp_path / "x-1.safetensors")
    save_file({"a.weight": np.zeros(2, np.float32)}, tmp_path / "x-2.safetensors")
    with pytest.raises(CheckpointError, match="also stored in"):
        open_checkpoint(tmp_path)


@pytest.mark.parametrize("shard", ["../outside.safetensors", "/etc/passwd", "sub/../../x.safetensors"])
def test_shard_path_escaping_the_directory(tmp_path, shard):
    root = tmp_path / "ckpt"
    root.mkdir()
    save_file({"a.weight": np.zeros(2, np.float32)}, tmp_path / "outside.safetensors")
    _index(root, {"a.weight": shard})
    with pytest.raises(CheckpointError, match="escapes the checkpoint directory"):
        open_checkpoint(root)


def test_symlink_escaping_the_directory(tmp_path):
    root = tmp_path / "ckpt"
    root.mkdir()
    save_file({"a.weight": np.zeros(2, np.float32)}, tmp_path / "outside.safetensors")
    os.symlink(tmp_path / "outside.safetensors", root / "link.safetensors")
    _index(root, {"a.weight": "link.safetensors"})
    with pytest.raises(CheckpointError, match="symlink"):
        open_checkpoint(root)


def test_hostile_index_json(tmp_path):
    (tmp_path / "model.safetensors.index.json").write_text('{"weight_map": [1, 2]}')
    with pytest.raises(CheckpointError, match="weight_map"):
        open_checkpoint(tmp_path)
    (tmp_path / "model.safetensors.index.json").write_text("{not json")
    with pytest.raises(CheckpointError, match="not readable JSON"):
        open_checkpoint(tmp_path)


def test_missing_path_and_empty_dir(tmp_path):
    with pytest.raises(CheckpointError, match="no such file"):
        open_checkpoint(tmp_path / "nope")
    with pytest.raises(CheckpointError, match=r"no \*\.safetensors"):
        open_checkpoint(tmp_path)


def test_hf_cache_repo_id_without_network(tmp_path, monkeypatch):
    """A repo id resolves through huggingface_hub's real cache layout, offline."""
    from huggingface_hub import constants

    cache = tmp_path / "hub"
    repo = cache / "models--acme--tiny"
    commit = "a" * 40
    snap = repo / "snapshots" / commit
    blobs = repo / "blobs"
    blobs.mkdir(parents=True)
    snap.mkdir(parents=True)
    save_file({"a.weight": np.zeros(2, np.float32)}, blobs / "blob1")
    (blobs / "blob2").write_text(json.dumps({"num_hidden_layers": 1}))
    os.symlink(blobs / "blob1", snap / "model.safetensors")
    os.symlink(blobs / "blob2", snap / "config.json")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    ckpt = open_checkpoint("acme/tiny")
    assert set(ckpt.tensors) == {"a.weight"} and ckpt.config == {"num_hidden_layers": 1}
    with pytest.raises(CheckpointError, match="not in the local Hugging Face cache"):
        open_checkpoint("acme/absent")


def _cache_with(cache, repo_id: str, commit: str = "b" * 40):
    """A real huggingface_hub cache layout holding one snapshot of ``repo_id`` at ``main``."""
    repo = cache / f"models--{repo_id.replace('/', '--')}"
    snap = repo / "snapshots" / commit
    snap.mkdir(parents=True)
    save_file({"a.weight": np.zeros(2, np.float32)}, snap / "model.safetensors")
    (snap / "config.json").write_text(json.dumps({"num_hidden_layers": 1}))
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    return snap


def test_revision_and_cache_dir_are_named_and_used(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    other = tmp_path / "download-dir"
    _cache_with(other, "acme/elsewhere")
    # a cache that is not the user's default one (vLLM's --download-dir)
    assert set(open_checkpoint("acme/elsewhere", cache_dir=other).tensors) == {"a.weight"}
    with pytest.raises(CheckpointError, match=r"revision 'v2' is not in the local Hugging Face cache at "):
        open_checkpoint("acme/elsewhere", revision="v2", cache_dir=other)


def test_revision_on_a_local_path_is_refused(tmp_path):
    from specguard.errors import UsageError

    save_file({"a.weight": np.zeros(2, np.float32)}, tmp_path / "model.safetensors")
    with pytest.raises(UsageError, match="applies to a Hugging Face repo id"):
        open_checkpoint(tmp_path, revision="v2")


def test_a_text_file_named_model_safetensors_is_not_a_safetensors_file(tmp_path):
    (tmp_path / "model.safetensors").write_text("Hello, this is a text file, not tensors\n" * 4)
    with pytest.raises(CheckpointError) as err:
        open_checkpoint(tmp_path)
    assert str(err.value).startswith(f"{tmp_path / 'model.safetensors'}: not a safetensors file")


def test_symlinked_shards_on_another_disk_are_read_only_when_asked(scenarios, tmp_path):
    """The CLI reads what the directory holds; an engine (follow_links) reads the links too."""
    src = scenarios["s1"].path
    moved, ckpt = tmp_path / "other-disk", tmp_path / "ckpt"
    moved.mkdir()
    ckpt.mkdir()
    for f in src.iterdir():
        if f.suffix == ".safetensors":
            (moved / f.name).write_bytes(f.read_bytes())
            (ckpt / f.name).symlink_to(moved / f.name)
        else:
            (ckpt / f.name).write_bytes(f.read_bytes())
    (moved / "config.json").unlink(missing_ok=True)  # not an overlay written by `specguard fix`
    with pytest.raises(CheckpointError, match="symlink that escapes"):
        open_checkpoint(ckpt)
    assert set(open_checkpoint(ckpt, follow_links=True).tensors) == set(open_checkpoint(src).tensors)
