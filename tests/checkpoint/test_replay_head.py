"""A replayed remote audit's one HEAD leaves before the parser and the command import
(checkpoint/plainhead.py), over real HTTP; its answer is used only for the very request
revision.py would send; and what plainhead.py reads without huggingface_hub, re or
limits.py agrees with them."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from specguard import cli
from specguard.checkpoint import kept, plainhead, revision
from specguard.cli import main
from specguard.commands import replay
from specguard.errors import UsageError
from tests.checkpoint.hubserver import HubServer
from tests.checkpoint.test_remote import _many_shards, hub_env  # noqa: F401  # hub_env: the fixture

# Runs the command as an entry point runs it ("console": the console script; "module":
# `python -m specguard.cli`) and writes, at three moments -- "revision": revision.py starts to
# import (the first thing after plainhead.py sends), "argparse": the parser's first module
# starts to import, "exit": the process ends by os._exit (a replay) -- the modules loaded,
# the HEADs plainhead.py sent and the commits revision.py had looked up by then.
_PROBE = """
import json, os, sys
out, entry, sys.argv = sys.argv[1], sys.argv[2], ["specguard", *sys.argv[3:]]
seen = {}

def note(moment):
    if moment not in seen:
        head, rev = (sys.modules.get(f"specguard.checkpoint.{m}") for m in ("plainhead", "revision"))
        seen[moment] = {"sent": [[*k, sock is not None] for k, (_, sock) in getattr(head, "SENT", {}).items()],
                        "looked_up": [[*k, v] for k, v in getattr(rev, "RESOLVED", {}).items()],
                        "loaded": sorted(sys.modules)}
        with open(out, "w") as f:
            json.dump(seen, f)

class Watch:
    def find_spec(self, name, path=None, target=None):
        if name in ("specguard.checkpoint.revision", "argparse"):
            note(name.rpartition(".")[2])
        return None

sys.meta_path.insert(0, Watch())
real_exit = os._exit
os._exit = lambda code: (note("exit"), real_exit(code))
if entry == "console":
    from specguard.__main__ import run
    run()
else:
    import runpy
    runpy.run_module("specguard.cli", run_name="__main__", alter_sys=True)
