"""`specguard watch`: speculative-decoding health of a running vLLM server, from its /metrics.

metrics.py reads the page (vLLM 0.33's metric names, prometheus_client's parser),
window.py turns counter snapshots into windowed rates and verdicts, watcher.py
holds the loop's state, verdict.py the served checkpoint's lint verdict. The command's
output lives in commands/watch.py.
"""

from specguard.integrations.watch.metrics import (
    CounterWentBackwards,
    NoSpecDecode,
    NotPrometheus,
    ServerDown,
    Snapshot,
    WatchError,
    parse,
    scrape,
)
from specguard.integrations.watch.watcher import Tick, Watcher
from specguard.integrations.watch.window import Judge, ModelStats, SlidingWindow, Thresholds, Verdict, diff

__all__ = [
    "CounterWentBackwards", "Judge", "ModelStats", "NoSpecDecode", "NotPrometheus", "ServerDown",
    "SlidingWindow", "Snapshot", "Thresholds", "Tick", "Verdict", "WatchError", "Watcher", "diff", "parse",
    "scrape",
]
