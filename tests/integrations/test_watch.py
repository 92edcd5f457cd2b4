"""`specguard watch` against vLLM 0.33's own metric objects served over real HTTP.

Each test feeds scripted scheduler stats through vLLM's PrometheusStatLogger /
SpecDecodingProm (watch_server.py), scrapes the page the way the command does
and checks the verdict. The Watcher is polled directly, so no test sleeps.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import prometheus_client as pc
import pytest

from specguard.integrations.watch import (
    CounterWentBackwards,
    NoSpecDecode,
    NotPrometheus,
    ServerDown,
    Thresholds,
    Watcher,
    scrape,
)
from specguard.integrations.watch.metrics import ACCEPTED, ACCEPTED_PER_POS, DRAFT_TOKENS, DRAFTS, GENERATION_TOKENS
from tests.integrations.watch_server import COLLAPSED, HEALTHY, POLL, MetricsServer, VllmMetrics, vllm_config

SRC = str(Path(__file__).resolve().parents[2] / "src")
# what the `specguard` entry point runs (`python -m specguard.cli` would load the module twice)
CLI = [sys.executable, "-c", "import sys; from specguard.cli import main; sys.exit(main())", "watch"]


_prctl = ctypes.CDLL(None, use_errno=True).prctl


def _die_with_this_process() -> None:
    """In the child, before exec: SIGKILL when the process that started it ends (Linux prctl
    PR_SET_PDEATHSIG = 1), so a test worker that is killed leaves no `watch` running. Nothing
    imported here: the parent has server threads."""
    _prctl(1, signal.SIGKILL)


def start_watch(*args: str, **popen: Any) -> subprocess.Popen:
    """`specguard watch ARGS` in a child process; the test ends it with Ctrl-C, the autouse
    fixture below kills it where the test failed before that."""
    proc = subprocess.Popen([*CLI, *args], preexec_fn=_die_with_this_process, **popen)
    _running.append(proc)
    return proc


_running: list[subprocess.Popen] = []


@pytest.fixture(autouse=True)
def _no_watch_left_running() -> Iterator[None]:
    yield
    while _running:
        proc = _running.pop()
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


@pytest.fixture(scope="session")
def config(s1_dir: Path) -> Any:
    return vllm_config(str(s1_dir), "ds4-s1")


@pytest.fixture(scope="session")
def config_b(s1_dir: Path) -> Any:
    return vllm_config(str(s1_dir), "ds4-other")


@pytest.fixture
def server() -> Iterator[MetricsServer]:
    s = MetricsServer()
    yield s
    s.close()


def watcher(server: MetricsServer, **kw: Any) -> Watcher:
    return Watcher(server.url, kw.pop("window", 60.0), Thresholds(**kw))


def test_names_and_labels_are_vllm_033s(config: Any) -> None:
    """The constants the command reads are the sample names vLLM's own objects write."""
    m = VllmMetrics(config, engines=[0, 1])
    m.steps(HEALTHY, engine=1)
    from prometheus_client.parser import text_string_to_metric_families

    names = {s.name: s.labels for f in text_string_to_metric_families(m.page().decode()) for s in f.samples}
    for base in (DRAFTS, DRAFT_TOKENS, ACCEPTED, GENERATION_TOKENS):
        assert names[f"{base}_total"].keys() == {"model_name", "engine"}
        assert f"{base}_created" in names
    assert names[f"{ACCEPTED_PER_POS}_total"].keys() == {"model_name", "engine", "position"}
    snap = scrape_page(m)
    c = snap.series[("ds4-s1", "1")]
    assert (c.drafts, c.draft_tokens, c.accepted) == (8, 24, 13)
    assert c.per_pos == {0: 7, 1: 4, 2: 2} and c.generation_tokens == 21
    assert snap.series[("ds4-s1", "0")].drafts == 0


def scrape_page(m: VllmMetrics) -> Any:
    from specguard.integrations.watch.metrics import parse

    return parse(m.page().decode())


