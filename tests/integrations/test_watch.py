"""`specguard watch` against vLLM 0.33's own metric objects served over real HTTP.

Each test feeds scripted scheduler stats through vLLM's PrometheusStatLogger /
SpecDecodingProm (watch_server.py), scrapes the page the way the command does
and checks the verdict. The Watcher is polled directly, so no test sleeps.
"""

from __future__ import annotations

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
from tests.integrations.watch_server import COLLAPSED, HEALTHY, MetricsServer, VllmMetrics, vllm_config

SRC = str(Path(__file__).resolve().parents[2] / "src")


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
    assert "speculation is costing you" in line and "down 100.0 % from 54.2 %" in line
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
    return subprocess.run([sys.executable, "-m", "specguard.cli", "watch", *args], capture_output=True,
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
    assert len(r.stderr.strip().splitlines()) == 1 and r.stderr.startswith("specguard watch: ")
    assert "Traceback" not in r.stderr + r.stdout
    if page == "down":
        server.__init__()  # the fixture closes it again


def test_json_lines_and_ctrl_c(server: MetricsServer, config: Any) -> None:
    m = VllmMetrics(config)
    server.serve(m)
    env = {**os.environ, "PYTHONPATH": SRC}
    proc = subprocess.Popen([sys.executable, "-m", "specguard.cli", "watch", server.url, "--json",
                             "--interval", "0.05"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env)
    records = []
    try:
        assert proc.stdout is not None
        for _ in range(3):
            m.steps(COLLAPSED * 100)
            records.append(json.loads(proc.stdout.readline()))
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130 and err.strip() == "specguard watch: interrupted"
    assert all(r["error"] is None for r in records)
    last = records[-1]["models"][0]
    assert last["model"] == "ds4-s1" and last["status"] == "alert" and last["acceptance"] == 0.0
    assert last["speculation_costs"] is True and records[-1]["alerts"][0].startswith("ALERT ds4-s1")


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
    assert lines[i + 3].startswith("    likely cause of a collapse: serve with the specguard vLLM plugin")
    assert all(len(ln) <= 160 for ln in lines), [len(ln) for ln in lines]
