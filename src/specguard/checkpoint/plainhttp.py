"""HTTP/1.1 for ``--remote`` over the standard library's sockets, where that does
exactly what httpx2 would (revision.py ``plain_fits``: no proxy setting, a token
known without huggingface_hub's auth code, Linux's trust store).

Why not httpx2 there: importing it with huggingface_hub's request headers costs
more CPU than reading 40,000 tensors' headers, and an audit's whole run is
mostly that start (benchmarks/remote.py prints both clients' runs). Why not
http.client: its import (the email parser it reads headers with) cost ~45 ms, and
one thread per request (its blocking reads) cost more than the header parsing;
``_Conn`` frames answers as it does, and ``Pool.gather`` sends many requests from
one thread. The rules a hostile server meets stay in hubhttp.py, shared by both
clients; this module only moves bytes and names what went wrong:

- every socket wait ends at the calling thread's deadline or stop flag
  (``left``: seconds remaining, or it raises ``Timeout``), checked every ``poll``
  seconds, so a drip or a held-open answer ends on time;
- redirects are followed as httpx2 follows them (a 303 turns into a GET, the
  token is not sent to another host), at most ``max_redirects``;
- connections are kept alive and reused per host; one the server closed while
  idle is dropped before use, never retried on.
"""

from __future__ import annotations

import errno
import io
import os
import select
import selectors
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import TYPE_CHECKING, Any
from urllib.parse import urljoin, urlsplit

if TYPE_CHECKING:
    import ssl

Left = Callable[[], float]  # seconds left before the thread's deadline; raises Timeout past it (or on a stop)
_REDIRECT = frozenset({301, 302, 303, 307, 308})
_DRAIN = 1 << 16  # a redirect's body up to this is read to keep its connection; a longer one closes it


class Timeout(Exception):
    """The deadline passed, or the audit stopped."""


class Dropped(Exception):
    """The server closed or reset the connection, or sent what is not HTTP."""


class CannotConnect(Exception):
    """Refused, unknown host, TLS refused: nothing is listening as asked."""


class BadURL(Exception):
    """A URL (a redirect's Location) that is not http(s) to a host."""


class TooManyRedirects(Exception):
    pass


class _Raw(io.RawIOBase):
    """A socket's reads, each waiting at most until the deadline, in ``poll`` steps."""

    def __init__(self, sock: socket.socket, left: Left, poll: float) -> None:
        self.sock, self.left, self.poll = sock, left, poll

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        while True:
            self.sock.settimeout(min(self.left(), self.poll))
            try:
                return self.sock.recv_into(b)
            except TimeoutError:  # no byte yet: look at the deadline and the stop flag again
                continue


class _Sock:
    """A connection's socket, every wait within the deadline."""

    def __init__(self, sock: socket.socket, left: Left, poll: float) -> None:
        self.sock, self.left, self.poll = sock, left, poll

    def sendall(self, data: bytes) -> None:
        self.sock.settimeout(self.left())
        try:
            self.sock.sendall(data)
        except TimeoutError as e:
            raise Timeout("write") from e

    def makefile(self, mode: str) -> io.BufferedReader:
        return io.BufferedReader(_Raw(self.sock, self.left, self.poll))

    def close(self) -> None:
        self.sock.close()

    def stale(self) -> bool:
        """Readable while idle: the server closed it (or sent what nobody asked for)."""
        try:
            return bool(select.select([self.sock], [], [], 0)[0])
        except (OSError, ValueError):
            return True


class ProtocolError(Exception):
    """An answer that is not HTTP/1.x as RFC 9112 frames it (http.client's HTTPException)."""


_MAX_LINE = 65536  # http.client's _MAXLINE: a status or header line longer than this is refused
_MAX_HEADERS = 100  # http.client's _MAXHEADERS