def test_healthy_drafter_is_ok_with_vllm_rates(server: MetricsServer, config: Any) -> None:
    m = VllmMetrics(config)
    server.serve(m)
    w = watcher(server, min_draft_tokens=24)
    w.start()
    m.steps(HEALTHY * 4)
    (v,) = w.poll().verdicts
    assert v.status == "ok" and not v.alerts
    s = v.stats
    assert s.acceptance == pytest.approx(13 / 24)
    assert s.mean_acceptance_length == pytest.approx(1 + 13 / 8)  # SpecDecodingLogging.log's definition
    assert s.per_position == pytest.approx([7 / 8, 4 / 8, 2 / 8])
    assert s.counts.generation_tokens == 4 * 21 and s.drafts_per_s > 0 and s.generation_tokens_per_s > 0


def test_collapse_alerts_with_model_and_numbers(server: MetricsServer, config: Any) -> None:
    m = VllmMetrics(config)
    server.serve(m)
    w = watcher(server, min_draft_tokens=24, window=1e-9)  # the window holds only the latest interval
    w.start()
    m.steps(HEALTHY * 4)
    assert w.poll().verdicts[0].status == "ok"
    m.steps(COLLAPSED * 100)
    (v,) = w.poll().verdicts
    assert v.status == "alert"
    (line,) = v.alerts
    assert "ds4-s1" in line and "acceptance 0.0 %" in line and "0/300 draft tokens, 100 drafts" in line
    assert "below 10.0 %" in line and "speculation is costing you" in line
    assert "down" not in line  # the drop is named only above the threshold: one reason is enough
    assert "\n" not in line


def test_relative_drop_against_first_healthy_window(server: MetricsServer, config: Any) -> None:
    m = VllmMetrics(config)
    server.serve(m)
    w = watcher(server, min_draft_tokens=24, window=1e-9)
    w.start()
    m.steps((3, 3, 2, 2) * 10)  # 83 %: the first healthy window
    assert w.poll().verdicts[0].status == "ok"
    m.steps((3, 2, 2, 1) * 10)  # 67 %: a 20 % drop, within the default 25 %
    assert w.poll().verdicts[0].status == "ok"
    m.steps((1, 1, 2, 1) * 10)  # 42 %: above 10 %, but half the baseline
    (v,) = w.poll().verdicts
    assert v.status == "alert" and v.baseline == pytest.approx(10 / 12)
    assert "down 50.0 % from 83.3 %" in v.alerts[0] and "costing" not in v.alerts[0]


def test_too_few_drafts_is_idle_not_an_alert(server: MetricsServer, config: Any) -> None:
    m = VllmMetrics(config)
    server.serve(m)
    w = watcher(server)
    w.start()
    m.steps(COLLAPSED * 10)  # 30 draft tokens < 200
    assert w.poll().verdicts[0].status == "idle"


def test_sliding_window_forgets_old_intervals(server: MetricsServer, config: Any) -> None:
    m = VllmMetrics(config)
    server.serve(m)
    w = watcher(server, min_draft_tokens=24, window=0.05)
    w.start()
    m.steps(COLLAPSED * 100)
    assert w.poll().verdicts[0].status == "alert"
    time.sleep(0.06)  # the collapsed interval ends more than one window ago
    m.steps(HEALTHY * 4)
    (v,) = w.poll().verdicts
    assert v.status == "ok" and v.stats.counts.drafts == 32


def test_restart_counts_from_zero(server: MetricsServer, config: Any) -> None:
    """A new process: new _created, counters from zero; the delta is the new process's counts."""
    old = VllmMetrics(config)
    old.steps(HEALTHY * 20)
    server.serve(old)
    w = watcher(server, min_draft_tokens=24, window=1e-9)
    w.start()
    new = VllmMetrics(config)
    new.steps(COLLAPSED * 30)
    server.serve(new)
    tick = w.poll()
    assert tick.error is None and tick.restarted == [("ds4-s1", "0")]
    (v,) = tick.verdicts
    assert v.stats.counts.drafts == 30 and v.status == "alert"