"""
# What the HEAD would wait for if it left after them (~15-25 ms of a replay; benchmarks/remote.py).
_NOT_BEFORE_THE_HEAD = {"typing", "pathlib", "urllib.parse", "socket", "hashlib", "huggingface_hub", "argparse"}


def _probe(tmp_path, entry: str, *argv: str) -> tuple[subprocess.CompletedProcess[str], dict]:
    (tmp_path / "probe").mkdir(exist_ok=True)
    (tmp_path / "cwd").mkdir(exist_ok=True)  # the first import path: its time is in the kept output's key
    out = tmp_path / "probe" / "probe.json"
    out.unlink(missing_ok=True)
    r = subprocess.run([sys.executable, "-c", _PROBE, str(out), entry, *argv], capture_output=True, text=True,
                       timeout=120, cwd=tmp_path / "cwd")
    assert "Traceback" not in r.stderr, r.stderr
    return r, json.loads(out.read_text())


@pytest.mark.parametrize("entry", ["console", "module"])
def test_kept_audit_replays_before_the_parser_imports(hub_env, monkeypatch, entry):  # noqa: F811
    """A first audit sends nothing ahead (it learns its commit from the index it reads).
    The same words again: the HEAD leaves before anything heavy imports, and the kept output
    is printed from that one request without the parser ever importing. Other words for
    the same audit: the commit is looked up before the parser imports, and the command
    runs on it within that same one HEAD."""
    _many_shards(hub_env / "repo", shards=3)
    with HubServer({"acme/many": hub_env / "repo"}) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
        first, probed = _probe(hub_env, entry, "inspect", "acme/many", "--remote")
        assert first.returncode == 0 and probed["argparse"]["sent"] == []
        assert "HEAD" not in [r.method for r in hub.requests]
        hub.reset()
        again, probed = _probe(hub_env, entry, "inspect", "acme/many", "--remote")
        assert (again.returncode, again.stdout, again.stderr) == (0, first.stdout, first.stderr)
        assert [r.method for r in hub.requests] == ["HEAD"]
        assert probed["revision"]["sent"] == [[hub.endpoint, "acme/many", None, True]]
        assert sorted(_NOT_BEFORE_THE_HEAD & set(probed["revision"]["loaded"])) == []
        assert "argparse" not in probed and "argparse" not in probed["exit"]["loaded"]
        hub.reset()
        other, probed = _probe(hub_env, entry, "inspect", "--remote", "acme/many")
        assert (other.returncode, other.stdout, other.stderr) == (0, first.stdout, first.stderr)
        assert [r.method for r in hub.requests] == ["HEAD"]
        assert probed["argparse"]["looked_up"] == [[hub.endpoint, "acme/many", None, [hub.commit, True]]]
        hub.reset()
        hub.commit = "d" * 40  # a push: the same words audit the new commit, after the same one HEAD
        pushed, _ = _probe(hub_env, entry, "inspect", "acme/many", "--remote")
        assert (pushed.returncode, pushed.stdout) == (0, first.stdout)
        assert [r.method for r in hub.requests].count("HEAD") == 1 and len(hub.requests) > 1
        monkeypatch.setenv("SPECGUARD_REMOTE_DEADLINE", "soon")  # bad input: the command's one line, exit 2
        bad, _ = _probe(hub_env, entry, "inspect", "acme/many", "--remote")
        assert (bad.returncode, bad.stdout) == (2, "") and bad.stderr.startswith("specguard: error: ")
        assert len(bad.stderr.splitlines()) == 1


@pytest.mark.parametrize("module", ["specguard", "specguard.cli"])
def test_ctrl_c_while_the_replay_waits_for_its_head_is_one_line_and_exit_130(hub_env, monkeypatch, module):  # noqa: F811
    """Ctrl-C while the early replay waits for its HEAD's answer (before the command's own
    handler exists): "specguard: interrupted", exit 130, nothing printed from the kept run."""
    import signal
    import time

    _many_shards(hub_env / "repo", shards=2)
    (hub_env / "cwd").mkdir()
    command = [sys.executable, "-m", module, "inspect", "acme/many", "--remote"]
    with HubServer({"acme/many": hub_env / "repo"}) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
        subprocess.run(command, capture_output=True, check=True, timeout=120, cwd=hub_env / "cwd")
        hub.reset()
        hub.delay = 30.0  # the HEAD's answer waits: the replay is still waiting when Ctrl-C comes
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                cwd=hub_env / "cwd")
        end = time.monotonic() + 60
        while not hub.requests and time.monotonic() < end:
            time.sleep(0.02)
        assert [r.method for r in hub.requests] == ["HEAD"]
        time.sleep(0.1)  # past the send, into the wait (any moment must give the same answer)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    assert (proc.returncode, out, err) == (130, "", "specguard: interrupted\n")


def test_a_head_sent_for_another_request_is_not_its_answer(hub_env, monkeypatch, capsys):  # noqa: F811
    """plainhead.py's HEAD, sent with a token that is no longer the one revision.py would
    send, is dropped: revision.py asks again with its own; the same request is used as is."""
    _many_shards(hub_env / "repo", shards=2)
    with HubServer({"acme/many": hub_env / "repo"}) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
        monkeypatch.setenv("HF_TOKEN", "hf_before")
        assert main(["inspect", "acme/many", "--remote"]) == 0
        first = capsys.readouterr().out
        hub.reset()
        plainhead.send("acme/many", None)
        monkeypatch.setenv("HF_TOKEN", "hf_after")
        assert main(["inspect", "acme/many", "--remote"]) == 0
        assert capsys.readouterr().out == first and plainhead.SENT == {}
        assert sorted((r.method, r.authorization) for r in hub.requests) == [("HEAD", "Bearer hf_after"),
                                                                             ("HEAD", "Bearer hf_before")]
        hub.reset()
        plainhead.send("acme/many", None)
        assert main(["inspect", "acme/many", "--remote"]) == 0
        assert capsys.readouterr().out == first
        assert [(r.method, r.authorization) for r in hub.requests] == [("HEAD", "Bearer hf_after")]


# huggingface_hub's constants, reloaded under each environment, beside plainhead.py's reading of it.
_SETTINGS = """
import importlib, json, os, sys
from huggingface_hub import constants
from specguard.checkpoint import plainhead, revision
found = []
for case in json.loads(sys.argv[1]):
    os.environ.update(case)
    importlib.reload(constants)
    found.append([plainhead.hub_settings(), constants.is_offline_mode(), constants.ENDPOINT, revision.endpoint(),
                  constants.HF_HUB_DISABLE_IMPLICIT_TOKEN, constants.HF_TOKEN_PATH, constants.HF_STORED_TOKENS_PATH])
    for k in case:
        del os.environ[k]
