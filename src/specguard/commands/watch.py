"""`specguard watch URL`: speculative-decoding health of a running vLLM server.

A live table on a terminal, one plain line per model and interval in a pipe,
one JSON line per interval with ``--json``. ``--once`` exits 0 healthy (or
too idle to judge), 1 on an alert, 2 when the server cannot be watched.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import sys
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from specguard.errors import UsageError
from specguard.integrations.watch.levels import ALERT, IDLE, MAX_DROP, MIN_ACCEPTANCE
from specguard.terminal import console as terminal_console

if TYPE_CHECKING:  # imported when the command runs: `specguard lint` should not pay for them
    from specguard.integrations.watch import Tick, Verdict, WatchError
    from specguard.integrations.watch.verdict import CheckpointVerdict

EXIT_OK, EXIT_ALERT = 0, 1  # 2 (cannot watch, a WatchError) and 130 (Ctrl-C) come from the CLI
_STYLE = {"ok": "green", ALERT: "bold red", IDLE: "dim"}


def fraction(text: str) -> float:
    """``0.1`` or ``10%`` -> 0.1 (argparse type)."""
    try:
        value = float(text[:-1]) / 100 if text.endswith("%") else float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a fraction (0.1) or a percentage (10%)") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"{text!r} is outside 0..1 (0 %..100 %)")
    return value


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("url", help="the vLLM server (host:port, http://host:port or the full /metrics URL)")
    p.add_argument("--interval", type=float, default=5.0, metavar="S", help="seconds between scrapes (default 5)")
    p.add_argument("--window", type=float, default=60.0, metavar="S",
                   help="seconds of counter deltas each verdict covers (default 60)")
    p.add_argument("--min-acceptance", type=fraction, default=MIN_ACCEPTANCE, metavar="P",
                   help="alert below this acceptance, 0.1 or 10%% (default 10%%: no healthy drafter in "
                        "the project's figures accepts under 34%%, no collapsed one over 2%%)")
    p.add_argument("--max-drop", type=fraction, default=MAX_DROP, metavar="P",
                   help="alert when acceptance falls this much below the first healthy window (default 25%%)")
    p.add_argument("--once", action="store_true",
                   help="two scrapes --interval apart, one verdict; exit 0 healthy, 1 alert, 2 cannot watch")
    p.add_argument("--json", action="store_true", help="one JSON line per interval")
    p.add_argument("--checkpoint", metavar="SRC",
                   help="the served checkpoint: show specguard's verdict on it beside the live numbers")
    p.add_argument("--timeout", type=float, default=5.0, metavar="S", help="HTTP timeout per scrape (default 5)")


def _check(args: argparse.Namespace) -> None:
    if not 0 < args.interval <= 3600:
        raise UsageError(f"--interval must be in (0, 3600] seconds, not {args.interval:g}")
    if not 0 < args.window <= 7 * 86400:
        raise UsageError(f"--window must be in (0, 604800] seconds, not {args.window:g}")
    if not 0 < args.timeout <= 600:
        raise UsageError(f"--timeout must be in (0, 600] seconds, not {args.timeout:g}")
    if args.window < args.interval and not args.once:  # a verdict covers at least one interval
        raise UsageError(f"--window {args.window:g} s is shorter than --interval {args.interval:g} s: each "
                         "verdict covers at least one interval between scrapes (pass --window >= --interval)")


def _checkpoint(source: str) -> CheckpointVerdict:
    from specguard.commands.sources import open_path
    from specguard.integrations.watch.verdict import checkpoint_verdict
    from specguard.resolve import Resolver

    return checkpoint_verdict([Resolver(open_path(source))])


def run_watch(args: argparse.Namespace) -> int:
    from specguard.integrations.watch import Thresholds, Watcher, WatchError

    _check(args)
    thresholds = Thresholds(args.min_acceptance, args.max_drop)
    verdict = _checkpoint(args.checkpoint) if args.checkpoint else None
    out = Output("json" if args.json else "live" if sys.stdout.isatty() else "plain", verdict)
    try:
        watcher = Watcher(args.url, args.window, thresholds, timeout=args.timeout)
        if args.once:
            tick = watcher.once(args.interval)
            out.started(watcher.url, args.interval, None)
            out.show(tick, watcher.url)
            return EXIT_ALERT if any(v.status == ALERT for v in tick.verdicts) else EXIT_OK
        watcher.start()
        out.started(watcher.url, args.interval, args.window)
        with out.live():
            while True:
                time.sleep(args.interval)
                out.show(watcher.poll(), watcher.url)
    except WatchError as e:
        out.error(e)  # the JSON record first; then the CLI's one line, exit 2
        raise
    except KeyboardInterrupt:  # the CLI prints its one line and exits 130
        out.close()
        raise


# ----------------------------------------------------------------------------- output

def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f} %"


def _num(x: float | None, fmt: str = ".1f") -> str:
    return "-" if x is None else format(x, fmt)


def _per_pos(v: Verdict) -> str:
    pp = v.stats.per_position
    return "-" if pp is None else "/".join(f"{100 * p:.0f}" for p in pp)


def _status(v: Verdict) -> str:
    if v.status == IDLE:
        return f"idle ({v.stats.counts.draft_tokens:,.0f} draft tokens: too few to judge)"
    return v.status + (" (since start)" if v.stats.seconds is None else "")


def _clock(t: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(t))


def plain_line(v: Verdict, t: float) -> str:
    """One model, one line: ``09:01:02 ds4  accept 54.3 %  pos 95/47/21  len 2.63  ...``."""
    s = v.stats
    return (f"{_clock(t)} {s.model}  accept {_pct(s.acceptance)}  pos {_per_pos(v)}  "
            f"len {_num(s.mean_acceptance_length, '.2f')}  {_num(s.drafts_per_s)} drafts/s  "
            f"{_num(s.generation_tokens_per_s)} tok/s  {_status(v)}")


def _reason(alert: str) -> str:
    """An alert line without its figures: the same reason while the figures move."""
    return re.sub(r"\d[\d.,]*", "#", alert)


def tick_record(tick: Tick, url: str, verdict: CheckpointVerdict | None) -> dict:
    return {
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(tick.time)), "url": url,
        "models": [v.as_dict() for v in tick.verdicts],
        "alerts": [a for v in tick.verdicts for a in v.alerts],
        "restarted": [{"model_name": m, "engine": e} for m, e in tick.restarted],
        "error": {"kind": tick.error.kind, "message": str(tick.error)} if tick.error else None,
        "checkpoint": verdict.as_dict() if verdict else None,
    }


class Output:
    """Where ticks go: a rich Live table, plain lines, or JSON lines."""

    def __init__(self, mode: str, verdict: CheckpointVerdict | None, console: Console | None = None) -> None:
        self.mode, self.verdict = mode, verdict
        self.console = console or terminal_console()
        self._live: Live | None = None
        self._header = ""
        self._alerting: set[str] = set()  # models whose last verdict was an alert
        self._said: dict[str, set[str]] = {}  # model -> the alert reasons printed since it started alerting
        self._gone = False  # the server stopped answering: said once, until it answers again
        self._last: Tick | None = None  # the live table keeps the last figures through an error

    def started(self, url: str, interval: float, window: float | None) -> None:
        """The header (``window`` None: --once, two scrapes ``interval`` apart)."""
        span = f"every {interval:g} s, window {window:g} s" if window else f"once, over {interval:g} s"
        self._header = f"specguard watch {url}: {span}"
        if self.mode == "plain":
            print(self._header + ("" if window is None else " (first figures after one interval)"), flush=True)
            for line in self.verdict.lines() if self.verdict and window else []:
                print(line, flush=True)

    @contextlib.contextmanager
    def live(self) -> Iterator[None]:
        if self.mode != "live":
            yield
            return
        with Live(self._render(None), console=self.console, auto_refresh=False) as self._live:
            yield

    def close(self) -> None:
        if self._live is not None:
            self._live.stop()

    def show(self, tick: Tick, url: str) -> None:
        if self.mode == "json":
            print(json.dumps(tick_record(tick, url, self.verdict)), flush=True)
        elif self.mode == "live" and self._live is not None:
            self._live.update(self._render(tick), refresh=True)
        elif self.mode == "live":  # --once on a terminal
            self.console.print(self._render(tick))
        else:
            self._plain(tick)

    def error(self, e: WatchError) -> None:
        self.close()
        if self.mode == "json":
            print(json.dumps({"time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                              "error": {"kind": e.kind, "message": str(e)}}), flush=True)

    def _plain(self, tick: Tick) -> None:
        """A pipe or a CI log: a line per model and interval; an alert's reasons and the
        checkpoint's verdict when a model starts alerting, not again each interval while
        it stays so; a server that stops answering said once, and when it is back."""
        if tick.error is not None:
            if not self._gone:
                print(f"{_clock(tick.time)} server gone: {tick.error}; waiting for it (said once)", flush=True)
            self._gone = True
            return
        if self._gone:
            print(f"{_clock(tick.time)} server back", flush=True)
            self._gone = False
        for model, engine in tick.restarted:
            print(f"{_clock(tick.time)} {model} engine {engine} restarted: its counters count from zero", flush=True)
        for v in tick.verdicts:
            print(plain_line(v, tick.time), flush=True)
            model = v.stats.model
            said = self._said.setdefault(model, set())
            for alert in v.alerts:  # a reason once while it holds, not again each interval
                if _reason(alert) not in said:
                    print(alert, flush=True)
                    said.add(_reason(alert))
            if v.alerts and model not in self._alerting and self.verdict:  # the likely cause, once per alert
                for line in self.verdict.lines():
                    print("  " + line, flush=True)
            if v.status != ALERT:
                said.clear()
            if v.status == ALERT:
                self._alerting.add(model)
            else:
                self._alerting.discard(model)

    def _render(self, tick: Tick | None) -> Group:
        table = Table(title=Text(self._header) if self._header else None, title_justify="left")
        for name in ("model", "engines", "accept", "per pos %", "len", "drafts/s", "tok/s", "status"):
            table.add_column(name, justify="left" if name in ("model", "status") else "right", overflow="fold",
                             no_wrap=name != "model")
        parts: list = [table]
        error = tick.error if tick is not None else None
        if tick is not None and error is None:
            self._last = tick
        shown = self._last
        if shown is None and error is None:
            parts.append(Text("waiting for the first interval...", style="dim"))
        for v in shown.verdicts if shown else []:
            s = v.stats
            status = v.status + (" *" if s.seconds is None else "")
            table.add_row(Text(s.model), str(len(s.engines)), _pct(s.acceptance), _per_pos(v),
                          _num(s.mean_acceptance_length, ".2f"), _num(s.drafts_per_s), _num(s.generation_tokens_per_s),
                          Text(status, style=_STYLE.get(v.status, "")))
        if shown is not None:
            parts += [Text(a, style="bold red") for v in shown.verdicts for a in v.alerts]
            if any(v.stats.seconds is None for v in shown.verdicts):
                parts.append(Text("* judged on the counters since the engines started", style="dim"))
            parts.append(Text("engines: vLLM engine processes reporting for the model (the metrics' engine "
                              "label)", style="dim"))
        if tick is not None and error is not None:
            parts.append(Text(f"{_clock(tick.time)} {error}" + (" (figures above: the last good scrape)"
                                                                  if shown else ""), style="yellow"))
        parts += [Text(line) for line in (self.verdict.lines() if self.verdict else [])]
        return Group(*parts)