def test_restart_without_created_series(server: MetricsServer, config: Any) -> None:
    """vLLM's multiprocess mode exports no _created: the drafts counter dropping is the restart."""
    pc.disable_created_metrics()
    try:
        old = VllmMetrics(config)
        old.steps(HEALTHY * 20)
        server.serve(old)
        w = watcher(server, min_draft_tokens=24)
        assert w.start().series[("ds4-s1", "0")].created is None
        new = VllmMetrics(config)
        new.steps(HEALTHY * 2)
        server.serve(new)
        tick = w.poll()
    finally:
        pc.enable_created_metrics()
    assert tick.restarted == [("ds4-s1", "0")] and tick.verdicts[0].stats.counts.drafts == 16


def test_stale_page_is_a_counter_going_backwards(server: MetricsServer, config: Any) -> None:
    """Same process (same _created), lower counts: a cache replaying an old page, not a restart."""
    m = VllmMetrics(config)
    m.steps(HEALTHY)
    stale = m.page()
    m.steps(HEALTHY)
    server.serve(m)
    w = watcher(server)
    w.start()
    server.serve_bytes(stale)
    tick = w.poll()
    assert isinstance(tick.error, CounterWentBackwards)
    assert "went backwards from 16 to 8" in str(tick.error) and "same vllm:spec_decode_num_drafts_created" in str(
        tick.error)
    server.serve(m)  # re-based on the stale page: the live one counts from there
    assert w.poll().error is None


def test_live_watch_outlasts_a_server_restart(server: MetricsServer, config: Any) -> None:
    """Down for a scrape, then a new process: one error tick, then counting resumes from zero."""
    m = VllmMetrics(config)
    m.steps(HEALTHY * 4)
    server.serve(m)
    w = watcher(server, min_draft_tokens=24)
    w.start()
    server.serve_bytes(b"upstream connect error", "text/plain", "503 Service Unavailable")
    assert isinstance(w.poll().error, NotPrometheus)
    new = VllmMetrics(config)
    new.steps(HEALTHY * 4)
    server.serve(new)
    tick = w.poll()
    assert tick.error is None and tick.restarted == [("ds4-s1", "0")]
    assert tick.verdicts[0].stats.counts.drafts == 32 and tick.verdicts[0].status == "ok"


def test_url_forms() -> None:
    from specguard.integrations.watch.metrics import metrics_url

    assert metrics_url("127.0.0.1:8000") == "http://127.0.0.1:8000/metrics"
    assert metrics_url("http://h:8000/") == "http://h:8000/metrics"
    assert metrics_url("https://h/vllm/metrics") == "https://h/vllm/metrics"


def test_one_counter_dropping_alone_is_not_a_restart(config: Any) -> None:
    """Without _created, drafts not dropping while accepted drops cannot be a restart
    (SpecDecodingProm.observe increments them together): going backwards."""
    from specguard.integrations.watch import diff, parse

    pc.disable_created_metrics()
    try:
        m = VllmMetrics(config)
        m.steps(HEALTHY * 2)
        before = m.page().decode()
        m.steps(HEALTHY)
        live = m.page().decode()
    finally:
        pc.enable_created_metrics()
    line = 'vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="ds4-s1"}'
    after = live.replace(f"{line} 39.0", f"{line} 20.0")
    assert after != live and "_created" not in live
    with pytest.raises(CounterWentBackwards, match=r"num_accepted_tokens went backwards from 26 to 20 \(while"):
        diff(parse(before), parse(after))


def test_two_engines_sum_per_model(server: MetricsServer, config: Any) -> None:
    m = VllmMetrics(config, engines=[0, 1])
    server.serve(m)
    w = watcher(server, min_draft_tokens=24)
    w.start()
    m.steps(HEALTHY * 4, engine=0)
    m.steps(COLLAPSED * 32, engine=1)
    (v,) = w.poll().verdicts
    assert v.stats.engines == ["0", "1"] and v.stats.counts.drafts == 64
    assert v.stats.acceptance == pytest.approx(52 / 192)


