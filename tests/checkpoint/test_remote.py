"""--remote: headers over real HTTP range requests, never tensor data."""

from __future__ import annotations

import contextlib
import itertools
import json
import re
import struct
from collections.abc import Iterator

import numpy as np
import pytest

from specguard.checkpoint import CheckpointError, open_checkpoint
from specguard.checkpoint.header import MAX_HEADER
from specguard.checkpoint.writer import save_file, save_index
from specguard.cli import main
from tests.checkpoint.hubserver import Answer, HubServer

INDEX = "model.safetensors.index.json"
SHARD1 = "model-00001-of-00002.safetensors"


@pytest.fixture
def hub_env(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))  # specguard's own cache of remote reads
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


def _same(a, b):
    """Two opened checkpoints hold the same tensors, shards and configs."""
    assert dict(a.tensors) == dict(b.tensors) and a.files == b.files
    assert a.config == b.config and a.hf_quant_config == b.hf_quant_config


def _many_shards(root, shards=24, tensors=40):
    root.mkdir()
    wm = {}
    for s in range(shards):
        name = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        t = {f"model.layers.{s}.mlp.experts.{e}.down_proj.weight": np.zeros((4, 2 + e % 5), np.float32)
             for e in range(tensors)}
        save_file(t, root / name)
        wm.update(dict.fromkeys(t, name))
    save_index(wm, root, 0)
    (root / "config.json").write_text(json.dumps({"num_hidden_layers": shards}))
    (root / "hf_quant_config.json").write_text(json.dumps({"quantization": {"quant_algo": "NVFP4"}}))
    return wm


def test_concurrent_reads_match_the_local_pass(hub_env, monkeypatch):
    """24 shards read by the pool: the same checkpoint as the local pass, in shards + 3
    requests (index, two configs), one range read per shard, and reads really overlapping."""
    _many_shards(hub_env / "repo")
    with HubServer({"acme/many": hub_env / "repo"}, delay=0.05) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
        seen = []
        ckpt = open_checkpoint("acme/many", remote=True, progress=lambda done, total: seen.append((done, total)))
    _same(ckpt, open_checkpoint(hub_env / "repo"))
    assert ckpt.commit == hub.commit
    assert seen == [(i, 24) for i in range(1, 25)]  # the bar advances once per shard, on the main thread
    assert len(hub.requests) == 24 + 3
    ranged = [r for r in hub.requests if r.range]
    assert len(ranged) == 24 and len({r.path for r in ranged}) == 24
    # Sequential reads would arrive at least one 50 ms answer apart; the pool sends them
    # together (after the first, which goes alone to size the others' reads).
    arrivals = sorted(r.time for r in ranged)[1:]
    assert min(b - a for a, b in itertools.pairwise(arrivals)) < 0.025


@pytest.mark.parametrize("big", [False, True])
def test_one_range_read_per_shard(hub_env, monkeypatch, big):
    """Headers over 100 kB still fit one read: the first read is sized from the index."""
    _repo(hub_env / "repo", big)
    with HubServer({"acme/tiny": hub_env / "repo"}) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
        open_checkpoint("acme/tiny", remote=True)
    assert [r.method for r in hub.requests].count("HEAD") == 0  # a first audit: the index GET resolves
    assert len([r for r in hub.requests if r.range]) == 2 and len(hub.requests) == 2 + 3
    header_bytes = sum(8 + struct.unpack("<Q", (hub_env / "repo" / f).read_bytes()[:8])[0]
                       for f in (SHARD1, "model-00002-of-00002.safetensors"))
    index_and_configs = sum((hub_env / "repo" / f).stat().st_size for f in (INDEX, "config.json"))
    # The shard read first is asked for generously (nothing calibrates it); the other fits within 3 %.
    assert hub.bytes_sent <= 1.5 * (header_bytes + index_and_configs) + 2 * 100_000 * (not big)


