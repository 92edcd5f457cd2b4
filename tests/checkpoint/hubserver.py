"""A real HTTP server speaking the slice of the Hugging Face Hub protocol that
huggingface_hub uses to resolve files and read byte ranges (HEAD/GET on
``/{repo}/resolve/{revision}/{file}``), serving checkpoint folders from disk.

It records every request so tests can check what was (not) downloaded, reads
only the bytes a range asks for (benchmark shards are large sparse files), can
add a delay to every answer (a network's round trip), and can be scripted to
give canned answers first: the hostile-server cases of docs/remote.md (429 with
any Retry-After, 5xx storms, lying or truncated ranges, a whole file for a range,
HTML and login pages, 401/403, redirect loops and bad redirects, dropped
connections, a slow drip, a Content-Length that lies while the connection stays
open). ``python -m tests.checkpoint.hubserver`` runs it standalone
(benchmarks/remote.py), with ``/_stats`` and ``/_reset`` for its counters.
"""

from __future__ import annotations

import argparse
import json
import re
import ssl
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import NamedTuple

COMMIT = "c" * 40
_PATH = re.compile(r"^/(?P<repo>[^/]+/[^/]+)/resolve/(?P<rev>[^/]+)/(?P<file>.+)$")
_RANGE = re.compile(r"bytes=(\d+)-(\d*)")
POLL = 0.01  # seconds between serve_forever's checks for shutdown() (its default: 0.5)


class Answer(NamedTuple):
    """A canned answer, given instead of the real one."""

    status: int
    headers: dict[str, str]
    body: bytes = b""
    whole: bytes | None = None  # serve these bytes as the file, honouring the range (a file that lies about its size)
    drip: float = 0.0  # seconds between the body's bytes: a slow drip
    hold: float = 0.0  # seconds the connection stays open after the body (with a Content-Length promising more)
    drop: bool = False  # close the connection instead of answering


class Request(NamedTuple):
    method: str
    path: str
    range: str | None
    time: float  # time.monotonic() when it arrived
    authorization: str | None
    user_agent: str | None = None


class _Server(ThreadingHTTPServer):
    # socketserver's default listen backlog is 5: a client opening 64 connections at once
    # overflows it, and each dropped SYN costs a 1 s retransmit (the Hub's front end takes them).
    request_queue_size = 256

    def handle_error(self, request: object, client_address: object) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):  # a client hanging up is what the faults provoke
            super().handle_error(request, client_address)  # type: ignore[arg-type]