print(json.dumps(found))
"""


def test_hub_settings_are_huggingface_hubs(tmp_path):
    """plainhead.py reads the endpoint, offline and staging modes and the token's paths from
    the environment as huggingface_hub's constants.py does on import."""
    cases = [{}, {"HF_HOME": "~/hf-home"}, {"XDG_CACHE_HOME": str(tmp_path)}, {"HF_HOME": "$TOKDIR/h", "TOKDIR": "/x"},
             {"HF_TOKEN_PATH": "$TOKDIR/tok", "TOKDIR": str(tmp_path)}, {"HF_ENDPOINT": "http://h:1/sub/"},
             {"HF_ENDPOINT": ""}, {"HF_HUB_DISABLE_IMPLICIT_TOKEN": "yes"}, {"HF_HUB_DISABLE_IMPLICIT_TOKEN": "0"},
             {"HF_HUB_OFFLINE": "1"}, {"TRANSFORMERS_OFFLINE": "true"}, {"HF_HUB_OFFLINE": "0"},
             {"HUGGINGFACE_CO_STAGING": "1"}, {"HUGGINGFACE_CO_STAGING": "no", "HF_ENDPOINT": "https://m.example"}]
    names = {k for case in cases for k in case} | {"HF_TOKEN_PATH", "HF_HOME", "XDG_CACHE_HOME", "HF_ENDPOINT"}
    env = {k: v for k, v in os.environ.items() if k not in names}
    r = subprocess.run([sys.executable, "-c", _SETTINGS, json.dumps(cases)], capture_output=True, text=True,
                       env=env, timeout=120, check=True)
    for case, (mine, offline, endpoint, where, disabled, token, stored) in zip(cases, json.loads(r.stdout),
                                                                              strict=True):
        staging = endpoint == "https://hub-ci.huggingface.co"
        if mine is None:
            assert offline or staging, case
        else:
            assert not offline and not staging, case
            assert mine == [where, disabled, token, stored], case


@pytest.mark.parametrize("endpoint", ["http://127.0.0.1:8080", "https://huggingface.co", "http://h.example/sub/",
                                      "http://[::1]:8080", "http://user@h.example", "http://h.example?x=1",
                                      "HTTP://h.example", "http://h.example:port", "http://hé.example"])