class _Conn:
    """One HTTP/1.1 connection, kept alive between answers. The framing is http.client's
    (RFC 9112): a status line, header lines, then a body by Transfer-Encoding: chunked,
    else Content-Length, else up to the close; no body for HEAD, 1xx, 204 and 304. Not
    http.client itself: importing it (its email parser, which parses each answer's
    headers) cost ~45 ms of CPU, more than the whole reading of 64 shards' headers
    took over it (benchmarks/remote.py)."""

    def __init__(self, scheme: str, host: str, port: int | None, pool: Pool) -> None:
        self.scheme, self.host, self.pool = scheme, host, pool
        default = 443 if scheme == "https" else 80
        self.port = default if port is None else port
        self._host_header = host if self.port == default else f"{host}:{self.port}"
        if ":" in host:  # an IPv6 literal: bracketed in Host, as http.client writes it
            self._host_header = f"[{host}]" if self.port == default else f"[{host}]:{self.port}"
        self.sock: _Sock | None = None

    def connect(self) -> None:
        try:
            sock = socket.create_connection((self.host, self.port), self.pool.left())
        except TimeoutError as e:
            raise Timeout("connect") from e
        except OSError as e:
            raise CannotConnect(f"{self.host}:{self.port}: {e.strerror or e}") from e
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.scheme == "https":
            import ssl

            try:
                sock.settimeout(self.pool.left())
                sock = self.pool.ssl_context().wrap_socket(sock, server_hostname=self.host)
            except TimeoutError as e:
                sock.close()
                raise Timeout("TLS handshake") from e
            except (ssl.SSLError, OSError) as e:
                sock.close()
                raise CannotConnect(f"{self.host}:{self.port}: {e}") from e
        self.sock = _Sock(sock, self.pool.left, self.pool.poll)

    def request(self, method: str, path: str, headers: dict[str, str]) -> None:
        """Send the request line and headers (a Host and, unless given, ``Accept-Encoding:
        identity``, as http.client adds them)."""
        if self.sock is None:
            self.connect()
        assert self.sock is not None
        names = {k.lower() for k in headers}
        lines = [f"{method} {path} HTTP/1.1"]
        if "host" not in names:
            lines.append(f"Host: {self._host_header}")
        if "accept-encoding" not in names:
            lines.append("Accept-Encoding: identity")
        lines += [f"{k}: {v}" for k, v in headers.items()]
        text = "\r\n".join(lines) + "\r\n\r\n"
        if any(c in text[:-4].replace("\r\n", "") for c in "\r\n\0"):
            raise BadURL("a request line or header holds a line break")
        try:
            self.sock.sendall(text.encode("latin-1"))
        except UnicodeEncodeError as e:
            raise BadURL(f"not sendable in a request: {e}") from e
        self._method = method

    def getresponse(self) -> _Answer:
        assert self.sock is not None
        return _Answer(self.sock.makefile("rb"), self._method)

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None