class HubServer:
    def __init__(
        self, repos: dict[str, Path], *, honour_range: bool = True, delay: float = 0.0, commit: str = COMMIT,
        port: int = 0, tls: ssl.SSLContext | None = None,
    ) -> None:
        self.repos = repos
        self.honour_range = honour_range
        self.delay = delay  # seconds added before every answer
        self.commit = commit
        self.script: dict[str, list[Answer]] = {}  # file name -> answers given first, in order
        self.requests: list[Request] = []
        self.bytes_sent = 0
        self._lock = threading.Lock()
        self.closing = threading.Event()  # ends drips and holds when the server closes
        self.httpd = _Server(("127.0.0.1", port), self._handler())
        self.httpd.daemon_threads = True
        if tls is not None:  # HTTPS: each connection's handshake happens in its handler thread
            self.httpd.socket = tls.wrap_socket(self.httpd.socket, server_side=True, do_handshake_on_connect=False)
        self.endpoint = f"{'https' if tls else 'http'}://127.0.0.1:{self.httpd.server_address[1]}"
        # shutdown() waits for serve_forever's next poll: its default 0.5 s, paid by every test that
        # closes a server (~30 s of test_remote.py's wall time), is 0.01 s here
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(POLL,), daemon=True)

    def __enter__(self) -> HubServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.closing.set()
        self.httpd.shutdown()
        self.httpd.server_close()

    def reset(self) -> None:
        with self._lock:
            self.requests.clear()
            self.bytes_sent = 0

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as the Hub's front end

            def log_message(self, *args: object) -> None:  # keep test output clean
                pass

            def _send(self, status: int, headers: dict[str, str], body: bytes, send_body: bool,
                      answer: Answer | None = None) -> None:
                if answer is not None and answer.drop:
                    self.close_connection = True
                    return
                self.send_response(status)
                headers = {"Content-Length": str(len(body)), **headers}
                for k, v in headers.items():
                    self.send_header(k, v)
                self.end_headers()
                if not send_body:
                    return
                if answer is not None and answer.drip:
                    self.wfile.flush()
                    for i in range(len(body)):
                        if server.closing.wait(answer.drip):
                            break
                        self._write(body[i : i + 1])
                else:
                    for i in range(0, len(body), 1 << 20):  # in pieces: a client that hangs up stops the rest
                        self._write(body[i : i + (1 << 20)])
                if answer is not None and answer.hold:
                    self.wfile.flush()
                    server.closing.wait(answer.hold)
                    self.close_connection = True

            def _write(self, piece: bytes) -> None:
                with server._lock:  # counted before sending: a client that has the bytes sees them counted
                    server.bytes_sent += len(piece)
                self.wfile.write(piece)
                self.wfile.flush()

            def _answer(self, send_body: bool) -> None:
                if self.path in ("/_stats", "/_reset"):
                    return self._control()
                if self.path == "/login":  # where a single sign-on proxy sends a request without a session
                    page = b"<!DOCTYPE html><html><body><form>Sign in</form></body></html>"
                    return self._send(200, {"Content-Type": "text/html; charset=utf-8"}, page, send_body)
                with server._lock:
                    server.requests.append(Request(
                        self.command, self.path, self.headers.get("range"), time.monotonic(),
                        self.headers.get("authorization"), self.headers.get("user-agent"),
                    ))
                if server.delay:
                    time.sleep(server.delay)
                m = _PATH.match(self.path.split("?")[0])
                if not m or m["repo"] not in server.repos:
                    msg = "Repository not found"
                    return self._send(404, {"X-Error-Code": "RepoNotFound", "X-Error-Message": msg}, b"", send_body)
                with server._lock:
                    canned = server.script.get(m["file"])
                    answer = canned.pop(0) if canned else None
                head = {"X-Repo-Commit": server.commit}
                if answer is not None and answer.whole is not None:
                    return self._range(answer.whole, len(answer.whole), {**head, **answer.headers}, send_body)
                if answer is not None:
                    return self._send(answer.status, answer.headers, answer.body, send_body, answer)
                p = server.repos[m["repo"]] / m["file"]
                if not p.is_file():
                    head.update({"X-Error-Code": "EntryNotFound", "X-Error-Message": "Entry not found"})
                    return self._send(404, head, b"", send_body)
                self._file(p, head, send_body)

            def _file(self, p: Path, head: dict[str, str], send_body: bool) -> None:
                st = p.stat()
                head["ETag"] = f'"{st.st_mtime_ns:x}-{st.st_size:x}"'
                self._range(p, st.st_size, head, send_body)

            def _range(self, p: Path | bytes, size: int, head: dict[str, str], send_body: bool) -> None:
                start, end, status = 0, size - 1, 200
                m = _RANGE.match(self.headers.get("range") or "")
                if m and server.honour_range:
                    start = int(m[1])
                    end = min(int(m[2]) if m[2] else size - 1, size - 1)
                    status = 206
                    head["Content-Range"] = f"bytes {start}-{end}/{size}"
                n = max(0, end - start + 1)
                if isinstance(p, bytes) or not send_body:
                    body = p[start : end + 1] if isinstance(p, bytes) and send_body else b""
                    if not send_body:
                        head["Content-Length"] = str(n)
                    try:
                        return self._send(status, head, body, send_body)
                    except (BrokenPipeError, ConnectionResetError):  # the client hung up
                        self.close_connection = True
                        return
                self.send_response(status)
                for k, v in {"Content-Length": str(n), **head}.items():
                    self.send_header(k, v)
                self.end_headers()
                try:
                    with open(p, "rb") as f:  # only the bytes asked for, in pieces: shards may be huge sparse files
                        f.seek(start)
                        while n > 0 and not server.closing.is_set():
                            piece = f.read(min(n, 1 << 20))
                            self._write(piece)
                            n -= len(piece)
                except (BrokenPipeError, ConnectionResetError):  # the client hung up: it had what it wanted
                    self.close_connection = True

            def _control(self) -> None:
                if self.path == "/_reset":
                    server.reset()
                with server._lock:
                    stats = {"requests": len(server.requests), "bytes": server.bytes_sent}
                self._send(200, {"Content-Type": "application/json"}, json.dumps(stats).encode(), True)

            def do_HEAD(self) -> None:
                self._answer(send_body=False)

            def do_GET(self) -> None:
                self._answer(send_body=True)

        return Handler


def main() -> None:
    ap = argparse.ArgumentParser(description="serve checkpoint folders over the Hub's resolve protocol")
    ap.add_argument("repo", nargs="+", help="REPO_ID=FOLDER")
    ap.add_argument("--delay", type=float, default=0.0, help="seconds added to every answer")
    ap.add_argument("--port", type=int, default=0)
    args = ap.parse_args()
    repos = {r.split("=", 1)[0]: Path(r.split("=", 1)[1]) for r in args.repo}
    server = HubServer(repos, delay=args.delay, port=args.port)
    print(server.endpoint, flush=True)
    server.httpd.serve_forever()  # (ended by a signal: no shutdown() to wait for)


if __name__ == "__main__":
    main()
