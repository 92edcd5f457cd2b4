"""plainhttp frames answers as the standard library's http.client does (the ground truth
here: each raw answer is read by both over a real socket), and Pool.gather gives what
Pool.stream gives, for many requests from one thread."""

from __future__ import annotations

import http.client
import math
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from specguard.checkpoint import plainhttp

# (case, raw answer): every framing an HTTP/1.1 server may use.
ANSWERS = {
    "content-length": b"HTTP/1.1 206 Partial Content\r\nContent-Range: bytes 0-4/99\r\nContent-Length: 5\r\n\r\nhello",
    "chunked, with an extension and trailers": (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-Repo-Commit: abc\r\n\r\n"
        b"5;ext=1\r\nhello\r\n7\r\n, world\r\n0\r\nX-Trailer: t\r\n\r\n"),
    "up to the close (HTTP/1.0, no length)": b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nuntil the end",
    "100 Continue first": b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
    "no reason phrase, repeated header": b"HTTP/1.1 404\r\nX-A: 1\r\nx-a: 2\r\nContent-Length: 0\r\n\r\n",
    "folded header line": b"HTTP/1.1 200 OK\r\nX-Long: first\r\n  second\r\nContent-Length: 1\r\n\r\nx",
    "204 with no body": b"HTTP/1.1 204 No Content\r\n\r\n",
}


class _Stats:
    def __init__(self) -> None:
        self.requests: list[bytes] = []
        self.in_flight = 0  # requests read, not answered yet
        self.most_in_flight = 0