def test_two_models_alert_names_the_collapsed_one(server: MetricsServer, config: Any, config_b: Any) -> None:
    a, b = VllmMetrics(config), VllmMetrics(config_b)
    server.serve(a, b)
    w = watcher(server, min_draft_tokens=24)
    w.start()
    a.steps(HEALTHY * 4)
    b.steps(COLLAPSED * 40)
    verdicts = {v.stats.model: v for v in w.poll().verdicts}
    assert verdicts["ds4-s1"].status == "ok"
    assert verdicts["ds4-other"].status == "alert" and "ALERT ds4-other:" in verdicts["ds4-other"].alerts[0]


def test_no_speculative_config_means_no_spec_decode_metrics(server: MetricsServer, s1_dir: Path) -> None:
    m = VllmMetrics(vllm_config(str(s1_dir), "plain", speculative=None))
    server.serve(m)
    assert b"vllm:generation_tokens_total" in m.page()
    with pytest.raises(NoSpecDecode, match="speculative decoding is not configured"):
        scrape(server.url)


def test_server_down() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(ServerDown, match="server down or unreachable"):
        scrape(f"http://127.0.0.1:{port}/metrics", timeout=2)


HTML = b"<!DOCTYPE html>\n<html><head><title>Welcome</title></head><body>It works</body></html>\n"


@pytest.mark.parametrize("ctype", ["text/html; charset=utf-8", "text/plain; charset=utf-8"])
def test_html_page_is_not_prometheus(server: MetricsServer, ctype: str) -> None:
    server.serve_bytes(HTML, ctype)
    with pytest.raises(NotPrometheus, match=r"not (a )?Prometheus"):
        scrape(server.url)


def test_http_error_and_foreign_prometheus_page(server: MetricsServer) -> None:
    server.serve_bytes(b"Not Found", "text/plain", "404 Not Found")
    with pytest.raises(NotPrometheus, match="HTTP 404"):
        scrape(server.url)
    reg = pc.CollectorRegistry()
    pc.Counter("http_requests", "x", registry=reg).inc()
    server.serve_bytes(pc.generate_latest(reg))
    with pytest.raises(NotPrometheus, match="without vLLM's metrics"):
        scrape(server.url)


# ----------------------------------------------------------------------------- the command, end to end

def run_cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": SRC, "COLUMNS": "80"}
    return subprocess.run([*CLI, *args], capture_output=True,
                          text=True, env=env, timeout=timeout)


def test_once_exit_codes(server: MetricsServer, config: Any) -> None:
    m = VllmMetrics(config)
    server.serve(m)
    m.steps(HEALTHY * 10)  # counters since start: judged because nothing moves within --interval
    r = run_cli(server.url, "--once", "--interval", "0.05")
    assert r.returncode == 0, r.stderr
    assert "ds4-s1  accept 54.2 %  pos 88/50/25  len 2.62" in r.stdout and "ok (since start)" in r.stdout
    m.steps(COLLAPSED * 500)
    r = run_cli(server.url, "--once", "--interval", "0.05")
    assert r.returncode == 1
    assert "ALERT ds4-s1: acceptance 7.5 % since start" in r.stdout
    assert r.stderr == ""
    r = run_cli(server.url, "--once", "--interval", "0.05", "--min-acceptance", "5%")
    assert r.returncode == 0


