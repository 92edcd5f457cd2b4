"""The watch loop's state: the last good scrape, the sliding window, the judge."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from specguard.integrations.watch.metrics import (
    CounterWentBackwards,
    SeriesKey,
    Snapshot,
    WatchError,
    metrics_url,
    scrape,
)
from specguard.integrations.watch.window import IDLE, Judge, SlidingWindow, Thresholds, Verdict, by_model, diff

WINDOW, SINCE_START = "window", "since start"


@dataclass
class Tick:
    """One evaluation: a verdict per model, or the error that replaced it."""

    time: float  # wall clock
    verdicts: list[Verdict] = field(default_factory=list)
    restarted: list[SeriesKey] = field(default_factory=list)
    error: WatchError | None = None


class Watcher:
    def __init__(self, url: str, window_s: float, thresholds: Thresholds | None = None,
                 timeout: float = 5.0, fetch: Callable[[str, float], Snapshot] = scrape) -> None:
        self.url = metrics_url(url)
        self.window = SlidingWindow(window_s)
        self.judge = Judge(thresholds or Thresholds())
        self.timeout = timeout
        self._scrape = fetch
        self.prev: Snapshot | None = None

    def scrape(self) -> Snapshot:
        return self._scrape(self.url, self.timeout)

    def start(self) -> Snapshot:
        """The reference scrape; raises WatchError (nothing to watch)."""
        self.prev = self.scrape()
        return self.prev

    def poll(self) -> Tick:
        """Scrape again and judge the window. Errors are reported in the tick, not raised: a live
        watch outlives a restarting server (the next good scrape is compared with the last one)."""
        try:
            cur = self.scrape()
        except WatchError as e:
            return Tick(time.time(), error=e)
        prev, self.prev = self.prev, cur
        try:
            deltas, restarted = diff(prev, cur)
        except CounterWentBackwards as e:  # counted from this scrape on
            return Tick(time.time(), error=e)
        if prev is not None:
            self.window.add(prev.time, cur.time, deltas)
        verdicts = [self.judge.judge(s) for s in self.window.stats()]
        return Tick(time.time(), verdicts, restarted)

    def once(self, interval: float, sleep: Callable[[float], None] = time.sleep) -> Tick:
        """Two scrapes ``interval`` apart, judged; a model with too few drafts between them is judged
        on its counters since its engines started. Raises WatchError."""
        first = self.start()
        sleep(interval)
        try:
            cur = self.scrape()
        except WatchError as e:  # it answered the first scrape: it died in between
            raise type(e)(f"server gone: answered the first scrape, not the second ({e})") from e
        deltas, restarted = diff(first, cur)
        since, _ = diff(None, cur)
        verdicts = []
        for stats in by_model(deltas, cur.time - first.time):
            v = self.judge.judge(stats, learn=False)
            if v.status == IDLE:
                lifetime = {k: d for k, d in since.items() if k[0] == stats.model}
                v = self.judge.judge(by_model(lifetime, None)[0], learn=False)
            verdicts.append(v)
        return Tick(time.time(), verdicts, restarted)
