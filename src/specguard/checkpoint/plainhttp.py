"""HTTP/1.1 for ``--remote`` over the standard library's http.client, where it does
exactly what httpx2 would (revision.py ``plain_fits``: no proxy setting, a token
known without huggingface_hub's auth code, Linux's trust store).

Why not httpx2 there: importing it with huggingface_hub's request headers costs
more CPU than reading 40,000 tensors' headers, and an audit's whole run is
mostly that start (benchmarks/remote.py prints both clients' runs). The rules a
hostile server meets stay in hubhttp.py, shared by both clients; this module only
moves bytes and names what went wrong:

- every socket wait ends at the calling thread's deadline or stop flag
  (``left``: seconds remaining, or it raises ``Timeout``), checked every ``poll``
  seconds, so a drip or a held-open answer ends on time;
- redirects are followed as httpx2 follows them (a 303 turns into a GET, the
  token is not sent to another host), at most ``max_redirects``;
- connections are kept alive and reused per host; one the server closed while
  idle is dropped before use, never retried on.
"""

from __future__ import annotations

import http.client
import io
import select
import socket
import threading
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
    """What http.client asks of its socket, within the deadline."""

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


class _Conn(http.client.HTTPConnection):
    def __init__(self, scheme: str, host: str, port: int | None, pool: Pool) -> None:
        self.default_port = 443 if scheme == "https" else 80  # read by http.client for the port and Host
        super().__init__(host, port)
        self.scheme, self.pool = scheme, pool

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


class Response:
    """One answer: status, lower-case headers, the first X-Repo-Commit along its redirects,
    the URL it came from, and its body in pieces."""

    def __init__(self, r: http.client.HTTPResponse, conn: _Conn, commit: str | None, url: str,
                 headers: dict[str, str]) -> None:
        self.status, self.reason = r.status, r.reason
        self.headers, self.commit, self.url = headers, commit, url
        self._r, self._conn = r, conn

    def iter_bytes(self) -> Iterator[bytes]:
        while True:
            try:
                piece = self._r.read(1 << 16)
            except (http.client.HTTPException, OSError) as e:
                raise Dropped(_what(e)) from e
            if not piece:
                return
            yield piece


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
        with self._lock:
            conns = self._idle.get((scheme, host, port), [])
            while conns:
                c = conns.pop()
                if isinstance(c.sock, _Sock) and not c.sock.stale():
                    return c
                c.close()
        return _Conn(scheme, host, port, self)

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
            target = urljoin(url, location)
            if urlsplit(target)[:2] != urlsplit(url)[:2]:  # another host: the token stays home (as httpx2)
                headers = {k: v for k, v in headers.items() if k.lower() != "authorization"}
            if r.status == 303 and method != "HEAD":
                method = "GET"
            url = target
        raise TooManyRedirects(f"more than {max_redirects} redirects")

    def _ask(self, method: str, url: str, headers: dict[str, str]) -> tuple[_Conn, http.client.HTTPResponse,
                                                                            dict[str, str]]:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise BadURL(f"unsupported URL {url[:80]!r}")
        try:
            port = parts.port
        except ValueError as e:
            raise BadURL(f"bad port in {url[:80]!r}") from e
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        conn = self._take(parts.scheme, parts.hostname, port)
        try:
            conn.request(method, path, headers=headers)
            r = conn.getresponse()
        except (Timeout, CannotConnect):
            conn.close()
            raise
        except (http.client.HTTPException, OSError) as e:
            conn.close()
            raise Dropped(_what(e)) from e
        return conn, r, {k.lower(): v for k, v in r.getheaders()}

    def _drain(self, conn: _Conn, r: http.client.HTTPResponse) -> None:
        length = r.getheader("content-length", "")
        if length.isdigit() and int(length) <= _DRAIN:
            with suppress(http.client.HTTPException, OSError):  # then _release closes it
                r.read()
        self._release(conn, r)

    def _release(self, conn: _Conn, r: http.client.HTTPResponse) -> None:
        if r.isclosed() and not r.will_close:
            self._give(conn)
        else:
            conn.close()


def _what(e: BaseException) -> str:
    return str(e) or type(e).__name__