def test_second_audit_of_a_commit_costs_one_request(hub_env, monkeypatch):
    _many_shards(hub_env / "repo", shards=4)
    with HubServer({"acme/many": hub_env / "repo"}) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
        first = open_checkpoint("acme/many", remote=True)
        hub.reset()
        again = open_checkpoint("acme/many", remote=True)
        assert [r.method for r in hub.requests] == ["HEAD"]  # the revision lookup only
        hub.reset()
        pinned = open_checkpoint("acme/many", revision=hub.commit, remote=True)
        assert hub.requests == []  # a commit needs no lookup
        hub.commit = "d" * 40  # a new push: read again, after the HEAD
        moved = open_checkpoint("acme/many", remote=True)
        assert len(hub.requests) == 4 + 4 and hub.requests[0].method == "HEAD"
    _same(first, again)
    _same(first, pinned)
    _same(first, moved)
    cached = list((hub_env / "xdg" / "specguard" / "remote").rglob("*.msgpack"))
    assert sorted(p.name.split(".")[0] for p in cached) == ["c" * 40, "d" * 40]
    cached[0].write_bytes(b"not msgpack")  # a damaged cache entry is a miss, never an error
    with HubServer({"acme/many": hub_env / "repo"}, commit=cached[0].name.split(".")[0]) as hub2:
        monkeypatch.setenv("HF_ENDPOINT", hub2.endpoint)
        open_checkpoint("acme/many", remote=True)


def test_retries_429_after_retry_after_and_503(hub_env, monkeypatch):
    _repo(hub_env / "repo")
    with HubServer({"acme/tiny": hub_env / "repo"}) as hub:
        hub.script[INDEX] = [Answer(429, {"Retry-After": "1"})]
        hub.script[SHARD1] = [Answer(503, {})]
        monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
        ckpt = open_checkpoint("acme/tiny", remote=True)
    assert len(ckpt.tensors) == 4
    index_gets = [r.time for r in hub.requests if r.path.endswith(INDEX)]
    assert len(index_gets) == 2 and index_gets[1] - index_gets[0] >= 1.0  # Retry-After honoured
    assert len([r for r in hub.requests if r.path.endswith(SHARD1)]) == 2


# A proxy the user set, bypassed for the test server: http.client cannot vouch for proxy
# settings (revision.py plain_fits), so the audit goes through the full client, httpx2
# with huggingface_hub's headers (its user agent names no specguard).
FULL_CLIENT = {"HTTP_PROXY": "http://127.0.0.1:9", "HTTPS_PROXY": "http://127.0.0.1:9",
               "NO_PROXY": "127.0.0.1,localhost"}
CLIENT_AGENT = {"plain": "specguard/", "httpx2": "unknown/None; hf_hub/"}


def _use_client(monkeypatch, client: str) -> None:
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy", "NO_PROXY",
                "no_proxy"):
        monkeypatch.delenv(var, raising=False)
    if client == "httpx2":
        for k, v in FULL_CLIENT.items():
            monkeypatch.setenv(k, v)


@pytest.mark.parametrize("client", ["plain", "httpx2"])
def test_token_travels_with_every_request(hub_env, monkeypatch, client):
    _repo(hub_env / "repo")
    _use_client(monkeypatch, client)
    monkeypatch.setenv("HF_TOKEN", "hf_specguardtesttoken")
    with HubServer({"acme/tiny": hub_env / "repo"}) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
        open_checkpoint("acme/tiny", remote=True)
    assert {r.authorization for r in hub.requests} == {"Bearer hf_specguardtesttoken"}
    assert all(r.user_agent.startswith(CLIENT_AGENT[client]) for r in hub.requests)


def test_both_clients_read_the_same_in_the_same_requests(hub_env, monkeypatch):
    """http.client where it can vouch for the settings, httpx2 where not: one answer."""
    wm = _repo(hub_env / "repo", big=True)
    read = {}
    with HubServer({"acme/tiny": hub_env / "repo"}) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
        for client in ("plain", "httpx2"):
            _use_client(monkeypatch, client)
            monkeypatch.setenv("XDG_CACHE_HOME", str(hub_env / f"xdg-{client}"))  # a cold audit each
            hub.reset()
            ckpt = open_checkpoint("acme/tiny", remote=True)
            read[client] = (ckpt.tensors, ckpt.config, sorted((r.method, r.path, r.range) for r in hub.requests))
            assert all(r.user_agent.startswith(CLIENT_AGENT[client]) for r in hub.requests)
    assert set(read["plain"][0]) == set(wm) and read["plain"] == read["httpx2"]