@pytest.mark.parametrize("page", ["html", "down", "nospec"])
def test_once_cannot_watch_is_one_line_exit_2(server: MetricsServer, page: str, s1_dir: Path) -> None:
    url = server.url
    if page == "html":
        server.serve_bytes(HTML, "text/html")
    elif page == "nospec":
        server.serve(VllmMetrics(vllm_config(str(s1_dir), "plain", speculative=None)))
    else:
        server.close()
    r = run_cli(url, "--once", "--interval", "0.05", "--timeout", "2")
    assert r.returncode == 2
    assert len(r.stderr.strip().splitlines()) == 1 and r.stderr.startswith("specguard: error: ")
    assert "Traceback" not in r.stderr + r.stdout
    if page == "down":
        server.__init__()  # the fixture closes it again


def test_json_lines_and_ctrl_c(server: MetricsServer, config: Any) -> None:
    m = VllmMetrics(config)
    server.serve(m)
    env = {**os.environ, "PYTHONPATH": SRC}
    proc = start_watch(server.url, "--json", "--interval", "0.05", stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, env=env)
    records = []
    try:
        assert proc.stdout is not None
        for _ in range(3):
            m.steps(COLLAPSED * 100)
            records.append(json.loads(proc.stdout.readline()))
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130 and err.strip() == "specguard: interrupted"
    assert all(r["error"] is None for r in records)
    last = records[-1]["models"][0]
    assert last["model"] == "ds4-s1" and last["status"] == "alert" and last["acceptance"] == 0.0
    assert last["speculation_costs"] is True and records[-1]["alerts"][0].startswith("ALERT ds4-s1")


def test_live_view_on_a_terminal_at_80_columns(server: MetricsServer, config: Any) -> None:
    """On a TTY the command draws rich's live table (at 80 columns) and Ctrl-C still ends it in one line."""
    import fcntl
    import pty
    import select
    import struct
    import termios

    m = VllmMetrics(config, engines=[0, 1])
    server.serve(m)
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    env = {**os.environ, "PYTHONPATH": SRC, "TERM": "xterm-256color"}
    env.pop("COLUMNS", None)
    proc = start_watch(server.url, "--interval", "0.05", stdout=slave, stderr=subprocess.PIPE, env=env)
    os.close(slave)
    screen = b""
    deadline = time.monotonic() + 30
    try:
        while b"alert" not in screen and time.monotonic() < deadline:
            m.steps(COLLAPSED * 100, engine=1)
            if select.select([master], [], [], 0.05)[0]:
                screen += os.read(master, 65536)
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
        os.close(master)
    text = screen.decode(errors="replace")
    plain = strip_ansi(text)
    assert "\x1b[" in text and "┃ model" in plain and "per pos %" in plain  # rich table, control codes
    assert "ALERT ds4-s1: acceptance 0.0 %" in text
    rows = [ln for ln in text.replace("\r", "\n").split("\n") if "│" in ln]
    assert rows and all(len(strip_ansi(r)) <= 80 for r in rows)
    assert proc.returncode == 130 and err.decode().strip() == "specguard: interrupted"


def strip_ansi(s: str) -> str:
    import re

    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", s)


def test_bad_arguments_exit_2_in_one_line() -> None:
    r = run_cli("127.0.0.1:9", "--interval", "0")
    assert r.returncode == 2 and r.stderr.strip() == "specguard: error: --interval must be in (0, 3600] seconds, not 0"
    r = run_cli("127.0.0.1:9", "--min-acceptance", "150%")
    assert r.returncode == 2 and "is outside 0..1" in r.stderr and "Traceback" not in r.stderr
    r = run_cli("ftp://127.0.0.1:9", "--once")
    assert r.returncode == 2 and r.stderr.strip() == "specguard: error: ftp://127.0.0.1:9: not an http(s) URL"


