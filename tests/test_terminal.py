"""What users see: a real pseudo-terminal at 80 and 200 columns, a pipe, Ctrl-C,
unreadable directories, no writable home, and names that look like markup."""

from __future__ import annotations

import contextlib
import fcntl
import io
import os
import pty
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import termios
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from specguard.checkpoint.writer import save_file
from specguard.cli import main

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
CLI = [sys.executable, "-m", "specguard.cli"]


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    env.update(extra)
    return env


def in_terminal(args: list[str], columns: int, timeout: float = 120, *, interrupt_after: bytes | None = None,
                **env: str) -> tuple[int, str]:
    """Run the command in a real pseudo-terminal ``columns`` wide; (exit code, what it printed).

    ``interrupt_after``: once the output shows these bytes, type Ctrl-C (the terminal turns it
    into SIGINT for the foreground process). ``env``: extra environment variables."""
    pid, fd = pty.fork()
    if pid == 0:  # the child: a terminal of the given size on stdin/stdout/stderr
        fcntl.ioctl(0, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
        os.execve(sys.executable, [*CLI, *args], _env(TERM="xterm-256color", **env))
    chunks, deadline = [], time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            data = os.read(fd, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
        if interrupt_after is not None and interrupt_after in b"".join(chunks):
            os.write(fd, b"\x03")
            interrupt_after = None
    if time.monotonic() >= deadline:  # still writing at the deadline: ended (a no-op if it has just exited)
        os.kill(pid, signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    os.close(fd)
    text = ANSI.sub("", b"".join(chunks).decode("utf-8", "replace")).replace("\r\n", "\n")
    return os.waitstatus_to_exitcode(status), text


@pytest.fixture(scope="module")
def s1(scenarios) -> str:
    return str(scenarios["s1"].path)


@pytest.mark.parametrize("columns", [80, 200])
def test_route_is_readable_in_a_terminal(s1: str, columns: int) -> None:
    code, out = in_terminal(["route", s1], columns)
    assert code == 1  # misrouted
    assert max(len(line) for line in out.splitlines()) <= columns
    for whole in ("model.layers 2 · ffn · experts", "ModelOptNvFp4FusedMoE", "mxfp4 (deepseek, e8m0, g32)",
                  "nvfp4 (modelopt, g16)", "misrouted", "UnquantizedLinearMethod", "stored as", "declared as",
                  "vLLM 0.33 builds", "verdict"):
        assert whole in out, (columns, whole, out)
    assert "…" not in out
    assert "not shown; --all lists them" in " ".join(out.split())  # wrapped at word breaks


@pytest.mark.parametrize("columns", [80, 200])
def test_inspect_keeps_every_module_name(s1: str, columns: int) -> None:
    code, out = in_terminal(["inspect", s1], columns)
    assert code == 0
    assert max(len(line) for line in out.splitlines()) <= columns
    assert "wkv,wo_a,wo_b,wq_a,wq_b" in out and "ffn.shared_experts · w1,w2,w3" in out
    assert "…" not in out


def test_piped_lint_is_one_line_per_finding_whatever_columns_says(s1: str) -> None:
    r = subprocess.run([*CLI, "lint", s1], capture_output=True, text=True, env=_env(COLUMNS="80"), timeout=120)
    assert r.returncode == 1
    lines = r.stdout.splitlines()
    findings = [line for line in lines if re.match(r"SG\d{3} (error|warning|info): ", line)]
    assert [f.split(" ", 1)[0] for f in findings] == ["SG201", "SG202", "SG101"]
    # each finding whole on its line: the next line is its fix or the next finding, never a continuation
    for i, line in enumerate(lines):
        assert line == line.rstrip(), "no padding"
        if i:
            assert re.match(r"(SG\d{3} |  fix( \([^)]*\))?: |.*: \d+ errors?)", line), line
    assert any(len(line) > 200 for line in findings)  # not hard-wrapped at 200 either


def test_markup_in_tensor_names_is_printed_as_is(tmp_path: Path) -> None:
    p = tmp_path / "model.safetensors"
    save_file({"[/]layer.weight": np.zeros((4, 4), np.float32),
               "[red]x[/red].weight": np.zeros((4, 4), np.float32)}, p)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["inspect", str(p)]) == 0
    with contextlib.redirect_stdout(out):
        assert main(["inspect", "--tensors", str(p)]) == 0
    text = out.getvalue()
    assert "[/]layer" in text and "[red]x[/red]" in text


def test_ctrl_c_is_one_line_and_exit_130(tmp_path: Path) -> None:
    proc = subprocess.Popen([*CLI, "factory", "s1", str(tmp_path / "out"), "--size", "small"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env())
    deadline = time.monotonic() + 60
    while not list(tmp_path.glob(".out-*")) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)  # until the write has begun (its temporary sibling exists)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    if proc.returncode == 0:
        pytest.skip("the factory finished before the signal arrived")
    assert (proc.returncode, err) == (130, "specguard: interrupted\n")
    assert list(tmp_path.iterdir()) == []  # neither the checkpoint nor its temporary sibling


_INTERRUPTED_IN_EXEC = """
import sys
from specguard import cli

def interrupted_in_exec(argv):  # Ctrl-C while dataclasses execs a new class's methods (a lazy import)
    exec("import os, signal\\nos.kill(os.getpid(), signal.SIGINT)\\nwhile True: pass")

cli.PASSTHROUGH["probe"] = interrupted_in_exec
sys.exit(cli.main(["probe"]))
"""


def test_ctrl_c_inside_an_exec_still_exits_130_under_python_m(tmp_path: Path) -> None:
    """A KeyboardInterrupt that left an exec'd string marks itself unhandled in the
    interpreter even once cli.main caught it: ``python -m`` then died by SIGINT (-2)
    after the line, in about 1 of 20 Ctrl-Cs during `specguard factory` (usage.py interrupted)."""
    (tmp_path / "probe.py").write_text(_INTERRUPTED_IN_EXEC)
    r = subprocess.run([sys.executable, "-m", "probe"], capture_output=True, text=True, cwd=tmp_path,
                       env=_env(PYTHONPATH=os.pathsep.join(sys.path)), timeout=60)
    assert (r.returncode, r.stderr) == (130, "specguard: interrupted\n")


_AS_ANOTHER_USER = """
import os, sys
from specguard.cli import main
main(sys.argv[1:3])                 # warm every import the command needs while still root
import specguard.factory.sample     # (lint without a source opens the embedded sample: imported lazily)
os.seteuid(65534)                   # then act as 'nobody': root's DAC override is gone
sys.exit(main(sys.argv[3:]))
"""


def _unprivileged(warm: list[str], args: list[str], **env: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-c", _AS_ANOTHER_USER, *warm, *args] if os.geteuid() == 0 else [*CLI, *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=_env(**env), timeout=120)


@pytest.fixture
def open_dir() -> Iterator[Path]:
    """A directory everyone may enter (pytest's own tmp_path is private to its user)."""
    path = Path(tempfile.mkdtemp(prefix="specguard-perm-"))
    path.chmod(0o755)
    yield path
    for p in (path, *path.rglob("*")):
        if p.is_dir() and not p.is_symlink():
            p.chmod(0o755)
    shutil.rmtree(path, ignore_errors=True)


def test_a_directory_the_user_may_not_enter_is_one_line_and_exit_2(s1: str, open_dir: Path) -> None:
    shutil.copytree(s1, open_dir / "ckpt")
    (open_dir / "ckpt").chmod(0o700 if os.geteuid() == 0 else 0o000)  # root's 0700 shuts 'nobody' out
    r = _unprivileged(["lint", s1], ["lint", str(open_dir / "ckpt")])
    assert r.returncode == 2, r.stderr
    assert r.stderr.count("\n") == 1 and "Permission denied" in r.stderr and "Traceback" not in r.stderr
    assert str(open_dir / "ckpt") in r.stderr


def test_no_writable_home_names_xdg_cache_home(s1: str, open_dir: Path) -> None:
    home = open_dir / "home"
    home.mkdir()
    home.chmod(0o555)
    env = {k: v for k, v in _env(HOME=str(home)).items() if k != "XDG_CACHE_HOME"}
    cmd = [sys.executable, "-c", _AS_ANOTHER_USER, "lint", s1, "lint"] if os.geteuid() == 0 else [*CLI, "lint"]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 2, r.stderr
    assert r.stderr.count("\n") == 1 and "XDG_CACHE_HOME" in r.stderr and "Traceback" not in r.stderr


def test_a_reader_that_stops_early_is_not_an_error(s1: str) -> None:
    """`specguard rule --all | head -1`: exit 0, nothing on stderr."""
    for args in (["rule", "--all"], ["inspect", "--json", s1]):
        proc = subprocess.Popen([*CLI, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env())
        assert proc.stdout is not None
        proc.stdout.close()  # the reader is gone before the first write: every write fails (EPIPE)
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0 and err == b"", (args, err)


def _words(text: str) -> set[str]:
    return set(re.findall(r"[A-Za-z0-9_]+", text))


def test_lint_fix_lines_keep_a_hanging_indent_at_80_columns(s1: str) -> None:
    code, out = in_terminal(["lint", s1], 80)
    assert code == 1 and max(len(line) for line in out.splitlines()) <= 80
    piped = subprocess.run([*CLI, "lint", s1], capture_output=True, text=True, env=_env(), timeout=120).stdout
    fixes = [line.removeprefix("  fix: ") for line in piped.splitlines() if line.startswith("  fix: ")]
    lines = out.splitlines()
    for fix in fixes:
        start = next(i for i, line in enumerate(lines) if line.startswith("  fix: " + fix[:20]))
        block = [lines[start]]
        for line in lines[start + 1:]:
            if not line.startswith(" " * 7):
                break
            block.append(line)
        assert len(block) > 1  # long enough to wrap at 80 columns
        assert " ".join(" ".join(block).split()) == "fix: " + " ".join(fix.split())  # wrapped at words only


def test_fix_output_wraps_at_words_at_80_columns(s1: str, tmp_path: Path) -> None:
    code, out = in_terminal(["fix", s1, "--out", str(tmp_path / "a"), "--platform", "cuda"], 80)
    assert code == 0 and max(len(line) for line in out.splitlines()) <= 80
    piped = subprocess.run([*CLI, "fix", s1, "--out", str(tmp_path / "b"), "--platform", "cuda"],
                           capture_output=True, text=True, env=_env(), timeout=300).stdout
    assert _words(out.replace(str(tmp_path / "a"), "OUT")) == _words(piped.replace(str(tmp_path / "b"), "OUT"))


def test_rule_pages_render_as_markdown_at_80_columns() -> None:
    from specguard.lint.registry import rule_doc

    code, out = in_terminal(["rule", "SG201"], 80)
    assert code == 0 and max(len(line) for line in out.splitlines()) <= 80
    assert "## What it does" not in out and "What it does" in out
    assert _words(out) <= _words(rule_doc("SG201"))  # no word split by the terminal


_DEFERRED = """
import os, signal, threading
from specguard.usage import ctrl_c_deferred

seen = []
try:
    with ctrl_c_deferred():
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(100_000):  # a KeyboardInterrupt raised in here would skip the next line
            pass
        seen.append("the import ended")
        t = threading.Thread(target=lambda: seen.append(signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, [])))
        t.start()
        t.join()
    seen.append("not reached")
except KeyboardInterrupt:
    seen.append("raised on leaving")
print(seen)
"""


def test_ctrl_c_during_a_deferred_import_is_raised_when_it_ends() -> None:
    """usage.ctrl_c_deferred (cli wraps each command's imports in it): a Ctrl-C waits for the
    import's end, then is the one KeyboardInterrupt; a thread started within never takes it."""
    r = subprocess.run([sys.executable, "-c", _DEFERRED], capture_output=True, text=True, env=_env(), timeout=60)
    assert r.stdout.strip() == "['the import ended', True, 'raised on leaving']", (r.stdout, r.stderr)
