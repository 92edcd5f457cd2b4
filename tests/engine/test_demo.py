"""`specguard demo` end to end (small), its plot, and its handling of bad input."""

from __future__ import annotations

from pathlib import Path

import pytest

from specguard.engine.demo import main


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
