"""Read vLLM's ``/metrics`` page into per-engine counter snapshots.

Metric names and labels are vLLM 0.33's:

- ``SpecDecodingProm.__init__`` (vllm/v1/spec_decode/metrics.py) registers the
  counters ``vllm:spec_decode_num_drafts``, ``..._num_draft_tokens``,
  ``..._num_accepted_tokens`` and ``..._num_accepted_tokens_per_pos`` (extra
  label ``position``) only when a ``speculative_config`` is set;
- ``PrometheusStatLogger.__init__`` (vllm/v1/metrics/loggers.py) labels every
  series ``model_name`` (the served model name) and ``engine`` (the engine
  index, one per data-parallel engine) and registers ``vllm:generation_tokens``.

prometheus_client writes a counter's samples as ``NAME_total`` and, outside
multiprocess mode, ``NAME_created`` (when the labelled child was created, i.e.
when the engine's process started). The page is parsed with prometheus_client's
own text parser.
"""

from __future__ import annotations

import http.client
import math
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field

from prometheus_client.openmetrics.parser import text_string_to_metric_families as openmetrics_families
from prometheus_client.parser import text_string_to_metric_families

from specguard.errors import SpecguardError

DRAFTS = "vllm:spec_decode_num_drafts"
DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens"
ACCEPTED = "vllm:spec_decode_num_accepted_tokens"
ACCEPTED_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos"
GENERATION_TOKENS = "vllm:generation_tokens"
SPEC_COUNTERS = (DRAFTS, DRAFT_TOKENS, ACCEPTED)
MODEL_LABEL, ENGINE_LABEL, POSITION_LABEL = "model_name", "engine", "position"

MAX_PAGE_BYTES = 64 * 1024 * 1024  # a real page is ~100 kB; refuse to buffer a hostile stream
ACCEPT = "text/plain;version=0.0.4;q=0.9,*/*;q=0.1"


class WatchError(SpecguardError):
    """A server that cannot be watched: one line, exit 2."""

    kind = "error"


class ServerDown(WatchError):
    kind = "server_down"


class NotPrometheus(WatchError):
    kind = "not_prometheus"


class NoSpecDecode(WatchError):
    kind = "no_spec_decode"


class CounterWentBackwards(WatchError):
    kind = "counter_backwards"


SeriesKey = tuple[str, str]  # (model_name, engine)


@dataclass
class Counters:
    """One engine's cumulative counters at one scrape."""

    drafts: float = 0.0
    draft_tokens: float = 0.0
    accepted: float = 0.0
    per_pos: dict[int, float] = field(default_factory=dict)
    generation_tokens: float | None = None  # None: not exported
    created: float | None = None  # the drafts counter's _created; None in multiprocess mode

    def values(self) -> dict[str, float]:
        """Every counter by name (per position as ``pos<i>``), for the going-backwards check."""
        out = {DRAFTS: self.drafts, DRAFT_TOKENS: self.draft_tokens, ACCEPTED: self.accepted}
        out.update({f"{ACCEPTED_PER_POS}{{position={p}}}": v for p, v in self.per_pos.items()})
        if self.generation_tokens is not None:
            out[GENERATION_TOKENS] = self.generation_tokens
        return out


@dataclass
class Snapshot:
    """All engines' counters at one scrape; ``time`` is this process's monotonic clock."""

    time: float
    series: dict[SeriesKey, Counters]


def metrics_url(url: str) -> str:
    """``host:port`` or ``http://host:port`` -> ``http://host:port/metrics``; an explicit path is kept."""
    if "://" not in url:
        url = "http://" + url
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ServerDown(f"{url}: not an http(s) URL")
    if parts.path in ("", "/"):
        parts = parts._replace(path="/metrics")
    return urllib.parse.urlunsplit(parts)