def test_checkpoint_verdict_beside_the_alert(server: MetricsServer, config: Any, s1_dir: Path) -> None:
    m = VllmMetrics(config)
    server.serve(m)
    m.steps(COLLAPSED * 300)
    r = run_cli(server.url, "--once", "--interval", "0.05", "--checkpoint", str(s1_dir))
    assert r.returncode == 1, r.stderr
    lines = r.stdout.splitlines()
    i = next(i for i, ln in enumerate(lines) if ln.startswith("ALERT ds4-s1"))
    assert lines[i + 1].startswith("  checkpoint ") and "SG201 error" in lines[i + 1]
    assert lines[i + 2] == "    draft routed experts stored MXFP4, vLLM 0.33 builds NVFP4 (ModelOptNvFp4FusedMoE)"
    assert lines[i + 3] == (f"    likely cause of a collapse; fix: `specguard fix {s1_dir} --out DIR`, "
                            "or serve with the specguard vLLM plugin")
    assert all(len(ln) <= 160 for ln in lines), [len(ln) for ln in lines]


# ----------------------------------------------------------------------------- the reference engine's runs

@pytest.fixture(scope="module")
def engine_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[tuple[Any, int]]]:
    """(SpecStats, tokens generated) per request of `specguard demo`'s S1 under the resolver and
    global policies, through the functions demo.py itself calls."""
    import torch

    from specguard.refdecoder.demo import export_all, load_case, prompts_from_held_out
    from specguard.refdecoder.specdec import speculative_generate

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        infos = export_all(tmp_path_factory.mktemp("watch-engine"), ["s1"])
        prompts = prompts_from_held_out(8, length=48)
        out = {}
        # a collapsed drafter shows it in few requests, each a verify per token: 3 x 48 drafts of 3
        # tokens is past the watch's floor of draft tokens (levels.MIN_DRAFT_TOKENS) already
        for policy, requests in (("resolver", prompts), ("global", prompts[:3])):
            loaded = load_case("s1", policy, infos, "cpu")
            gens = [speculative_generate(loaded.model, p, 48, 3, loaded.drafter) for p in requests]
            out[policy] = [(g.stats, len(g.tokens)) for g in gens]
        return out
    finally:
        torch.set_num_threads(threads)


def export_runs(m: VllmMetrics, runs: list[tuple[Any, int]]) -> None:
    """Each request's counters as the SpecDecodingStats vLLM's scheduler reports."""
    from vllm.v1.spec_decode.metrics import SpecDecodingStats

    for s, tokens in runs:
        stats = SpecDecodingStats(num_spec_tokens=s.k, num_drafts=s.num_drafts, num_draft_tokens=s.num_draft_tokens,
                                  num_accepted_tokens=s.num_accepted_tokens,
                                  num_accepted_tokens_per_pos=list(s.accepted_per_pos),
                                  num_draft_tokens_per_pos=[s.num_drafts] * s.k)
        m.record(stats, tokens)


def test_demo_global_collapse_is_caught_resolver_passes(
        server: MetricsServer, s1_dir: Path, engine_runs: dict[str, list[tuple[Any, int]]]) -> None:
    resolver = VllmMetrics(vllm_config(str(s1_dir), "s1-resolver"))
    global_ = VllmMetrics(vllm_config(str(s1_dir), "s1-global"))
    server.serve(resolver, global_)
    w = watcher(server)
    w.start()
    export_runs(resolver, engine_runs["resolver"])
    export_runs(global_, engine_runs["global"])
    verdicts = {v.stats.model: v for v in w.poll().verdicts}
    ok, bad = verdicts["s1-resolver"], verdicts["s1-global"]
    assert ok.status == "ok" and ok.stats.acceptance > 0.4 and ok.stats.per_position[0] > 0.8
    assert bad.status == "alert" and bad.stats.acceptance == 0 and bad.stats.mean_acceptance_length == 1
    assert "speculation is costing you" in bad.alerts[0]
    r = run_cli(server.url, "--once", "--interval", "0.05", "--json")
    assert r.returncode == 1, r.stderr
    (record,) = [json.loads(line) for line in r.stdout.splitlines()]
    assert {m["model"]: m["status"] for m in record["models"]} == {"s1-resolver": "ok", "s1-global": "alert"}