@pytest.mark.parametrize("client", ["plain", "httpx2"])
def test_https_with_the_users_certificates(hub_env, monkeypatch, client):
    """Over TLS, trusting the certificate SSL_CERT_FILE names (as httpx2 does), both clients
    read the same; a certificate nobody vouches for is one line, not a traceback."""
    import shutil
    import ssl
    import subprocess

    if shutil.which("openssl") is None:
        pytest.skip("no openssl to make a certificate with")
    cert, key = hub_env / "cert.pem", hub_env / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                    "-keyout", str(key), "-out", str(cert), "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True, timeout=60)
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(cert, key)
    wm = _repo(hub_env / "repo")
    _use_client(monkeypatch, client)
    with HubServer({"acme/tiny": hub_env / "repo"}, tls=tls) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
        assert hub.endpoint.startswith("https://")
        with pytest.raises(CheckpointError, match=r"(?i)certificate"):
            open_checkpoint("acme/tiny", remote=True)
        monkeypatch.setenv("SSL_CERT_FILE", str(cert))
        ckpt = open_checkpoint("acme/tiny", remote=True)
    assert set(ckpt.tensors) == set(wm)
    assert all(r.user_agent.startswith(CLIENT_AGENT[client]) for r in hub.requests)


def test_a_remote_inspect_imports_neither_httpx2_nor_numpy(hub_env, monkeypatch):
    """The requests go through http.client: neither httpx2 nor huggingface_hub's auth
    headers are imported, nor numpy (no bytes are decoded from headers alone)."""
    import subprocess
    import sys

    _repo(hub_env / "repo")
    out = hub_env / "modules.json"
    probe = ("import json, sys\nfrom specguard.cli import main\ntry:\n    code = main(sys.argv[2:])\nfinally:\n"
             "    open(sys.argv[1], 'w').write(json.dumps(sorted(sys.modules)))\nsys.exit(code)\n")
    _use_client(monkeypatch, "plain")
    with HubServer({"acme/tiny": hub_env / "repo"}) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
        r = subprocess.run([sys.executable, "-c", probe, str(out), "inspect", "acme/tiny", "--remote"],
                           capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "layers" in r.stdout, r.stderr
    loaded = set(json.loads(out.read_text()))
    assert not loaded & {"httpx2", "httpcore2", "huggingface_hub.utils._headers", "numpy", "ml_dtypes"}


def test_ctrl_c_while_the_reading_runs_ahead_is_one_line_and_exit_130(hub_env, monkeypatch):
    """The reading starts in a thread of its own while the command imports its stages
    (remote.py ``prefetch``): Ctrl-C then stops its reads within hubhttp.POLL."""
    import os
    import signal
    import subprocess
    import sys
    import time

    _repo(hub_env / "repo")
    with HubServer({"acme/tiny": hub_env / "repo"}, delay=5.0) as hub:  # each answer 5 s late: three rounds, 15 s
        env = {**os.environ, "HF_ENDPOINT": hub.endpoint}
        proc = subprocess.Popen([sys.executable, "-m", "specguard.cli", "inspect", "acme/tiny", "--remote"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        end = time.monotonic() + 60
        while not hub.requests and time.monotonic() < end:  # the first request is in flight
            time.sleep(0.02)
        assert hub.requests, "no request arrived"
        proc.send_signal(signal.SIGINT)
        t = time.monotonic()
        out, err = proc.communicate(timeout=60)
        took = time.monotonic() - t
    assert (proc.returncode, out, err) == (130, "", "specguard: interrupted\n")
    assert took < 4.0, f"{took:.1f} s: the reads in flight did not stop"
    assert not list((hub_env / "xdg").rglob("*.v1"))  # nothing kept


def test_single_file_repo_in_two_rounds(hub_env, monkeypatch):
    root = hub_env / "single"
    root.mkdir()
    save_file({"a.weight": np.zeros((3, 3), np.float32)}, root / "model.safetensors")
    with HubServer({"acme/one": root}) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
        ckpt = open_checkpoint("acme/one", remote=True)
        assert set(ckpt.tensors) == {"a.weight"} and ckpt.config is None and len(hub.requests) == 4
        (root / "model.safetensors").unlink()
        hub.commit = "e" * 40
        with pytest.raises(CheckpointError, match=r"no model\.safetensors\.index\.json and no model\.safetensors"):
            open_checkpoint("acme/one", remote=True)


def _bad_answers(shard: bytes) -> dict[str, tuple[Answer, str]]:
    """Each way a server can lie about a shard, and the message that must name it."""
    size = len(shard)
    n = struct.unpack("<Q", shard[:8])[0]
    return {
        "truncated range": (Answer(206, {"Content-Range": f"bytes 0-{size - 1}/{size}"}, shard[:100]),
                            "truncated or wrong range"),
        "size says shorter": (Answer(206, {"Content-Range": f"bytes 0-{n - 1}/{n}"}, shard[:n]),
                              "runs past the end of the file"),
        "size says longer": (Answer(206, {}, whole=shard + b"\0" * 64), "data section holds"),
        "header over the cap": (Answer(200, {}, struct.pack("<Q", MAX_HEADER + 1) + b"{}" + b" " * 6), "exceeds the"),
        "HTML error page": (Answer(200, {"Content-Type": "text/html; charset=utf-8"},
                                   b"<!DOCTYPE html><html><body>Service unavailable</body></html>"), "HTML page"),
    }


@pytest.mark.parametrize("case", list(_bad_answers(b"\0" * 16)))
def test_bad_answers_are_one_line_and_exit_2(hub_env, monkeypatch, capsys, case):
    _repo(hub_env / "repo")
    shard = (hub_env / "repo" / SHARD1).read_bytes()
    answer, message = _bad_answers(shard)[case]
    with HubServer({"acme/tiny": hub_env / "repo"}) as hub:
        hub.script[SHARD1] = [answer]
        monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
        with pytest.raises(CheckpointError, match=message) as err:
            open_checkpoint("acme/tiny", remote=True)
        assert SHARD1 in str(err.value)
        hub.script[SHARD1] = [answer]
        assert main(["inspect", "acme/tiny", "--remote"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and message.split()[0] in lines[0]
    assert not list((hub_env / "xdg").rglob("*.msgpack"))  # a bad answer is never cached


def test_no_home_means_no_cache_not_a_cache_in_the_working_directory(monkeypatch, tmp_path):
    """One cache root for the sample and the remote audits; with no home the audit is a miss."""
    from specguard.checkpoint import cache
    from specguard.errors import SpecguardError

    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", "relative-home")  # a HOME that names no directory of its own
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SpecguardError, match="XDG_CACHE_HOME"):
        cache.cache_root()
    assert cache.snapshot_path("https://hub", "acme/x", "a" * 40) is None
    assert not cache.seen("https://hub", "acme/x") and cache.load(None) is None
    cache.save(None, cache.Snapshot(None, {}, []))
    assert list(tmp_path.iterdir()) == []


# Hostile servers (docs/remote.md, "Limits"): each case ends within the audit's deadline
# with one line on stderr and exit 2, and leaves nothing in the cache. Short limits keep
# the suite fast; the defaults are 30 s per request, 120 s per audit, 30 s of retry waits.
# Not shorter: on a loaded machine an honest loopback answer can take a second.
LIMITS = {"SPECGUARD_REMOTE_TIMEOUT": "2", "SPECGUARD_REMOTE_DEADLINE": "6", "SPECGUARD_REMOTE_RETRY_WAIT": "0.5"}
BOUND = 6 + 10.0  # the audit deadline plus slack for a loaded machine; without limits these cases take minutes


def _range_answer(body: bytes, size: int, **kw) -> Answer:
    return Answer(206, {"Content-Range": f"bytes 0-{len(body) - 1}/{size}"}, body, **kw)


HOSTILE: dict[str, tuple[str, list[Answer], str]] = {
    # case: (file, answers given first, what the one line must say)
    "Retry-After an hour": (INDEX, [Answer(429, {"Retry-After": "3600"})], "rate-limits requests.*try again after"),
    "Retry-After past the cap": (INDEX, [Answer(429, {"Retry-After": "2"})], "rate-limits.*_RETRY_WAIT"),
    "slow drip": (SHARD1, [_range_answer(b"\0" * 64, 10_000, drip=5.0)] * 8, "within"),
    "Content-Length that lies, held open": (
        SHARD1, [Answer(206, {"Content-Range": "bytes 0-299/99999", "Content-Length": "300"}, b"\0" * 100,
                        hold=600)] * 8, "within"),
    "500 storm": (INDEX, [Answer(500, {})] * 20, "HTTP 500.*gave up"),
    "503 storm on a shard": (SHARD1, [Answer(503, {})] * 20, "HTTP 503.*gave up"),
    "dropped connections": (SHARD1, [Answer(0, {}, drop=True)] * 20, "dropped the connection"),
    "redirect loop": (INDEX, [Answer(302, {"Location": f"/acme/tiny/resolve/main/{INDEX}"})] * 30, "redirect loop"),
    "redirect to another scheme": (INDEX, [Answer(302, {"Location": "ftp://hub.invalid/x"})], "bad redirect"),
    "redirect without Location": (INDEX, [Answer(302, {})], "bad redirect"),
    "redirect to a closed port": ("config.json", [Answer(302, {"Location": "http://127.0.0.1:9/x"})],
                                  "cannot reach"),
    "missing repo (401)": (INDEX, [Answer(401, {"X-Error-Code": "RepoNotFound",
                                                "X-Error-Message": "Invalid username or password."})],
                           "repository not found.*HF_TOKEN"),
    "gated repo (403)": (INDEX, [Answer(403, {"X-Error-Code": "GatedRepo", "X-Error-Message": "Access restricted"})],
                         "gated repository.*HF_TOKEN"),
    "login page": (INDEX, [Answer(302, {"Location": "/login"})], "HTML page.*HF_TOKEN"),
}


# The full client (httpx2) meets the same hostile cases; those its own code paths answer
# (deadlines inside its network backend, its redirect handling, its connection errors):
FULL_CLIENT_CASES = ("slow drip", "dropped connections", "redirect loop", "redirect to another scheme",
                     "redirect to a closed port", "login page")


@pytest.mark.parametrize(("client", "case"),
                         [("plain", c) for c in HOSTILE] + [("httpx2", c) for c in FULL_CLIENT_CASES])
def test_hostile_server_one_line_within_the_deadline(hub_env, monkeypatch, capfd, client, case):
    import time

    _use_client(monkeypatch, client)
    for k, v in LIMITS.items():
        monkeypatch.setenv(k, v)
    _repo(hub_env / "repo")
    name, answers, message = HOSTILE[case]
    with HubServer({"acme/tiny": hub_env / "repo"}) as hub:
        hub.script[name] = list(answers)
        monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
        t = time.monotonic()
        code = main(["inspect", "acme/tiny", "--remote"])
        took = time.monotonic() - t
    err = capfd.readouterr().err.strip().splitlines()  # fd level: a library's log handler shows here too
    assert code == 2 and len(err) == 1, err
    assert re.search(message, err[0]), err[0]
    assert took < BOUND, f"{case}: {took:.1f} s"
    assert not list((hub_env / "xdg").rglob("*.msgpack"))


def _sparse_single(root, data_bytes):
    """A one-file repo whose shard is ``data_bytes`` long (sparse: nothing written but the header)."""
    root.mkdir()
    header = json.dumps({"w": {"dtype": "U8", "shape": [data_bytes], "data_offsets": [0, data_bytes]}}).encode()
    header += b" " * (-len(header) % 8)
    with open(root / "model.safetensors", "wb") as f:
        f.write(struct.pack("<Q", len(header)) + header)
        f.truncate(8 + len(header) + data_bytes)


def test_whole_file_for_a_range_is_refused_unread(hub_env, monkeypatch, capfd):
    """A server ignoring the range starts a 200 MiB answer: refused from its headers, not downloaded."""
    _sparse_single(hub_env / "big", 200 << 20)
    with HubServer({"acme/big": hub_env / "big"}, honour_range=False) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
        assert main(["inspect", "acme/big", "--remote"]) == 2
    err = capfd.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "ignored the byte range" in err[0] and "209,715," in err[0]
    assert hub.bytes_sent < 32 << 20  # what the socket buffers took before the client hung up, not 200 MiB


def test_small_file_answered_whole_is_accepted(hub_env, monkeypatch):
    """A 200 for a range covering the whole (small) file is what was asked: read, not refused."""
    root = hub_env / "single"
    root.mkdir()
    save_file({"a.weight": np.zeros((3, 3), np.float32)}, root / "model.safetensors")
    with HubServer({"acme/one": root}, honour_range=False) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
        assert set(open_checkpoint("acme/one", remote=True).tensors) == {"a.weight"}


def test_limits_from_the_environment(monkeypatch):
    from specguard.checkpoint.hubhttp import Limits
    from specguard.errors import UsageError

    assert Limits.from_env() == Limits(30.0, 120.0, 30.0)
    monkeypatch.setenv("SPECGUARD_REMOTE_DEADLINE", "5")
    assert Limits.from_env().audit == 5.0
    for bad in ("soon", "-1", "inf", "nan"):
        monkeypatch.setenv("SPECGUARD_REMOTE_TIMEOUT", bad)
        with pytest.raises(UsageError, match="SPECGUARD_REMOTE_TIMEOUT"):
            Limits.from_env()


def test_damaged_cache_entry_is_a_miss_and_the_next_audit_repairs_it(hub_env, monkeypatch):
    _many_shards(hub_env / "repo", shards=4)
    with HubServer({"acme/many": hub_env / "repo"}) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
        first = open_checkpoint("acme/many", remote=True)
        [entry] = (hub_env / "xdg").rglob("*.msgpack")
        data = bytearray(entry.read_bytes())
        # One byte of a cached header flipped: a shape's digit, inside a msgpack bin, so the file still decodes.
        at = data.index(b'"shape":[4,') + len(b'"shape":[')
        data[at] = ord("5")
        entry.write_bytes(bytes(data))
        hub.reset()
        again = open_checkpoint("acme/many", remote=True)
        assert len(hub.requests) == 4 + 4  # a miss: HEAD, then index, configs and shards
        hub.reset()
        third = open_checkpoint("acme/many", remote=True)
        assert [r.method for r in hub.requests] == ["HEAD"]  # repaired: a hit again
    _same(first, again)
    _same(first, third)


def test_second_command_of_a_commit_replays_its_output(hub_env, monkeypatch, capsys):
    """inspect/route/lint --remote of a commit seen with the same options: the kept output
    and exit code after one HEAD, the command itself not run; anything that may change the
    answer (options, specguard's version, its files, a new commit) runs it again."""
    import specguard.cli as cli
    from specguard.commands import replay

    _many_shards(hub_env / "repo", shards=4)
    ran: list[str] = []
    for name in ("_run_inspect", "_run_lint"):
        real = getattr(cli, name)
        monkeypatch.setattr(cli, name, lambda args, real=real, name=name: ran.append(name) or real(args))

    def audit(*argv: str) -> tuple[int, str, str, list[str]]:
        hub.reset()
        ran.clear()
        code = main([*argv, "acme/many", "--remote"])
        out, err = capsys.readouterr()
        return code, out, err, [r.method for r in hub.requests]

    monkeypatch.setenv("HF_TOKEN", "hf_specguardtesttoken")
    with HubServer({"acme/many": hub_env / "repo"}) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
        code, first, _, asked = audit("inspect")
        assert code == 0 and ran == ["_run_inspect"] and len(asked) == 4 + 3
        code, again, _, asked = audit("inspect")
        assert (code, again, asked, ran) == (0, first, ["HEAD"], [])  # replayed: not run
        assert hub.requests[0].authorization == "Bearer hf_specguardtesttoken"  # the plain lookup's too
        code, as_json, _, asked = audit("inspect", "--json")  # other options: run, on the cached headers
        assert ran == ["_run_inspect"] and asked == ["HEAD"] and as_json != first
        lint_code, lint_out, lint_err, _ = audit("lint")
        assert ran == ["_run_lint"] and lint_code == 1  # the NVFP4 claim on FP32 experts
        assert audit("lint") == (lint_code, lint_out, lint_err, ["HEAD"]) and ran == []
        monkeypatch.setattr("specguard._version.__version__", "0.0.0+other")  # another specguard
        assert audit("inspect")[1:] == (first, "", ["HEAD"]) and ran == ["_run_inspect"]
        monkeypatch.setattr(replay, "_package_files", lambda: [("rules_scales.py", 1, 2)])  # an edited file
        assert audit("inspect")[1:] == (first, "", ["HEAD"]) and ran == ["_run_inspect"]
        hub.commit = "d" * 40  # a push
        assert audit("inspect")[1] == first and ran == ["_run_inspect"] and len(hub.requests) == 4 + 4
        assert audit("inspect")[1:] == (first, "", ["HEAD"]) and ran == []
    kept = list((hub_env / "xdg").rglob("*.v1"))
    assert len(kept) == 5 + 1  # at c...: inspect, inspect --json, lint, another version, other files; at d...


@pytest.mark.parametrize("case", ["none", "env", "saved", "disabled", "oauth", "oidc"])
def test_plain_lookup_sends_the_token_huggingface_hub_sends(tmp_path, monkeypatch, case):
    """revision.py's lookup without huggingface_hub: the token build_hf_headers() sends, or
    (OIDC, a refreshable OAuth login) no certainty, and then huggingface_hub's own client."""
    from huggingface_hub import constants
    from huggingface_hub.utils import build_hf_headers

    from specguard.checkpoint.revision import plain_token

    for var in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_OIDC_RESOURCE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(tmp_path / "token"))
    monkeypatch.setattr(constants, "HF_STORED_TOKENS_PATH", str(tmp_path / "stored_tokens"))
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_IMPLICIT_TOKEN", case == "disabled")
    if case in ("env", "disabled"):
        monkeypatch.setenv("HF_TOKEN", " hf_fromenv\n")
    if case in ("saved", "oauth", "disabled"):
        (tmp_path / "token").write_text("hf_saved\n")
    if case == "oauth":
        (tmp_path / "stored_tokens").write_text("[web]\nhf_token = hf_saved\nrefresh_token = r\n"
                                                "expires_at = 99999999999\n")
    if case == "oidc":
        monkeypatch.setenv("HF_OIDC_RESOURCE", "acme/x")
    certain, token = plain_token()
    if case in ("oauth", "oidc"):
        assert (certain, token) == (False, None)
        return
    assert certain
    assert build_hf_headers().get("authorization") == (None if token is None else f"Bearer {token}")
    assert token == {"none": None, "env": "hf_fromenv", "saved": "hf_saved", "disabled": None}[case]


@contextlib.contextmanager
def _kept_audit(hub_env, monkeypatch, capsys) -> Iterator[tuple[HubServer, str]]:
    """A served two-shard repo audited once (its output kept, so the next audit replays it),
    the server's request log cleared."""
    _many_shards(hub_env / "repo", shards=2)
    with HubServer({"acme/many": hub_env / "repo"}) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
        assert main(["inspect", "acme/many", "--remote"]) == 0
        first = capsys.readouterr().out
        hub.reset()
        yield hub, first


def test_replay_lookup_dropped_or_misanswered_goes_to_the_full_client(hub_env, monkeypatch, capsys):
    """The replay's own HEAD (revision.py ``_head``, a socket of its own) takes only a plain
    answer: a dropped connection or a commit that is no hash goes to the full client, which
    retries it or says what is wrong."""
    with _kept_audit(hub_env, monkeypatch, capsys) as (hub, first):
        hub.script[INDEX] = [Answer(0, {}, drop=True)]
        assert main(["inspect", "acme/many", "--remote"]) == 0
        assert capsys.readouterr().out == first and [r.method for r in hub.requests] == ["HEAD", "HEAD"]
        hub.reset()
        hub.script[INDEX] = [Answer(200, {"X-Repo-Commit": "not-a-hash"})] * 2
        assert main(["inspect", "acme/many", "--remote"]) == 2
        out, err = capsys.readouterr()
        assert out == "" and "not a hash" in err and len(err.splitlines()) == 1


def test_replay_lookup_the_plain_client_cannot_vouch_for_goes_to_the_full_one(hub_env, monkeypatch, capsys):
    """A 503 on the replay's HEAD: the full client retries it (two HEADs, the output kept);
    a repo gone private since: the full client's one line, exit 2, nothing printed from the kept run."""
    with _kept_audit(hub_env, monkeypatch, capsys) as (hub, first):
        hub.script[INDEX] = [Answer(503, {})]
        assert main(["inspect", "acme/many", "--remote"]) == 0
        assert capsys.readouterr().out == first and [r.method for r in hub.requests] == ["HEAD", "HEAD"]
        gone = Answer(401, {"X-Error-Code": "RepoNotFound"})
        hub.script[INDEX] = [gone, gone]
        assert main(["inspect", "acme/many", "--remote"]) == 2
        out, err = capsys.readouterr()
        assert out == "" and "repository not found (HTTP 401)" in err and len(err.splitlines()) == 1
