"""The CLI on real files: outputs, exit codes, and bad input as one line + exit 2."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from specguard.cli import main


def _snapshot(root):
    return sorted((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*"))


def test_inspect_route_lint_on_s1(scenarios, capsys):
    s1 = scenarios["s1"].path
    before = _snapshot(s1)
    assert main(["inspect", str(s1)]) == 0
    out = capsys.readouterr().out
    assert "mxfp4 (deepseek, e8m0, g32)" in out and "draft (mtp)" in out and "nvfp4 (modelopt, g16)" in out
    assert main(["route", str(s1)]) == 1
    out = capsys.readouterr().out
    assert "misrouted" in out and "ModelOptNvFp4FusedMoE" in out
    assert main(["lint", str(s1)]) == 1
    out = capsys.readouterr().out
    assert "SG201" in out and "SG202" in out and "SG101" in out
    assert _snapshot(s1) == before  # nothing written into the checkpoint


def test_inspect_settles_u8_scales_as_route_does(scenarios, capsys):
    """A U8 scale is not left ``ambiguous``: inspect reads its first 4 KiB, as route does."""
    s1u8 = str(scenarios["s1-u8"].path)
    main(["inspect", s1u8, "--json"])
    mods = json.loads(capsys.readouterr().out)["records"]
    draft = {m["format"] for m in mods if m["role"] == "draft" and ".experts." in m["module"]}
    assert draft == {"mxfp4"}
    main(["route", s1u8, "--json", "--all"])
    routes = json.loads(capsys.readouterr().out)["records"]
    assert {r["stored"]["format"] for r in routes if r["runtime_prefix"] == "model.layers.2.ffn.experts"} == {"mxfp4"}


def test_json_outputs_parse(scenarios, capsys):
    s1 = str(scenarios["s1"].path)
    main(["inspect", s1, "--json"])
    mods = json.loads(capsys.readouterr().out)["records"]
    assert {m["format"] for m in mods if m["role"] == "draft" and ".experts." in m["module"]} == {"mxfp4"}
    main(["inspect", s1, "--json", "--tensors"])
    assert all("offsets" in r for r in json.loads(capsys.readouterr().out)["records"])
    main(["route", s1, "--json"])
    routes = json.loads(capsys.readouterr().out)["records"]
    bad = [r for r in routes if r["verdict"] == "misrouted"]
    assert [r["runtime_prefix"] for r in bad] == ["model.layers.2.ffn.experts"]
    assert bad[0]["stored"]["format"] == "mxfp4" and bad[0]["vllm_builds"]["method"] == "ModelOptNvFp4FusedMoE"
    main(["lint", s1, "--format", "json"])
    report = json.loads(capsys.readouterr().out)
    assert {f["code"] for f in report["findings"]} >= {"SG201", "SG202"}
    assert report["bytes_read_by_rule"]["SG201"] == 0


def test_json_schema_versions(scenarios, capsys):
    """docs/json.md's table: route 2 and lint 3 since their records carry ``engine`` (issue 27;
    route --engine all: one record per module per engine); inspect stays 1."""
    s1 = str(scenarios["s1"].path)
    main(["inspect", s1, "--json"])
    assert json.loads(capsys.readouterr().out)["schema"] == 1
    main(["route", s1, "--json", "--engine", "vllm-0.32"])
    one = json.loads(capsys.readouterr().out)
    assert one["schema"] == 2 and {r["engine"] for r in one["records"]} == {"vllm-0.32"}
    main(["route", s1, "--json", "--engine", "all"])
    every = json.loads(capsys.readouterr().out)
    assert every["schema"] == 2
    keys = [(r["engine"], r["runtime_prefix"]) for r in every["records"]]
    assert len(set(keys)) == len(keys) > len({p for _, p in keys})  # a prefix alone is no longer a key
    main(["lint", s1, "--format", "json", "--engine", "vllm-0.32"])
    report = json.loads(capsys.readouterr().out)
    assert report["schema"] == 3 and {f["engine"] for f in report["findings"]} == {"vLLM 0.32"}


def test_sarif(scenarios, capsys):
    main(["lint", str(scenarios["s1"].path), "--format", "sarif"])
    sarif = json.loads(capsys.readouterr().out)
    assert sarif["version"] == "2.1.0" and len(sarif["runs"]) == 1
    run = sarif["runs"][0]
    ids = [r["id"] for r in run["tool"]["driver"]["rules"]]
    assert ids == sorted(set(ids))
    for res in run["results"]:
        assert res["level"] in ("error", "warning", "note", "none")
        assert res["message"]["text"]
        assert ids[res["ruleIndex"]] == res["ruleId"]
        assert res["locations"][0]["logicalLocations"]


def test_fail_on_and_clean_exit(scenarios, capsys):
    s1, s8 = str(scenarios["s1"].path), str(scenarios["s8"].path)
    assert main(["lint", s8]) == 0
    assert main(["lint", s1, "--fail-on", "never"]) == 0
    assert main(["lint", s1, "--select", "SG101", "--fail-on", "error"]) == 0
    assert main(["lint", s1, "--select", "SG101", "--fail-on", "warning"]) == 1
    capsys.readouterr()


def _bad_inputs(tmp_path, s1):
    cases = {}
    trunc = tmp_path / "truncated"
    shutil.copytree(s1, trunc)
    shard = sorted(trunc.glob("*.safetensors"))[0]
    shard.write_bytes(shard.read_bytes()[:100])
    cases["truncated"] = (trunc, shard.name)
    lying = tmp_path / "lying"
    shutil.copytree(s1, lying)
    shard = sorted(lying.glob("*.safetensors"))[0]
    raw = shard.read_bytes()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8 : 8 + n])
    name = next(k for k in header if k != "__metadata__")
    header[name]["shape"] = [x + 1 for x in header[name]["shape"]]
    body = json.dumps(header).encode()
    shard.write_bytes(len(body).to_bytes(8, "little") + body + raw[8 + n :])
    cases["lying header"] = (lying, name)
    hostile = tmp_path / "hostile"
    shutil.copytree(s1, hostile)
    idx = json.loads((hostile / "model.safetensors.index.json").read_text())
    first = next(iter(idx["weight_map"]))
    idx["weight_map"][first] = "../../etc/passwd"
    (hostile / "model.safetensors.index.json").write_text(json.dumps(idx))
    cases["hostile index"] = (hostile, "escapes")
    missing = tmp_path / "missing"
    shutil.copytree(s1, missing)
    gone = sorted(missing.glob("*.safetensors"))[-1]
    gone.unlink()
    cases["missing shard"] = (missing, gone.name)
    dtype = tmp_path / "dtype"
    shutil.copytree(s1, dtype)
    shard = sorted(dtype.glob("*.safetensors"))[0]
    raw = shard.read_bytes()
    shard.write_bytes(raw.replace(b'"F32"', b'"F99"', 1))
    cases["unknown dtype"] = (dtype, "unknown dtype")
    fifo = tmp_path / "fifo"
    fifo.mkdir()
    os.mkfifo(fifo / "model.safetensors")
    cases["fifo, must not hang"] = (fifo, "no model.safetensors.index.json")
    return cases


@pytest.mark.parametrize("command", ["inspect", "route", "lint"])
def test_bad_input_is_one_line_and_exit_2(scenarios, tmp_path, capsys, command):
    for label, (path, needle) in _bad_inputs(tmp_path / command, scenarios["s1"].path).items():
        before = _snapshot(path)
        assert main([command, str(path)]) == 2, label
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and err.startswith("specguard: error: "), (label, err)
        assert needle in err, (label, err)
        assert _snapshot(path) == before, label


def test_no_traceback_from_the_installed_command(tmp_path):
    p = tmp_path / "x.safetensors"
    p.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json at all")
    r = subprocess.run([sys.executable, "-m", "specguard.cli", "inspect", str(p)], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 2 and "Traceback" not in r.stderr and r.stderr.count("\n") == 1
    r = subprocess.run([sys.executable, "-m", "specguard.cli", "--debug", "inspect", str(p)], capture_output=True,
                       text=True, timeout=60)
    assert "Traceback" in r.stderr


def test_usage_errors_exit_2(capsys):
    assert main(["lint", "/nonexistent/path"]) == 2
    assert main(["rule", "SG999"]) == 2
    assert main([]) == 2
    capsys.readouterr()


def test_bare_safetensors_file_without_config(tmp_path, capsys):
    import numpy as np

    from specguard.checkpoint.writer import save_file

    p = tmp_path / "w.safetensors"
    save_file({"mtp.0.e_proj.weight": np.zeros((4, 4), np.float32),
               "layers.0.attn.wq.weight": np.zeros((4, 4), np.float32)}, p)
    assert main(["inspect", str(p)]) == 0  # roles from names alone
    out = capsys.readouterr().out
    assert "draft" in out and "main" in out
    assert main(["route", str(p)]) == 2
    assert "no config.json" in capsys.readouterr().err


def test_lint_json_is_format_json(scenarios, capsys):
    s1 = str(scenarios["s1"].path)
    assert main(["lint", s1, "--json"]) == 1
    as_flag = capsys.readouterr().out
    assert main(["lint", s1, "--format", "json"]) == 1
    assert as_flag == capsys.readouterr().out and json.loads(as_flag)["findings"]


@pytest.mark.parametrize("command", ["inspect", "route", "lint", "rule", "fix", "watch", "factory", "demo"])
def test_every_help_gives_the_exit_codes_and_debug(command, capsys):
    with pytest.raises(SystemExit) as done:
        main([command, "--help"])
    assert done.value.code == 0
    text = " ".join(capsys.readouterr().out.split())  # argparse wraps at the terminal's width
    assert "exit codes: 0 " in text and "2 bad input or usage" in text and "130 interrupted" in text, text
    assert "--debug" in text


def test_fix_help_shows_out_as_required(capsys):
    with pytest.raises(SystemExit):
        main(["fix", "--help"])
    usage = capsys.readouterr().out.split("\n\n")[0]
    assert "--out DIR" in usage and "[--out" not in usage, usage


def test_bare_specguard_is_usage_on_stderr_and_exit_2(capsys):
    assert main([]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("usage: specguard")


def test_factory_error_shows_its_traceback_with_debug(tmp_path, capsys):
    blocked = tmp_path / "file"
    blocked.write_text("")
    assert main(["factory", "s1", str(blocked / "out")]) == 2
    assert capsys.readouterr().err.startswith("specguard: error: ")
    assert main(["factory", "s1", str(blocked / "out"), "--debug"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" in err and err.splitlines()[-1].startswith("specguard: error: ")


@pytest.mark.parametrize(("scenario", "code"), [("s8", 0), ("s1", 1)])
def test_a_closed_pipe_exits_with_the_commands_own_code(scenarios, scenario, code):
    """`specguard lint CLEAN | head -0`: 0, not 1 (findings); a checkpoint with findings: still 1."""
    for args in (["lint"], ["lint", "--format", "json"], ["route"]):
        proc = subprocess.Popen([sys.executable, "-m", "specguard", *args, str(scenarios[scenario].path)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert proc.stdout is not None
        proc.stdout.close()  # the reader is gone before the first write
        _, err = proc.communicate(timeout=120)
        assert (proc.returncode, err) == (code, b""), (args, err)