def test_a_server_that_does_not_speak_http() -> None:
    """A TCP server that answers garbage (an SSH or Redis port given by mistake)."""
    import socketserver
    import threading

    class Garbage(socketserver.BaseRequestHandler):
        def handle(self) -> None:
            self.request.recv(1024)
            self.request.sendall(b"SSH-2.0-OpenSSH_9.6\r\n")

    with socketserver.TCPServer(("127.0.0.1", 0), Garbage) as srv:
        threading.Thread(target=srv.serve_forever, args=(POLL,), daemon=True).start()  # quick shutdown()
        try:
            with pytest.raises(NotPrometheus, match="did not answer in HTTP"):
                scrape(f"http://127.0.0.1:{srv.server_address[1]}/metrics", timeout=5)
        finally:
            srv.shutdown()
    with pytest.raises(ServerDown, match="not a valid URL"):
        scrape("http://127.0.0.1:8x/metrics")


# --- what a pipe and a terminal read (issue 24, item 15) ----------------------------------------


def test_a_window_shorter_than_the_interval_is_refused() -> None:
    r = run_cli("127.0.0.1:9", "--window", "1", "--interval", "5")
    assert r.returncode == 2 and r.stderr.count("\n") == 1
    assert "--window 1 s is shorter than --interval 5 s" in r.stderr


def _plain_lines(server: MetricsServer, m: VllmMetrics, ticks: int, between: Any) -> list[str]:
    """What `specguard watch URL | cat` prints over ``ticks`` intervals, ``between(i)`` run before each."""
    env = {**os.environ, "PYTHONPATH": SRC}
    proc = start_watch(server.url, "--interval", "0.2", "--window", "0.2", stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, env=env)
    lines: list[str] = []
    try:
        assert proc.stdout is not None
        lines.append(proc.stdout.readline())  # the header: the reference scrape is done
        for i in range(ticks):
            between(i)
            lines.append(proc.stdout.readline())  # the interval's first line (more come with the rest)
    finally:
        proc.send_signal(signal.SIGINT)
        rest, _ = proc.communicate(timeout=30)
    return [*lines, *rest.splitlines()]


def test_an_alert_prints_its_reason_once_in_a_pipe(server: MetricsServer, config: Any) -> None:
    m = VllmMetrics(config)
    server.serve(m)
    lines = _plain_lines(server, m, 4, lambda i: m.steps(COLLAPSED * 100))
    alerts = [ln for ln in lines if ln.startswith("ALERT ds4-s1")]
    status = [ln for ln in lines if ln.rstrip().endswith("alert")]
    assert len(alerts) == 1 and len(status) >= 3, lines


def test_a_server_that_dies_mid_watch_is_said_once(server: MetricsServer, config: Any) -> None:
    m = VllmMetrics(config)
    server.serve(m)
    steps = {0: lambda: m.steps(HEALTHY * 20), 1: server.close}
    lines = _plain_lines(server, m, 2, lambda i: steps[i]())
    time.sleep(1)  # several more intervals with the server gone
    gone = [ln for ln in lines if "server gone" in ln]
    assert len(gone) == 1, lines
    server.__init__()  # the fixture closes it again


def test_once_names_a_server_gone_between_its_scrapes(server: MetricsServer, config: Any) -> None:
    server.serve(VllmMetrics(config))
    w = watcher(server)
    with pytest.raises(ServerDown, match="server gone: answered the first scrape"):
        w.once(0.0, sleep=lambda _: server.close())
    server.__init__()


def test_the_live_table_says_what_engines_counts(server: MetricsServer, config: Any) -> None:
    from rich.console import Console

    from specguard.commands.watch import Output

    m = VllmMetrics(config)
    m.steps(HEALTHY * 20)
    server.serve(m)
    console = Console(record=True, width=80, force_terminal=True)
    out = Output("live", None, console)
    tick = watcher(server).once(0.0)
    out.show(tick, server.url)
    text = console.export_text()
    assert "engines" in text and "engines: vLLM engine processes reporting for the model" in text
    assert " eng " not in text
