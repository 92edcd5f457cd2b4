"""HTTP for ``--remote``: httpx2 (huggingface_hub's client library) under specguard's
own limits, so a hostile or broken server costs a bounded time and one line.

huggingface_hub's ``http_backoff`` obeys any ``Retry-After`` (an hour, five times),
bounds each socket read but not a request (a one-byte-a-second drip never ends),
reads a whole answer into memory before the caller can refuse it, and logs every
retry on stderr. Here instead (docs/remote.md, "Limits"):

- every request has a deadline (body included) and the audit has one; a socket
  operation waits at most until the nearer one (``_Deadlines``), so a drip or a
  stalled ``Content-Length`` ends on time;
- retries wait at most ``retry_wait`` seconds in all; a server asking for longer
  gets one line saying when to come back;
- an answer's size and kind are checked from its headers, and at most the bytes
  asked for are read.

Where the standard library's sockets do exactly what httpx2 would (no proxy, a token
known without huggingface_hub's auth code: revision.py ``plain_fits``), plainhttp.py
carries the requests instead: the same rules, without httpx2's and huggingface_hub's
imports (benchmarks/remote.py times both).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from specguard.checkpoint.errors import CheckpointError
from specguard.checkpoint.limits import ENV, Limits

if TYPE_CHECKING:
    import httpx2

    from specguard.checkpoint import plainhttp

RETRIES = 5  # per request, as huggingface_hub's http_backoff
RETRY_STATUS = frozenset({408, 429, 500, 502, 503, 504})  # http_backoff's list
BACKOFF = 1.0  # seconds before the first retry without Retry-After, doubling (http_backoff's)
MAX_REDIRECTS = 10
POLL = 0.25  # seconds a blocked socket read waits before looking at the deadline and the stop flag


class Answer(NamedTuple):
    status: int
    headers: dict[str, str]  # lower-case names, of the last answer
    body: bytes
    commit: str | None  # X-Repo-Commit of the first answer naming one (the Hub's, before a CDN redirect)
    url: str  # where the last answer came from


class _Clock(threading.local):
    """The calling thread's current request deadline (monotonic) and the audit's stop flag."""

    at: float = math.inf
    stop: threading.Event | None = None


_CLOCK = _Clock()


def _until(timeout: float | None) -> float:
    end = _CLOCK.at if timeout is None else min(_CLOCK.at, time.monotonic() + timeout)
    return end


def _left(end: float, exc: type[Exception]) -> float:
    """Seconds left before ``end``; ``exc`` once it passed or the audit stopped."""
    left = end - time.monotonic()
    if left <= 0 or (_CLOCK.stop is not None and _CLOCK.stop.is_set()):
        raise exc("deadline")
    return left


def _bound_backend(backend: Any) -> Any:
    """httpcore2's network backend with every wait capped by the thread's deadline."""
    import httpcore2

    class Stream(httpcore2.NetworkStream):
        def __init__(self, inner: httpcore2.NetworkStream) -> None:
            self._inner = inner

        def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
            end = _until(timeout)
            while True:  # short waits: a stop (Ctrl-C, another read failed) is seen within POLL
                left = _left(end, httpcore2.ReadTimeout)
                try:
                    return self._inner.read(max_bytes, min(left, POLL))
                except httpcore2.ReadTimeout:
                    continue

        def write(self, buffer: bytes, timeout: float | None = None) -> None:
            self._inner.write(buffer, _left(_until(timeout), httpcore2.WriteTimeout))

        def close(self) -> None:
            self._inner.close()

        def start_tls(self, ssl_context: Any, server_hostname: str | None = None,
                      timeout: float | None = None) -> httpcore2.NetworkStream:
            left = _left(_until(timeout), httpcore2.ConnectTimeout)
            return Stream(self._inner.start_tls(ssl_context, server_hostname, left))

        def get_extra_info(self, info: str) -> Any:
            return self._inner.get_extra_info(info)

    class Backend(httpcore2.NetworkBackend):
        def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
                        socket_options: Any = None) -> httpcore2.NetworkStream:
            left = _left(_until(timeout), httpcore2.ConnectTimeout)
            return Stream(backend.connect_tcp(host, port, left, local_address, socket_options))

        def connect_unix_socket(self, path: str, timeout: float | None = None,
                                socket_options: Any = None) -> httpcore2.NetworkStream:
            left = _left(_until(timeout), httpcore2.ConnectTimeout)
            return Stream(backend.connect_unix_socket(path, left, socket_options))

        def sleep(self, seconds: float) -> None:
            backend.sleep(seconds)

    return Backend()


def _client(connections: int) -> httpx2.Client:
    import httpx2

    client = httpx2.Client(
        limits=httpx2.Limits(max_connections=connections, max_keepalive_connections=connections),
        timeout=None, follow_redirects=True, max_redirects=MAX_REDIRECTS,  # timeouts: _Deadlines
    )
    # httpx2 takes no network backend; its pools keep theirs in `_network_backend` (httpcore2's
    # ConnectionPool and HTTPProxy). tests/checkpoint/test_remote.py's drip cases fail if this moves.
    for transport in (client._transport, *client._mounts.values()):
        pool = getattr(transport, "_pool", None)
        if pool is not None and hasattr(pool, "_network_backend"):
            pool._network_backend = _bound_backend(pool._network_backend)
    return client


class Session:
    """Requests of one audit: shared deadline, shared retry-wait allowance, a stop flag.

    ``where``: the repo id, for messages; ``plain``: the plain client (plainhttp.py) instead of
    httpx2; ``stop``: set, every read ends within POLL."""

    def __init__(self, where: str, headers: dict[str, str], limits: Limits | None = None, connections: int = 32,
                 plain: bool = False, stop: threading.Event | None = None) -> None:
        self.where, self.headers, self.connections, self.plain = where, headers, connections, plain
        self.limits = Limits.from_env() if limits is None else limits
        self.stop = threading.Event() if stop is None else stop
        self.started = time.monotonic()
        self.deadline = self.started + self.limits.audit
        self._waited = 0.0
        self._lock = threading.Lock()
        self.client: httpx2.Client | None = None
        self.pool: plainhttp.Pool | None = None
        if self.plain:
            from specguard.checkpoint import plainhttp
            from specguard.checkpoint.revision import ssl_context

            self.pool = plainhttp.Pool(lambda: _left(_until(None), plainhttp.Timeout), POLL, ssl_context)
        else:
            self.client = _client(self.connections)

    def close(self) -> None:
        if self.client is not None:
            self.client.close()
        if self.pool is not None:
            self.pool.close()

    def get(self, url: str, where: str, *, method: Literal["GET", "HEAD"] = "GET", first: int | None = None,
            last: int | None = None, limit: int, failed: _Retryable | None = None) -> Answer:
        """One answer, retried on 429, 5xx, timeouts and dropped connections within the limits.

        ``first``/``last``: a byte range; a 206 must say it answers that range, a 200 is
        the whole file and is refused from its headers when longer than asked. At most
        ``limit`` bytes of a body are read; an error answer's body is not read at all.
        ``failed``: how a first attempt made elsewhere (get_all) failed; this goes on from it."""
        headers = self._headers(first, last)
        attempts = 0
        while True:
            if failed is None:
                attempts += 1
                try:
                    return self._once(method, url, headers, where, first, last, limit)
                except _Retryable as e:
                    failed = e
            else:
                attempts = max(attempts, 1)
            failure, wait = failed.what, failed.wait
            failed = None
            if attempts > RETRIES:
                raise CheckpointError(where, f"{failure}, {attempts} times; giving up")
            self._pause(where, failure, BACKOFF * 2 ** (attempts - 1) if wait is None else wait, wait)

    def _headers(self, first: int | None, last: int | None) -> dict[str, str]:
        headers = dict(self.headers)
        if first is not None:
            headers["range"] = f"bytes={first}-{last}"
            headers["accept-encoding"] = "identity"  # sizes are of the bytes on disk
        return headers

    def get_all(self, asks: list[Ask]) -> Iterator[tuple[int, Answer]]:
        """``get`` of every ask at once: (ask's number, its answer) in the order answers come,
        a retried one after the others. The first ask that fails for good raises; the caller
        stops the others (``stop``).

        The plain client sends them all from this thread (plainhttp.py ``Pool.gather``), a retry
        going on in a thread of its own; httpx2 takes a thread per connection."""
        if self.pool is None:
            yield from _threaded(asks, self.connections, self._get_ask, self.stop)
            return
        ends: dict[int, float] = {}

        def clock(i: int) -> float:  # ask i's deadline, made the thread's (plainhttp reads it through ``left``)
            end = ends.get(i)
            if end is None:
                end = ends[i] = min(time.monotonic() + self.limits.request, self.deadline)
            _CLOCK.at, _CLOCK.stop = end, self.stop
            return end

        retried: list[tuple[Ask, _Retryable]] = []
        numbers: dict[int, int] = {}
        try:
            sent: list[tuple[str, str, dict[str, str]]] = [(a.method, a.url, self._headers(a.first, a.last))
                                                           for a in asks]
            for i, outcome in self.pool.gather(sent, MAX_REDIRECTS, clock, self.connections):
                a = asks[i]
                clock(i)
                try:
                    answer = self._plain_answer(outcome, a.method, a.where, a.first, a.last, a.limit)
                except _Retryable as e:
                    numbers[len(retried)] = i
                    retried.append((a, e))
                    continue
                yield i, answer
        finally:
            _CLOCK.at = math.inf
        if retried:
            for j, answer in _threaded([a for a, _ in retried], len(retried), self._get_ask, self.stop,
                                       [e for _, e in retried]):
                yield numbers[j], answer

    def _get_ask(self, a: Ask, failed: _Retryable | None) -> Answer:
        return self.get(a.url, a.where, method=a.method, first=a.first, last=a.last, limit=a.limit, failed=failed)

    def _pause(self, where: str, failure: str, wait: float, asked: float | None) -> None:
        """Wait before a retry, within the allowance; a server asking for longer ends the
        audit with one line saying when to come back."""
        with self._lock:
            allowed = min(self.limits.retry_wait - self._waited, self.deadline - time.monotonic())
            if asked is not None and wait > allowed:
                when = time.strftime("%H:%M:%S UTC", time.gmtime(time.time() + wait))
                what = "the server rate-limits requests (HTTP 429)" if failure.startswith("HTTP 429") else failure
                raise CheckpointError(where, f"{what} and asks to wait {wait:.0f} s: try again after {when} "
                                             f"(specguard waits {self.limits.retry_wait:g} s in all: "
                                             f"{ENV['retry_wait']})")
            if allowed <= 0:
                raise CheckpointError(where, f"{failure}; gave up after waiting {self._waited:.1f} s "
                                             f"({ENV['retry_wait']}={self.limits.retry_wait:g})")
            wait = min(wait, allowed)
            self._waited += wait
        if self.stop.wait(wait):
            raise CheckpointError(where, "stopped")  # another read failed first: its line is the one shown

    def _once(self, method: Literal["GET", "HEAD"], url: str, headers: dict[str, str], where: str,
              first: int | None, last: int | None, limit: int) -> Answer:
        _CLOCK.at, _CLOCK.stop = min(time.monotonic() + self.limits.request, self.deadline), self.stop
        try:
            if self.pool is not None:
                return self._once_plain(method, url, headers, where, first, last, limit)
            return self._once_httpx2(method, url, headers, where, first, last, limit)
        finally:
            _CLOCK.at = math.inf

    def _once_plain(self, method: Literal["GET", "HEAD"], url: str, headers: dict[str, str], where: str,
                    first: int | None, last: int | None, limit: int) -> Answer:
        """``_once`` over plainhttp: each failure named as ``_once_httpx2`` names it."""
        assert self.pool is not None
        return self._plain_answer(self.pool.stream(method, url, headers, MAX_REDIRECTS), method, where, first, last,
                                  limit)

    def _plain_answer(self, outcome: Any, method: Literal["GET", "HEAD"], where: str, first: int | None,
                      last: int | None, limit: int) -> Answer:
        """The Answer from a plainhttp answer (a Response, a context giving one, or the exception
        getting it raised), its body read within the limits; each failure named as httpx2's are."""
        from specguard.checkpoint import plainhttp

        try:
            if isinstance(outcome, Exception):
                raise outcome
            if isinstance(outcome, plainhttp.Response):
                return _answer_of(outcome, method, where, first, last, limit)
            with outcome as r:
                return _answer_of(r, method, where, first, last, limit)
        except plainhttp.Timeout as e:
            raise self._late(where) from e
        except plainhttp.Dropped as e:
            if self.stop.is_set():
                raise CheckpointError(where, "stopped") from e
            raise _Retryable(f"the server dropped the connection ({_short(e)})") from e
        except plainhttp.TooManyRedirects as e:
            raise CheckpointError(where, f"more than {MAX_REDIRECTS} redirects (a redirect loop)") from e
        except plainhttp.BadURL as e:
            raise CheckpointError(where, f"bad redirect or URL: {_short(e)}") from e
        except plainhttp.CannotConnect as e:  # refused, unknown host: the server is not there; not retried
            raise CheckpointError(where, f"cannot reach the server: {_short(e)}") from e

    def _once_httpx2(self, method: Literal["GET", "HEAD"], url: str, headers: dict[str, str], where: str,
                     first: int | None, last: int | None, limit: int) -> Answer:
        import httpx2

        assert self.client is not None
        try:
            with self.client.stream(method, url, headers=headers) as r:
                commit = next((h.headers["x-repo-commit"] for h in (*r.history, r) if "x-repo-commit" in h.headers),
                              None)
                hdrs = {k.lower(): v for k, v in r.headers.items()}
                if r.status_code in RETRY_STATUS:
                    raise _Retryable(f"HTTP {r.status_code} {r.reason_phrase}"[:60], _retry_after(r.status_code, hdrs))
                body = b""
                if r.status_code < 300 and method == "GET":
                    size = _body_size(r.status_code, hdrs, where, first, last, limit)
                    body = _read(r, size, where)
                return Answer(r.status_code, hdrs, body, commit, str(r.url))
        except httpx2.TimeoutException as e:
            raise self._late(where) from e
        except (httpx2.RemoteProtocolError, httpx2.ReadError, httpx2.WriteError) as e:
            if self.stop.is_set():
                raise CheckpointError(where, "stopped") from e
            raise _Retryable(f"the server dropped the connection ({_short(e)})") from e
        except httpx2.TooManyRedirects as e:
            raise CheckpointError(where, f"more than {MAX_REDIRECTS} redirects (a redirect loop)") from e
        except (httpx2.UnsupportedProtocol, httpx2.InvalidURL, httpx2.LocalProtocolError) as e:
            raise CheckpointError(where, f"bad redirect or URL: {_short(e)}") from e
        except httpx2.ConnectError as e:  # refused, unknown host: the server is not there; not retried
            raise CheckpointError(where, f"cannot reach the server: {_short(e)}") from e
        except httpx2.HTTPError as e:
            raise CheckpointError(where, f"HTTP failure: {_short(e)}") from e

    def _late(self, where: str) -> Exception:
        if self.stop.is_set():
            return CheckpointError(where, "stopped")
        if time.monotonic() >= self.deadline:
            return CheckpointError(where, f"the audit did not finish within {self.limits.audit:g} s "
                                          f"({ENV['audit']}): the server answers too slowly")
        return _Retryable(f"no complete answer within {self.limits.request:g} s ({ENV['request']})")


def _answer_of(r: plainhttp.Response, method: str, where: str, first: int | None, last: int | None,
               limit: int) -> Answer:
    if r.status in RETRY_STATUS:
        raise _Retryable(f"HTTP {r.status} {r.reason}"[:60], _retry_after(r.status, r.headers))
    body = b""
    if r.status < 300 and method == "GET":
        size = _body_size(r.status, r.headers, where, first, last, limit)
        body = _read(r, size, where)
    return Answer(r.status, r.headers, body, r.commit, r.url)


class Ask(NamedTuple):
    """One request of ``Session.get_all``: ``get``'s arguments."""

    url: str
    where: str
    method: Literal["GET", "HEAD"] = "GET"
    first: int | None = None
    last: int | None = None
    limit: int = 0


def _threaded(asks: list[Ask], threads: int, get: Callable[[Ask, _Retryable | None], Answer], stop: threading.Event,
              failed: list[_Retryable] | None = None) -> Iterator[tuple[int, Answer]]:
    """``get`` of each ask on up to ``threads`` threads (each ask's ``failed``, if given),
    (number, answer) as they come. The first error is raised once ``stop`` is set and
    every thread has ended (within POLL of it)."""
    import queue

    todo = list(range(len(asks)))[::-1]
    lock = threading.Lock()
    results: queue.SimpleQueue[tuple[int, Answer | BaseException]] = queue.SimpleQueue()

    def work() -> None:
        while True:
            with lock:
                if not todo:
                    return
                i = todo.pop()
            try:
                results.put((i, get(asks[i], failed[i] if failed else None)))
            except BaseException as e:  # handed to the caller's thread, raised there
                results.put((i, e))
                with lock:
                    todo.clear()  # what has not started never will

    workers = [threading.Thread(target=work, daemon=True, name="specguard-remote")
               for _ in range(min(threads, len(asks)))]
    for w in workers:
        w.start()
    left = len(asks)
    try:
        while left:
            i, outcome = results.get()
            if isinstance(outcome, BaseException):
                raise outcome
            left -= 1
            yield i, outcome
    except BaseException:  # one failed, or the caller gave up: the others stop within POLL
        stop.set()
        with lock:
            todo.clear()
        for w in workers:
            w.join()
        raise


class _Retryable(Exception):
    def __init__(self, what: str, wait: float | None = None) -> None:
        super().__init__(what)
        self.what = what
        self.wait = wait  # seconds the server asked for (Retry-After), None without


def _retry_after(status: int, headers: dict[str, str]) -> float | None:
    """Retry-After as seconds or an HTTP date; a 429 without it: the Hub's RateLimit reset.
    ``headers``: lower-case names."""
    value = headers.get("retry-after", "").strip()
    if value.isdigit():
        return float(value)
    if value:
        import email.utils

        try:
            return max(0.0, email.utils.parsedate_to_datetime(value).timestamp() - time.time())
        except (TypeError, ValueError):
            return None
    if status == 429:  # `RateLimit: "api";r=0;t=55` (huggingface_hub's parse_ratelimit_headers)
        for part in headers.get("ratelimit", "").split(";"):
            key, _, number = part.strip().partition("=")
            if key == "t" and number.isdigit():
                return float(number)
    return None


def _body_size(status: int, headers: dict[str, str], where: str, first: int | None, last: int | None,
               limit: int) -> int:
    """Bytes to read, decided from the headers before any body byte is read."""
    if headers.get("content-type", "").startswith("text/html"):
        raise CheckpointError(where, f"the server answered an HTML page (HTTP {status}), not the file: a login or "
                                     "proxy page? A token (HF_TOKEN) may be needed")
    length = headers.get("content-length")
    size = int(length) if length is not None and length.isdigit() else None
    if first is not None and last is not None:
        asked = last - first + 1
        if status == 200 and (first != 0 or size is None or size > asked):
            shown = "" if size is None else f" ({size:,} bytes)"
            raise CheckpointError(where, f"the server ignored the byte range and answered with the whole "
                                         f"file{shown}: refused, only bytes {first}-{last} were asked for")
        limit = min(limit, asked)
    if size is not None and size > limit:
        raise CheckpointError(where, f"the server announced {size:,} bytes where at most {limit:,} were asked for")
    return limit


def _read(r: httpx2.Response | plainhttp.Response, limit: int, where: str) -> bytes:
    chunks, n = [], 0
    for chunk in r.iter_bytes():
        n += len(chunk)
        if n > limit:
            raise CheckpointError(where, f"the server sent more than the {limit:,} bytes asked for")
        chunks.append(chunk)
    return b"".join(chunks)


def _short(e: BaseException) -> str:
    text = str(e).splitlines()[0] if str(e) else type(e).__name__
    return text if len(text) <= 120 else text[:117] + "..."


def refusal(answer: Answer, where: str, revision: str | None, token: bool) -> CheckpointError:
    """One line for an error answer: what the Hub says happened (its X-Error-Code, as
    huggingface_hub's hf_raise_for_status reads it), and what may help."""
    code = answer.headers.get("x-error-code", "")
    status = answer.status
    need = "a token (HF_TOKEN or `hf auth login`) may be needed" if not token else \
        "the token sent may not grant access"
    if code == "RepoNotFound" or status == 401:
        return CheckpointError(where, f"repository not found (HTTP {status}): it does not exist, or it is "
                                      f"private or gated and {need}")
    if code == "GatedRepo" or status == 403:
        return CheckpointError(where, f"gated repository (HTTP {status}): request access on its Hub page; {need}")
    if code == "RevisionNotFound":
        return CheckpointError(where, f"revision {revision or 'main'!r} not found (HTTP {status})")
    if 300 <= status < 400:
        return CheckpointError(where, f"bad redirect (HTTP {status} without a usable Location)")
    message = answer.headers.get("x-error-message", "")
    said = f": {message[:100]!r}" if message else ""
    return CheckpointError(where, f"HTTP {status}{said}")