@contextmanager
def _server(answers: list[bytes], *, delay: float = 0.0, hold: int = 0) -> Iterator[tuple[int, _Stats]]:
    """A socket server giving ``answers`` in turn, one per request (each connection kept open
    for the next), after ``delay`` seconds, and not before ``hold`` requests are in flight
    together (or 10 s passed: then the answer is a 500); yields its port and what it saw."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    stats = _Stats()
    seen = threading.Condition()
    turn = iter(answers)

    def serve(conn: socket.socket) -> None:
        with conn:
            got = b""
            while True:
                while b"\r\n\r\n" not in got:
                    piece = conn.recv(65536)
                    if not piece:
                        return
                    got += piece
                request, got = got.split(b"\r\n\r\n", 1)
                with seen:
                    stats.requests.append(request)
                    stats.in_flight += 1
                    stats.most_in_flight = max(stats.most_in_flight, stats.in_flight)
                    answer = next(turn, None)
                    seen.notify_all()
                    held = seen.wait_for(lambda: stats.most_in_flight >= hold, timeout=10)
                if not answer:  # none left, or an empty one: the connection closes unanswered
                    return
                time.sleep(delay)
                with seen:
                    stats.in_flight -= 1
                conn.sendall(answer if held else b"HTTP/1.1 500 Not all at once\r\nContent-Length: 0\r\n\r\n")
                if b"HTTP/1.0" in answer.split(b"\r\n", 1)[0]:
                    return  # its body ends at the close

    def accept() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield port, stats
    finally:
        listener.close()


def _pool() -> plainhttp.Pool:
    end = time.monotonic() + 10

    def left() -> float:
        if time.monotonic() > end:
            raise plainhttp.Timeout("deadline")
        return end - time.monotonic()

    return plainhttp.Pool(left, 0.25, lambda: pytest.fail("no TLS here"))


def _by_http_client(port: int, method: str = "GET") -> tuple[int, str, list[tuple[str, str]], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port)
    conn.request(method, "/x")
    r = conn.getresponse()
    body = r.read()
    conn.close()
    return r.status, r.reason, [(k, " ".join(v.split())) for k, v in r.getheaders()], body


@pytest.mark.parametrize("case", list(ANSWERS))
def test_answers_framed_as_http_client_frames_them(case):
    raw = ANSWERS[case]
    with _server([raw]) as (port, _):
        expected = _by_http_client(port)
    with _server([raw]) as (port, _), _pool().stream("GET", f"http://127.0.0.1:{port}/x", {}, 10) as r:
        body = b"".join(r.iter_bytes())
        fields = [(k, " ".join(v.split())) for k, v in r._r.getheaders()]
    assert (r.status, r.reason, fields, body) == expected


def test_head_answer_has_no_body_and_the_connection_is_kept():
    head = b"HTTP/1.1 200 OK\r\nContent-Length: 12345\r\nX-Repo-Commit: abc\r\n\r\n"
    get = ANSWERS["content-length"]
    pool = _pool()
    with _server([head, get]) as (port, stats):
        requests = stats.requests
        with pool.stream("HEAD", f"http://127.0.0.1:{port}/a", {}, 10) as r:
            assert r.status == 200 and r.commit == "abc" and b"".join(r.iter_bytes()) == b""
        with pool.stream("GET", f"http://127.0.0.1:{port}/b", {"X-Token": "t"}, 10) as r:
            assert b"".join(r.iter_bytes()) == b"hello"
    assert [q.split(b"\r\n")[0] for q in requests] == [b"HEAD /a HTTP/1.1", b"GET /b HTTP/1.1"]
    assert f"Host: 127.0.0.1:{port}".encode() in requests[1] and b"X-Token: t" in requests[1]
    assert b"Accept-Encoding: identity" in requests[1]  # http.client's default, kept


# HTTP/1.0: the test server closes the connection after these answers.
@pytest.mark.parametrize("raw", [b"HTTP/1.0 200 OK\r\nContent-Length: 10\r\n\r\nshort",
                                 b"HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nA\r\nshort"])
def test_an_answer_cut_short_is_dropped(raw):
    with (_server([raw]) as (port, _), pytest.raises(plainhttp.Dropped),
          _pool().stream("GET", f"http://127.0.0.1:{port}/x", {}, 10) as r):
        b"".join(r.iter_bytes())


@pytest.mark.parametrize("raw", [b"SSH-2.0-OpenSSH_9.6\r\n\r\n", b"HTTP/1.1 20 OK\r\n\r\n", b""])
def test_not_http_is_dropped(raw):
    with (_server([raw]) as (port, _), pytest.raises(plainhttp.Dropped),
          _pool().stream("GET", f"http://127.0.0.1:{port}/x", {}, 10)):
        pass


def test_gather_gives_what_stream_gives_from_one_thread():
    """Twelve asks to a server that answers none before all twelve are in flight together
    (one thread sending each after the last answer would get 500s), a redirect followed,
    answers as stream reads them."""
    n = 12
    answers = [b"HTTP/1.1 302 Found\r\nLocation: /moved\r\nX-Repo-Commit: c1\r\nContent-Length: 0\r\n\r\n"]
    answers += [f"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\n{i:04d}".encode() for i in range(n)]
    pool = _pool()
    with _server(answers, hold=n) as (port, stats):
        got = {}
        for i, r in pool.gather([("GET", f"http://127.0.0.1:{port}/{i}", {}) for i in range(n)], 10,
                                lambda i: math.inf, 64):
            assert isinstance(r, plainhttp.Response), r
            got[i] = (r.status, r.commit, r.url.rsplit("/", 1)[1], b"".join(r.iter_bytes()))
    assert sorted(got) == list(range(n)) and {v[0] for v in got.values()} == {200}
    redirected = [v for v in got.values() if v[2] == "moved"]
    assert len(redirected) == 1 and redirected[0][1] == "c1"  # the first commit named along the redirects
    assert sorted(v[3] for v in got.values()) == [f"{i:04d}".encode() for i in range(n)]
    assert len(stats.requests) == n + 1


def test_gather_names_a_refused_connection_per_ask():
    with socket.create_server(("127.0.0.1", 0)) as s:
        port = s.getsockname()[1]
    outcomes = list(_pool().gather([("GET", f"http://127.0.0.1:{port}/x", {})], 10, lambda i: math.inf, 64))
    assert len(outcomes) == 1 and isinstance(outcomes[0][1], plainhttp.CannotConnect)


def test_gather_keeps_at_most_at_once_in_flight_and_reuses_connections():
    """Ten asks, three at once: every ask answered, never more than three in flight, on at
    most three connections (a kept-alive one takes the next ask as its answer completes)."""
    n, at_once = 10, 3
    answers = [f"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\n{i:04d}".encode() for i in range(n)]
    pool = _pool()
    with _server(answers, delay=0.05) as (port, stats):
        got = [b"".join(r.iter_bytes()) for _, r in pool.gather(
            [("GET", f"http://127.0.0.1:{port}/{i}", {}) for i in range(n)], 10, lambda i: math.inf, at_once)]
        connections = len(pool._idle[("http", "127.0.0.1", port)])
    assert sorted(got) == [f"{i:04d}".encode() for i in range(n)] and len(stats.requests) == n
    assert stats.most_in_flight <= at_once
    assert connections <= at_once  # each kept alive for the next ask, none opened beyond the cap
