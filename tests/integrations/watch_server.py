"""A real /metrics endpoint for `specguard watch`: vLLM 0.33's own Prometheus stat logger,
fed scripted scheduler stats, served over HTTP on 127.0.0.1.

``VllmMetrics`` is vLLM's ``PrometheusStatLogger`` (vllm/v1/metrics/loggers.py), which builds
``SpecDecodingProm`` (vllm/v1/spec_decode/metrics.py) and ``vllm:generation_tokens`` exactly as
a server does; the only change is the registry its metric classes register in (vLLM's own hook:
the ``_counter_cls`` / ``_gauge_cls`` / ``_histogram_cls`` / ``_spec_decoding_cls`` class
attributes), so several "processes" can live in one test. ``record`` is the path vLLM's engine
loop takes (``SchedulerStats.spec_decoding_stats``, ``IterationStats.num_generation_tokens``).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterable
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import prometheus_client as pc

SPEC = {"method": "mtp", "num_speculative_tokens": 3}
POLL = 0.01  # seconds between serve_forever's checks for shutdown() (its default: 0.5)


def vllm_config(model: str, served_name: str | None = None, speculative: dict | None = SPEC) -> Any:
    """The VllmConfig ``vllm serve MODEL --served-model-name NAME --speculative-config ...`` builds."""
    from tests.integrations.vllm_harness import engine_config

    return engine_config(model, speculative, served_model_name=served_name)


class VllmMetrics:
    """One vLLM server process's metrics: PrometheusStatLogger over ``engines`` in a registry of its own."""

    def __init__(self, config: Any, engines: Iterable[int] = (0,)) -> None:
        from vllm.v1.metrics.loggers import PrometheusStatLogger
        from vllm.v1.spec_decode.metrics import SpecDecodingProm

        self.registry = reg = pc.CollectorRegistry()

        class Spec(SpecDecodingProm):
            _counter_cls = functools.partial(pc.Counter, registry=reg)

        class Logger(PrometheusStatLogger):
            _counter_cls = functools.partial(pc.Counter, registry=reg)
            _gauge_cls = functools.partial(pc.Gauge, registry=reg)
            _histogram_cls = functools.partial(pc.Histogram, registry=reg)
            _spec_decoding_cls = Spec

        self.k = config.speculative_config.num_speculative_tokens if config.speculative_config else 0
        self.logger = Logger(config, list(engines))

    def record(self, stats: Any, generation_tokens: int, engine: int = 0) -> None:
        """One scheduler step's stats, as the engine core reports them."""
        from vllm.v1.metrics.stats import IterationStats, SchedulerStats

        it = IterationStats()
        it.num_generation_tokens = generation_tokens
        self.logger.record(SchedulerStats(spec_decoding_stats=stats), it, engine_idx=engine)

    def steps(self, accepted: Iterable[int], engine: int = 0) -> None:
        """Scheduler steps of one request each: k drafted, ``a`` accepted, a + 1 tokens emitted."""
        from vllm.v1.spec_decode.metrics import SpecDecodingStats

        for a in accepted:
            stats = SpecDecodingStats.new(self.k)
            stats.observe_draft(self.k, a)
            self.record(stats, a + 1, engine)

    def page(self) -> bytes:
        return pc.generate_latest(self.registry)


HEALTHY = (3, 2, 1, 0, 2, 1, 3, 1)  # accepted per step at k = 3: 13/24 = 54 %, the demo's resolver level
COLLAPSED = (0,)


class _Quiet(WSGIRequestHandler):
    def log_message(self, *args: object) -> None:
        pass


class MetricsServer:
    """An HTTP server on 127.0.0.1 (port 0) in a thread; ``answer`` decides every response."""

    def __init__(self, port: int = 0) -> None:
        self.answer: Callable[[], tuple[str, str, bytes]] = lambda: ("200 OK", pc.CONTENT_TYPE_LATEST, b"")
        self._server: WSGIServer = make_server("127.0.0.1", port, self._app, handler_class=_Quiet)
        # close() waits for serve_forever's next poll (default 0.5 s, per server)
        self._thread = threading.Thread(target=self._server.serve_forever, args=(POLL,), daemon=True)
        self._thread.start()

    def _app(self, environ: dict, start_response: Callable) -> list[bytes]:
        status, ctype, body = self.answer()
        start_response(status, [("Content-Type", ctype), ("Content-Length", str(len(body)))])
        return [body]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_port}/metrics"

    def serve(self, *metrics: VllmMetrics) -> None:
        """Serve these processes' registries, live (several: one page, as a federating proxy joins them)."""
        self.answer = lambda: ("200 OK", pc.CONTENT_TYPE_LATEST, b"".join(m.page() for m in metrics))

    def serve_bytes(self, body: bytes, ctype: str = pc.CONTENT_TYPE_LATEST, status: str = "200 OK") -> None:
        self.answer = lambda: (status, ctype, body)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
