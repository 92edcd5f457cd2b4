"""`specguard demo` end to end (small): its tables in a pipe and in an 80-column
terminal, --json, its plot, --help, Ctrl-C, and its handling of bad input."""

from __future__ import annotations

import argparse
import io
import json
import os
import re
from pathlib import Path

import pytest
from rich.console import Console

from specguard.guard import GuardFinding, LoadReport
from specguard.refdecoder import demo
from specguard.refdecoder.corpus import prompts_sha256
from specguard.refdecoder.demo import main, prompts_from_held_out
from specguard.terminal import print_table
from tests.test_terminal import in_terminal

SMALL = ["--prompts", "1", "--new-tokens", "8"]
GUARD_ROW = re.compile(r"w13_weight_scale_2 .*never written .*float32 .*4×2 .*8/8 .*still holds poison")


def test_demo_prints_every_policy_the_guard_report_and_a_plot(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    png = tmp_path / "acceptance.png"
    assert main(["--scenario", "s1", "--prompts", "1", "--new-tokens", "16", "--plot", str(png)]) == 0
    out = capsys.readouterr().out
    for word in ("resolver", "global", "bf16", "identical", "speedup", "LoadGuard", "never written",
                 "w13_weight_scale_2"):
        assert word in out, word
    assert "NO" not in out.split("LoadGuard")[0]  # every policy's output matched plain greedy
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # a pipe: tables as tables, each row whole on its line, nothing padded out to a width
    assert any(GUARD_ROW.search(line) for line in out.splitlines()), out
    assert all(line == line.rstrip() for line in out.splitlines())


def test_demo_is_readable_at_80_columns() -> None:
    code, out = in_terminal(["demo", *SMALL], 80)
    assert code == 0, out
    assert max(len(line) for line in out.splitlines()) <= 80
    assert "…" not in out
    # a table too wide for 80 columns: one record per row, every name and value whole
    for whole in ("model.layers.12.mtp_block.ffn.experts.routed_experts.w13_weight_scale_2",
                  "problem: never written", "shape: 4×256×16", "still holds poison 0xFFE5A5A5",
                  "identical: yes", "per pos %: ", "no-spec: ", "speedup: "):
        assert whole in out, (whole, out)
    for policy in ("resolver", "global", "bf16"):
        assert re.search(rf"^{policy}$", out, re.M), policy


def test_demo_json_has_every_field_per_scenario_and_policy(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--scenario", "s2", "--json", *SMALL]) == 0
    doc = json.loads(capsys.readouterr().out)  # stdout is the JSON and nothing else
    assert doc["schema"] == 1 and doc["settings"]["new_tokens"] == 8 and set(doc["scenarios"]) == {"s2"}
    assert doc["settings"]["prompts_sha256"] == prompts_sha256(prompts_from_held_out(1))  # which text was measured
    fields = {"scenario", "policy", "load_error", "acceptance", "per_position_acceptance",
              "mean_acceptance_length", "tokens_per_s", "no_spec_tokens_per_s", "speedup", "identical",
              "drafts", "draft_tokens", "accepted_tokens", "expert_routes", "guard"}
    records = {r["policy"]: r for r in doc["records"]}
    assert list(records) == ["resolver", "global", "bf16"]
    for r in records.values():
        assert set(r) == fields
    ok, failed = records["resolver"], records["global"]  # S2: global routing cannot load the BF16 MTP block
    assert ok["load_error"] is None and ok["identical"] is True and len(ok["per_position_acceptance"]) == 3
    assert 0 <= ok["acceptance"] <= 1 and ok["tokens_per_s"] > 0 and ok["no_spec_tokens_per_s"] > 0
    assert ok["speedup"] == pytest.approx(ok["tokens_per_s"] / ok["no_spec_tokens_per_s"])
    assert ok["guard"]["ok"] is True
    assert set(ok["expert_routes"].values()) == {"nvfp4", "bf16"}  # main stack NVFP4, the MTP block BF16
    assert "RuntimeError" in failed["load_error"] and failed["acceptance"] is None


def test_help_names_every_default() -> None:
    parser = demo._parser()
    for action in parser._actions:
        assert action.help, action.option_strings
        if action.default not in (None, False, argparse.SUPPRESS):
            assert "(default: %(default)s)" in action.help, action.option_strings
    text = " ".join(parser.format_help().split())
    for shown in ("(default: s1)", "--draft-tokens K draft tokens per step, 1..16 (default: 3)",
                  "(default: 4)", "(default: cpu)", "exit codes: 0 ok; 2 bad input"):
        assert shown in text, shown


def test_ctrl_c_is_one_line_and_exit_130(tmp_path: Path) -> None:
    """Ctrl-C typed into a real terminal while the demo decodes: no traceback (worker or progress
    threads included), one line, exit 130, its temporary checkpoints removed."""
    code, text = in_terminal(["demo", "--prompts", "64", "--new-tokens", "64"], 80,
                             interrupt_after=b"s1 resolver", TMPDIR=str(tmp_path))  # decoding has begun
    assert code == 130, text
    assert "Traceback" not in text and text.count("interrupted") == 1
    assert text.rstrip().endswith("specguard: interrupted")
    assert not list(tmp_path.glob("specguard-demo-*"))


def test_guard_report_names_are_not_markup() -> None:
    name = "[red]x[/red].[/]w13_weight_scale"
    report = LoadReport((GuardFinding(name, "never_written", "float32", (4,), 4, 4),), checked=1)
    for width in (80, 200):
        buf = io.StringIO()
        print_table(Console(file=buf, width=width), report.__rich__())
        assert name in buf.getvalue()


@pytest.mark.parametrize("argv, message", [
    (["--draft-tokens", "0"], "--draft-tokens must be 1..16"),
    (["--prompts", "0"], "--prompts must be"),
    (["--device", "tpu"], "--device must be cpu or cuda"),
    (["--plot", "/nonexistent-dir/x.png"], "does not exist"),
])
def test_bad_input_is_one_line_and_exit_2(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err and "Traceback" not in err


def _no_run(*args: object) -> None:
    raise AssertionError("the demo ran before its --plot path was checked")


@pytest.mark.parametrize("where, message", [
    ("a-file/x.png", "a-file is not a directory"),  # as root too: no directory to write in
    ("a-dir", "is a directory"),
    ("x.txt", "no plot format 'txt'"),
    pytest.param("read-only/x.png", "cannot write there: Permission denied",
                 marks=pytest.mark.skipif(os.geteuid() == 0, reason="root writes in a 0555 directory")),
])
def test_an_unwritable_plot_path_fails_before_the_run(
    tmp_path: Path, where: str, message: str, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    (tmp_path / "a-file").write_text("")
    (tmp_path / "a-dir").mkdir()
    (tmp_path / "read-only").mkdir(mode=0o555)
    monkeypatch.setattr(demo, "run_all", _no_run)
    assert main(["--plot", str(tmp_path / where)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1 and captured.err.startswith("specguard: error: --plot ")
    assert message in captured.err, captured.err


def test_the_plot_has_the_fixed_row_where_it_ran(tmp_path: Path) -> None:
    from specguard.refdecoder.specdec import SpecStats

    stats = SpecStats(3, num_drafts=2, num_draft_tokens=6, num_accepted_tokens=4, accepted_per_pos=[2, 1, 1])
    results = [demo.PolicyResult("s1", policy, stats, 1.0, 2.0, True)
               for policy in (*demo.POLICIES, demo.FIXED)]
    png = tmp_path / "plot.png"
    assert demo.plot(results, png, 3) == [*demo.POLICIES, demo.FIXED]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert demo.plot(results[:3], png, 3) == list(demo.POLICIES)
