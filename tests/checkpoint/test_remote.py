"""--remote: headers over real HTTP range requests, never tensor data."""

from __future__ import annotations

import json

import numpy as np
import pytest

from specguard.checkpoint import CheckpointError, open_checkpoint
from specguard.checkpoint.writer import save_file, save_index
from tests.checkpoint.hubserver import HubServer


@pytest.fixture
def hub_env(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    return tmp_path


def _repo(root, big=False):
    root.mkdir()
    wm = {}
    for i in range(2):
        name = f"model-0000{i + 1}-of-00002.safetensors"
        # `big`: many tensors so the header exceeds the first 100 kB range read
        n, shape = (3000, (16, 16)) if big else (2, (512, 512))
        tensors = {f"layers.{i}.m{j}.weight": np.zeros(shape, np.float32) for j in range(n)}
        save_file(tensors, root / name)
        wm.update(dict.fromkeys(tensors, name))
    save_index(wm, root, 0)
    (root / "config.json").write_text(json.dumps({"num_hidden_layers": 2}))
    return wm


@pytest.mark.parametrize("big", [False, True])
def test_remote_reads_headers_only(hub_env, monkeypatch, big):
    wm = _repo(hub_env / "repo", big)
    data_bytes = sum((hub_env / "repo" / f).stat().st_size for f in set(wm.values()))
    with HubServer({"acme/tiny": hub_env / "repo"}) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
        ckpt = open_checkpoint("acme/tiny", remote=True)
    assert set(ckpt.tensors) == set(wm) and ckpt.config == {"num_hidden_layers": 2} and ckpt.remote
    ranged = [r for r in hub.requests if r[2]]
    assert ranged, "headers must be read with range requests"
    # Far less than the files: the index, config and header bytes only.
    assert hub.bytes_sent < 0.5 * data_bytes
    with pytest.raises(CheckpointError, match="not read from a remote"):
        ckpt.read(next(iter(wm)))


def test_remote_not_found_and_unreachable(hub_env, monkeypatch):
    _repo(hub_env / "repo")
    with HubServer({"acme/tiny": hub_env / "repo"}) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
        with pytest.raises(CheckpointError, match="acme/other"):
            open_checkpoint("acme/other", remote=True)
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens on the discard port
    with pytest.raises(CheckpointError):
        open_checkpoint("acme/tiny", remote=True)


def test_remote_truncated_shard_is_bad_input(hub_env, monkeypatch):
    _repo(hub_env / "repo")
    shard = hub_env / "repo" / "model-00001-of-00002.safetensors"
    shard.write_bytes(shard.read_bytes()[:-10])
    with HubServer({"acme/tiny": hub_env / "repo"}) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
        with pytest.raises(CheckpointError, match=r"model-00001-of-00002\.safetensors"):
            open_checkpoint("acme/tiny", remote=True)


def test_lint_and_route_over_remote_headers(hub_env, monkeypatch, scenarios):
    """Header rules work on --remote; content rules read nothing (no bytes travel)."""
    from specguard.lint import lint
    from specguard.resolve import Resolver

    with HubServer({"acme/s1": scenarios["s1"].path}) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
        r = Resolver.open("acme/s1", remote=True)
        result = lint([r])
    assert {"SG201", "SG202"} <= {f.code for f in result.findings}
    assert result.bytes_read == 0
    assert r.route("model.layers.2.ffn.experts").verdict == "misrouted"