class _Answer:
    """An answer's status, headers and framed body (what http.client's HTTPResponse gives)."""

    def __init__(self, fp: io.BufferedReader, method: str) -> None:
        self.fp = fp
        while True:  # 1xx answers (100 Continue) come before the real one: skipped, as http.client does
            version, self.status, self.reason = self._status_line()
            fields = self._fields()
            if self.status >= 200:
                break
        self.fields = fields
        self.headers = {k.lower(): v for k, v in fields}
        connection = self.headers.get("connection", "").lower()
        keep = (version == "HTTP/1.1" and "close" not in connection) or "keep-alive" in connection
        self.chunked = "chunked" in self.headers.get("transfer-encoding", "").lower()
        self.left: int | None = None  # body bytes not read yet (None: up to the close)
        if method == "HEAD" or self.status in (204, 304):
            self.left = 0
        elif not self.chunked:
            length = self.headers.get("content-length", "")
            self.left = int(length) if length.isdigit() else None
        self.will_close = not keep or (self.left is None and not self.chunked)
        self._chunk = 0  # bytes left in the current chunk
        self._done = self.left == 0

    def _line(self) -> bytes:
        line = self.fp.readline(_MAX_LINE + 1)
        if len(line) > _MAX_LINE:
            raise ProtocolError("line too long")
        return line

    def _status_line(self) -> tuple[str, int, str]:
        line = self._line()
        if not line:
            raise Dropped("the server closed the connection without an answer")
        parts = line.decode("iso-8859-1").rstrip("\r\n").split(None, 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/") or not (len(parts[1]) == 3 and parts[1].isdigit()):
            raise ProtocolError(f"bad status line {line[:40]!r}")
        status = int(parts[1])
        if status < 100:
            raise ProtocolError(f"bad status line {line[:40]!r}")
        return parts[0], status, parts[2] if len(parts) > 2 else ""

    def _fields(self) -> list[tuple[str, str]]:
        fields: list[tuple[str, str]] = []
        while True:
            line = self._line()
            if line in (b"\r\n", b"\n", b""):
                return fields
            if len(fields) >= _MAX_HEADERS:
                raise ProtocolError(f"got more than {_MAX_HEADERS} headers")
            text = line.decode("iso-8859-1").rstrip("\r\n")
            if text[:1] in (" ", "\t") and fields:  # an obsolete folded line continues the field before
                name, value = fields[-1]
                fields[-1] = (name, f"{value} {text.strip()}")
                continue
            name, colon, value = text.partition(":")
            if colon:
                fields.append((name, value.strip(" \t")))

    def getheaders(self) -> list[tuple[str, str]]:
        return self.fields

    def getheader(self, name: str, default: str = "") -> str:
        return self.headers.get(name.lower(), default)

    def isclosed(self) -> bool:
        return self._done

    def read(self, amt: int | None = None) -> bytes:
        """Up to ``amt`` bytes of the body (None: all of it; b"" at its end); Dropped where it ends early."""
        if amt is None:
            return b"".join(iter(lambda: self.read(1 << 16), b""))
        if self._done:
            return b""
        if self.chunked:
            return self._read_chunked(amt)
        n = amt if self.left is None else min(amt, self.left)
        data = self.fp.read1(n) if n else b""
        if self.left is not None:
            if not data:
                raise Dropped(f"the answer ended {self.left} bytes early")
            self.left -= len(data)
            self._done = self.left == 0
        elif not data:
            self._done = True
        return data

    def _read_chunked(self, amt: int) -> bytes:
        if self._chunk == 0:
            size = self._line().split(b";", 1)[0].strip()
            try:
                self._chunk = int(size, 16)
            except ValueError:
                raise ProtocolError(f"bad chunk size {size[:20]!r}") from None
            if self._chunk == 0:  # the last chunk: trailers up to an empty line
                self._fields()
                self._done = True
                return b""
        data = self.fp.read1(min(amt, self._chunk))
        if not data:
            raise Dropped("the answer ended inside a chunk")
        self._chunk -= len(data)
        if self._chunk == 0 and self._line() not in (b"\r\n", b"\n"):
            raise ProtocolError("a chunk not followed by CRLF")
        return data


class Response:
    """One answer: status, lower-case headers, the first X-Repo-Commit along its redirects,
    the URL it came from, and its body in pieces."""

    def __init__(self, r: _Answer, conn: _Conn, commit: str | None, url: str,
                 headers: dict[str, str]) -> None:
        self.status, self.reason = r.status, r.reason
        self.headers, self.commit, self.url = headers, commit, url
        self._r, self._conn = r, conn

    def iter_bytes(self) -> Iterator[bytes]:
        while True:
            with _as_dropped():
                piece = self._r.read(1 << 16)
            if not piece:
                return
            yield piece


def _where(url: str) -> tuple[str, str, int | None, str]:
    """(scheme, host, port, path with query) of an http(s) URL; BadURL otherwise."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise BadURL(f"unsupported URL {url[:80]!r}")
    try:
        port = parts.port
    except ValueError as e:
        raise BadURL(f"bad port in {url[:80]!r}") from e
    return parts.scheme, parts.hostname, port, (parts.path or "/") + (f"?{parts.query}" if parts.query else "")


class Pool:
    """Kept-alive connections per (scheme, host, port), for the threads of one audit."""

    def __init__(self, left: Left, poll: float, ssl_context: Callable[[], ssl.SSLContext]) -> None:
        self.left, self.poll = left, poll
        self._make_context = ssl_context
        self._context: ssl.SSLContext | None = None
        self._idle: dict[tuple[str, str, int | None], list[_Conn]] = {}
        self._lock = threading.Lock()
        self._closed = False

    def ssl_context(self) -> ssl.SSLContext:
        with self._lock:  # made once, on the first https connection (loading the trust store takes ~50 ms)
            if self._context is None:
                self._context = self._make_context()
            return self._context

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, {}
        for conns in idle.values():
            for c in conns:
                c.close()

    def _take(self, scheme: str, host: str, port: int | None) -> _Conn:
        return self._idle_one(scheme, host, port) or _Conn(scheme, host, port, self)

    def _idle_one(self, scheme: str, host: str, port: int | None) -> _Conn | None:
        """A kept-alive connection to the host the server has not closed, if there is one."""
        with self._lock:
            conns = self._idle.get((scheme, host, port), [])
            while conns:
                c = conns.pop()
                if isinstance(c.sock, _Sock) and not c.sock.stale():
                    return c
                c.close()
        return None

    def _give(self, conn: _Conn) -> None:
        with self._lock:
            if not self._closed:
                self._idle.setdefault((conn.scheme, conn.host, conn.port), []).append(conn)
                return
        conn.close()

    @contextmanager
    def stream(self, method: str, url: str, headers: dict[str, str], max_redirects: int) -> Iterator[Response]:
        """The answer to ``method url``, redirects followed; its connection goes back to the
        pool when its body was read to the end, else it is closed."""
        commit: str | None = None
        for _ in range(max_redirects + 1):
            conn, r, hdrs = self._ask(method, url, headers)
            commit = commit or hdrs.get("x-repo-commit")
            location = hdrs.get("location")
            if r.status not in _REDIRECT or not location:
                answer = Response(r, conn, commit, url, hdrs)
                try:
                    yield answer
                finally:
                    self._release(conn, r)
                return
            self._drain(conn, r)
            method, url, headers = _redirected(method, url, headers, r.status, location)
        raise TooManyRedirects(f"more than {max_redirects} redirects")

    def gather(self, asks: list[tuple[str, str, dict[str, str]]], max_redirects: int,
               clock: Callable[[int], float], at_once: int) -> Iterator[tuple[int, Response | Exception]]:
        """``stream`` for many requests from one thread: every request is sent at once (new
        connections opened without blocking: TCP, then TLS), and each answer is taken, in the
        order answers come, as its socket turns readable. Yields (ask's number, its answer or
        the exception ``stream`` would raise); the caller reads an answer's body before asking
        for the next (its connection then goes back to the pool, for the next ask). At most
        ``at_once`` are in flight. ``clock(i)``: makes ask i's deadline the thread's (what
        ``left`` reads) and returns it (monotonic); it is set when the ask is sent.

        64 threads, one per request, spent more CPU than the audit's header parsing: their
        wake-ups contend for the interpreter lock (benchmarks/remote.py)."""
        return _Gather(self, asks, max_redirects, clock).run(at_once)

    def _ask(self, method: str, url: str, headers: dict[str, str]) -> tuple[_Conn, _Answer,
                                                                            dict[str, str]]:
        scheme, host, port, path = _where(url)
        conn = self._take(scheme, host, port)
        try:
            with _as_dropped():
                conn.request(method, path, headers=headers)
                r = conn.getresponse()
        except (Timeout, CannotConnect, Dropped):
            conn.close()
            raise
        return conn, r, {k.lower(): v for k, v in r.getheaders()}

    def _drain(self, conn: _Conn, r: _Answer) -> None:
        length = r.getheader("content-length", "")
        if length.isdigit() and int(length) <= _DRAIN:
            with suppress(ProtocolError, Dropped, OSError):  # then _release closes it
                r.read()
        self._release(conn, r)

    def _release(self, conn: _Conn, r: _Answer) -> None:
        if r.isclosed() and not r.will_close:
            self._give(conn)
        else:
            conn.close()


class _Ask:
    """One request of a gather, as it goes: where to, on which connection, in which step."""

    def __init__(self, i: int, method: str, url: str, headers: dict[str, str]) -> None:
        self.i, self.method, self.url, self.headers = i, method, url, headers
        self.hops = 0  # redirects followed
        self.commit: str | None = None
        self.conn: _Conn | None = None
        self.sock: socket.socket | None = None  # registered with the selector: connecting or waiting
        self.where: tuple[str, str, int | None, str] = ("", "", None, "")
        self.addresses: list[tuple] = []  # left to try while connecting
        self.step = ""  # "connect", "tls" or "answer": what the registered socket waits for
        self.end = 0.0  # its deadline (monotonic)


class _Gather:
    """Pool.gather's state: the asks in flight on one selector."""

    def __init__(self, pool: Pool, asks: list[tuple[str, str, dict[str, str]]], max_redirects: int,
                 clock: Callable[[int], float]) -> None:
        self.pool, self.max_redirects, self.clock = pool, max_redirects, clock
        self.asks = [_Ask(i, *ask) for i, ask in enumerate(asks)]
        self.selector = selectors.DefaultSelector()
        self.resolved: dict[tuple[str, int], list[tuple]] = {}  # (host, port) -> getaddrinfo's answer
        self.done: list[tuple[int, Response | Exception]] = []

    def run(self, at_once: int) -> Iterator[tuple[int, Response | Exception]]:
        waiting = self.asks[::-1]  # not sent yet, the next last
        try:
            while waiting or self.done or self.selector.get_map():
                while waiting and len(self.selector.get_map()) + len(self.done) < at_once:
                    ask = waiting.pop()
                    ask.end = self.clock(ask.i)
                    self._start(ask)
                while self.done:
                    i, outcome = self.done.pop(0)
                    if not isinstance(outcome, Response):
                        yield i, outcome
                        continue
                    try:
                        yield i, outcome
                    except BaseException:  # the caller stopped reading: the connection is unusable
                        outcome._conn.close()
                        raise
                    self.pool._release(outcome._conn, outcome._r)  # kept when its body was read to the end
                if self.selector.get_map() and not (waiting and len(self.selector.get_map()) < at_once):
                    self._wait()
        finally:
            for key in list(self.selector.get_map().values()):
                self._close(key.data)
            self.selector.close()

    def _wait(self) -> None:
        """One select: each socket ready takes its next step; asks past their deadline fail."""
        first = min(key.data.end for key in self.selector.get_map().values())
        events = self.selector.select(max(0.0, min(first - time.monotonic(), self.pool.poll)))
        for key, _ in events:
            self._step(key.data)
        if events and time.monotonic() < first:
            return  # a stop is seen by the next read's ``left``, or within ``poll`` once all is quiet
        for key in list(self.selector.get_map().values()):
            self.clock(key.data.i)
            try:
                self.pool.left()  # the deadline passed or the audit stopped: Timeout
            except Timeout as e:
                self._fail(key.data, e)

    def _start(self, ask: _Ask) -> None:
        """Send ``ask`` on a kept-alive connection, or open one without blocking."""
        try:
            ask.where = scheme, host, port, _ = _where(ask.url)
            conn = self.pool._idle_one(scheme, host, port)
            if conn is not None:
                ask.conn = conn
                self._send(ask)
                return
            key = (host, port or (443 if scheme == "https" else 80))
            if key not in self.resolved:
                try:
                    self.resolved[key] = socket.getaddrinfo(*key, 0, socket.SOCK_STREAM)
                except OSError as e:
                    raise CannotConnect(f"{host}:{port}: {e.strerror or e}") from e
            ask.addresses = list(self.resolved[key])
            self._connect(ask)
        except (BadURL, CannotConnect) as e:
            self._fail(ask, e)

    def _connect(self, ask: _Ask) -> None:
        """The next address of the host, connecting without blocking (CannotConnect: none left)."""
        _, host, port, _ = ask.where
        err = 0
        while ask.addresses:
            family, kind, proto, _, address = ask.addresses.pop(0)
            sock = socket.socket(family, kind, proto)
            sock.setblocking(False)
            err = sock.connect_ex(address)
            if err in (0, errno.EINPROGRESS):
                self._register(ask, sock, selectors.EVENT_WRITE, "connect")
                return
            sock.close()
        raise CannotConnect(f"{host}:{port}: {os.strerror(err) if err else 'no address'}")

    def _step(self, ask: _Ask) -> None:
        sock = ask.sock
        assert sock is not None
        try:
            if ask.step == "connect":
                err = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                self._unregister(ask)
                if err:
                    sock.close()
                    if not ask.addresses:
                        raise CannotConnect(f"{ask.where[1]}:{ask.where[2]}: {os.strerror(err)}")
                    self._connect(ask)
                    return
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                if ask.where[0] == "https":
                    sock = self.pool.ssl_context().wrap_socket(sock, server_hostname=ask.where[1],
                                                                do_handshake_on_connect=False)
                    self._handshake(ask, sock)
                else:
                    self._attach(ask, sock)
            elif ask.step == "tls":
                self._unregister(ask)
                self._handshake(ask, sock)
            else:
                self._unregister(ask)
                self._answer(ask)
        except (BadURL, CannotConnect, Timeout, Dropped, TooManyRedirects) as e:
            self._fail(ask, e)

    def _handshake(self, ask: _Ask, sock: Any) -> None:
        import ssl

        try:
            sock.do_handshake()
        except ssl.SSLWantReadError:
            self._register(ask, sock, selectors.EVENT_READ, "tls")
        except ssl.SSLWantWriteError:
            self._register(ask, sock, selectors.EVENT_WRITE, "tls")
        except (ssl.SSLError, OSError) as e:
            sock.close()
            raise CannotConnect(f"{ask.where[1]}:{ask.where[2]}: {e}") from e
        else:
            self._attach(ask, sock)

    def _attach(self, ask: _Ask, sock: socket.socket) -> None:
        scheme, host, port, _ = ask.where
        conn = ask.conn = _Conn(scheme, host, port, self.pool)
        conn.sock = _Sock(sock, self.pool.left, self.pool.poll)
        self._send(ask)

    def _send(self, ask: _Ask) -> None:
        conn = ask.conn
        assert conn is not None and isinstance(conn.sock, _Sock)
        self.clock(ask.i)
        with _as_dropped():
            conn.request(ask.method, ask.where[3], headers=ask.headers)
        self._register(ask, conn.sock.sock, selectors.EVENT_READ, "answer")

    def _answer(self, ask: _Ask) -> None:
        """The answer's status and headers (read as they come, within the ask's deadline):
        a redirect is followed, anything else is done."""
        conn = ask.conn
        assert conn is not None
        self.clock(ask.i)
        with _as_dropped():
            r = conn.getresponse()
        hdrs = {k.lower(): v for k, v in r.getheaders()}
        ask.commit = ask.commit or hdrs.get("x-repo-commit")
        location = hdrs.get("location")
        if r.status not in _REDIRECT or not location:
            ask.conn = None
            self.done.append((ask.i, Response(r, conn, ask.commit, ask.url, hdrs)))
            return
        ask.conn = None
        self.pool._drain(conn, r)
        ask.hops += 1
        if ask.hops > self.max_redirects:
            raise TooManyRedirects(f"more than {self.max_redirects} redirects")
        ask.method, ask.url, ask.headers = _redirected(ask.method, ask.url, ask.headers, r.status, location)
        self._start(ask)

    def _register(self, ask: _Ask, sock: Any, events: int, step: str) -> None:
        ask.sock, ask.step = sock, step
        self.selector.register(sock, events, ask)

    def _unregister(self, ask: _Ask) -> None:
        if ask.sock is not None:
            self.selector.unregister(ask.sock)
            ask.sock = None

    def _close(self, ask: _Ask) -> None:
        sock = ask.sock
        self._unregister(ask)
        if ask.conn is not None:
            ask.conn.close()
            ask.conn = None
        elif sock is not None:
            sock.close()

    def _fail(self, ask: _Ask, e: Exception) -> None:
        self._close(ask)
        self.done.append((ask.i, e))


def _redirected(method: str, url: str, headers: dict[str, str], status: int,
                location: str) -> tuple[str, str, dict[str, str]]:
    """The request a redirect asks for, as httpx2 makes it: a 303 turns into a GET, the token
    is not sent to another host."""
    target = urljoin(url, location)
    if urlsplit(target)[:2] != urlsplit(url)[:2]:  # another host: the token stays home (as httpx2)
        headers = {k: v for k, v in headers.items() if k.lower() != "authorization"}
    if status == 303 and method != "HEAD":
        method = "GET"
    return method, target, headers


@contextmanager
def _as_dropped() -> Iterator[None]:
    """A framing error or a socket's OSError within, raised as Dropped (hubhttp retries it),
    named; Timeout and CannotConnect pass as they are."""
    try:
        yield
    except (ProtocolError, OSError) as e:
        raise Dropped(_what(e)) from e


def _what(e: BaseException) -> str:
    return str(e) or type(e).__name__