def test_plain_head_is_revision_pys_request_or_none(monkeypatch, endpoint):
    """Where plainhead.py builds a request, it is the one revision.py builds for the same
    repo and revision (else the early answer would be dropped, one request wasted); it
    builds one for a plain endpoint and a plain revision."""
    monkeypatch.setenv("HF_ENDPOINT", endpoint)
    plain = ("HF_TOKEN", "HUGGINGFACE_CO_STAGING", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", *plainhead.FULL_CLIENT_ENV)
    for var in plain:
        monkeypatch.delenv(var, raising=False)
    hub = plainhead.hub_settings()
    assert hub is not None
    where = revision.endpoint()
    for rev in [None, "main", "v1.0", "refs/pr/1", "a b", "", "ünï", "x~y_z-1"]:
        mine = plainhead._request(hub, "acme/many", rev)
        assert mine is None or mine == revision._plain_request(where, "acme/many", rev), (endpoint, rev)
        if endpoint in ("http://127.0.0.1:8080", "https://huggingface.co", "http://h.example/sub/") and rev in (
                None, "main", "v1.0"):
            assert mine is not None, (endpoint, rev)


_ARGVS = [
    ["inspect", "acme/x", "--remote"], ["inspect", "--remote", "acme/x", "--revision", "v1"],
    ["inspect", "acme/x", "--remote", "--revision=main", "--json", "--tensors", "--debug"],
    ["lint", "acme/x", "--remote", "--fail-on", "error", "--select", "SG2", "--format=sarif"],
    ["route", "acme/x", "--remote", "--engine", "all", "--all", "--json", "--platform", "rocm"],
    ["lint", "acme/x", "--remote", "--format", "xml"], ["lint", "acme/x", "--remote", "--tensors"],
    ["route", "acme/x", "--remote", "--draft", "d"], ["inspect", "acme/x", "--rem"],
    ["inspect", "acme/x", "--remote", "--rev", "v"], ["inspect", "acme/x", "--remote", "--revision"],
    ["inspect", "a", "b", "--remote"], ["inspect", "--remote"], ["inspect", "acme/x", "--remote", "-h"],
    ["inspect", "acme/x", "--remote", "--", "y"], ["--debug", "inspect", "acme/x", "--remote"],
    ["inspect", "acme/x", "--remote", "--revision", "-x"], ["fix", "acme/x", "--remote", "--diff"],
    ["inspect", "acme/x", "--remote", "--revision", "a", "--revision", "b"], ["inspect", "", "--remote"],
]


@pytest.mark.parametrize("argv", _ARGVS)
def test_early_reading_of_the_arguments_is_the_parsers(argv):
    """commands/replay.py reads a remote audit's repo and revision before the parser exists:
    only where the parser reads the same, else not at all."""
    early = replay._remote_audit(argv)
    try:
        args = cli.build_parser(cli._command_in(argv) or "").parse_args(argv)
    except (UsageError, SystemExit):
        args = None
    if early is not None:
        assert args is not None and args.remote and not getattr(args, "draft", None)
        assert (args.source, args.revision) == early
    if argv in _ARGVS[:5]:
        assert early is not None


def test_early_option_tables_are_the_parsers():
    """replay.py's flags, valued options and their choices for inspect/route/lint are cli.py's."""
    parser = cli.build_parser()
    commands = next(a for a in parser._actions if a.dest == "command").choices
    for name in ("inspect", "route", "lint"):
        flags, valued = set(), {}
        for action in commands[name]._actions:
            for option in action.option_strings:
                if option.startswith("--") and option != "--help":
                    if action.nargs == 0:
                        flags.add(option)
                    else:
                        valued[option] = tuple(action.choices) if action.choices is not None else None
        assert (flags, valued) == (replay._FLAGS[name], replay._VALUED[name]), name


def test_safe_name_is_the_regular_expressions():
    everything = "".join(map(chr, range(0x110000)))
    assert kept.safe_name(everything) == re.sub(r"[^\w.-]", "--", everything)


@pytest.mark.parametrize("value", ["", "5", "0", "-1", "nan", "inf", "abc", "1e3", " 2 "])
@pytest.mark.parametrize("var", plainhead.LIMITS_ENV)
def test_request_timeout_is_limits(monkeypatch, var, value):
    from specguard.checkpoint import limits

    assert tuple(limits.ENV.values()) == plainhead.LIMITS_ENV and limits.ENV["request"] == plainhead.LIMITS_ENV[0]
    assert plainhead.REQUEST_TIMEOUT == limits.REQUEST_TIMEOUT
    monkeypatch.setenv(var, value)
    try:
        expected: float | None = limits.Limits.from_env().request
    except UsageError:
        expected = None
    assert plainhead.request_timeout() == expected