def fetch(url: str, timeout: float) -> tuple[str, str]:
    """(page text, content type) of ``url``; ServerDown / NotPrometheus on failure."""
    req = urllib.request.Request(url, headers={"Accept": ACCEPT, "User-Agent": "specguard-watch"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            body = resp.read(MAX_PAGE_BYTES + 1)
            ctype = resp.headers.get("Content-Type", "")
    except urllib.error.HTTPError as e:
        raise NotPrometheus(f"{url} answered HTTP {e.code} {e.reason}: not a metrics page") from None
    except http.client.InvalidURL as e:
        raise ServerDown(f"{url}: not a valid URL ({e})") from None
    except http.client.HTTPException as e:  # a server that does not speak HTTP, or cut the answer short
        raise NotPrometheus(f"{url} did not answer in HTTP ({e.__class__.__name__}: {str(e)[:60]})") from None
    except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", e)
        raise ServerDown(f"{url}: server down or unreachable ({reason})") from None
    if len(body) > MAX_PAGE_BYTES:
        raise NotPrometheus(f"{url} answered more than {MAX_PAGE_BYTES >> 20} MiB: not a metrics page")
    try:
        return body.decode("utf-8"), ctype
    except UnicodeDecodeError:
        raise NotPrometheus(f"{url} answered bytes that are not UTF-8 text: not a Prometheus page") from None


def _samples(text: str, ctype: str):
    families = openmetrics_families if "openmetrics" in ctype else text_string_to_metric_families
    for family in families(text):
        yield from family.samples


def parse(text: str, ctype: str = "text/plain", now: float | None = None, url: str = "page") -> Snapshot:
    """The spec-decode counters of every (model_name, engine) series on a Prometheus page."""
    series: dict[SeriesKey, Counters] = {}
    with_drafts: set[SeriesKey] = set()  # generation_tokens alone: an engine that does not speculate
    seen_vllm = False
    try:
        samples = list(_samples(text, ctype))
    except ValueError as e:  # prometheus_client's parser rejects anything that is not exposition text
        first = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")[:60]
        raise NotPrometheus(f"{url} is not a Prometheus page ({e.__class__.__name__}: "
                            f"{str(e)[:60]}; first line {first!r})") from None
    for s in samples:
        seen_vllm |= s.name.startswith("vllm:")
        name, suffix = _split(s.name)
        if name is None:
            continue
        if not math.isfinite(s.value) or s.value < 0:
            raise NotPrometheus(f"{url}: {s.name}{_labels(s.labels)} = {s.value} is not a counter value")
        key = (s.labels.get(MODEL_LABEL, ""), s.labels.get(ENGINE_LABEL, ""))
        c = series.setdefault(key, Counters())
        if suffix == "_created":
            if name == DRAFTS:
                c.created = s.value
        elif name == DRAFTS:
            c.drafts = s.value
            with_drafts.add(key)
        elif name == DRAFT_TOKENS:
            c.draft_tokens = s.value
        elif name == ACCEPTED:
            c.accepted = s.value
        elif name == ACCEPTED_PER_POS:
            c.per_pos[_position(s.labels, url)] = s.value
        elif name == GENERATION_TOKENS:
            c.generation_tokens = s.value
    spec = {k: c for k, c in series.items() if k in with_drafts}
    if not spec:
        if not seen_vllm:
            raise NotPrometheus(f"{url} is a Prometheus page without vLLM's metrics (no vllm:* series): "
                                "is this a vLLM server's /metrics?")
        raise NoSpecDecode(f"{url}: vLLM serves no {DRAFTS}_total counters: speculative decoding is not "
                           "configured (SpecDecodingProm registers them only with a speculative_config)")
    return Snapshot(time.monotonic() if now is None else now, spec)


_KNOWN = (*SPEC_COUNTERS, ACCEPTED_PER_POS, GENERATION_TOKENS)


def _split(sample_name: str) -> tuple[str | None, str]:
    for suffix in ("_total", "_created"):
        base = sample_name.removesuffix(suffix)
        if base != sample_name and base in _KNOWN:
            return base, suffix
    return None, ""


def _position(labels: dict[str, str], url: str) -> int:
    raw = labels.get(POSITION_LABEL, "")
    if not raw.isdigit():
        raise NotPrometheus(f"{url}: {ACCEPTED_PER_POS}_total has position={raw!r}, not a draft position")
    return int(raw)


def _labels(labels: dict[str, str]) -> str:
    return "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"


def scrape(url: str, timeout: float = 5.0) -> Snapshot:
    """Fetch and parse one page (``url`` as given to metrics_url)."""
    text, ctype = fetch(url, timeout)
    if ctype and not ctype.startswith(("text/plain", "application/openmetrics-text")):
        head = text.lstrip()[:1]
        if head == "<" or ctype.startswith(("text/html", "application/json")):
            raise NotPrometheus(f"{url} answered {ctype.split(';')[0]}, not Prometheus text "
                                "(is this the server's /metrics path?)")
    return parse(text, ctype, url=url)
