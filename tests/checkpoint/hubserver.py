"""A real HTTP server speaking the slice of the Hugging Face Hub protocol that
huggingface_hub uses to resolve files and read byte ranges (HEAD/GET on
``/{repo}/resolve/{revision}/{file}``), serving checkpoint folders from disk.

It records every request so tests can check what was (not) downloaded, reads
only the bytes a range asks for (benchmark shards are large sparse files), can
add a delay to every answer (a network's round trip), and can be scripted to
give canned answers first (429 with Retry-After, 503, lying or truncated ranges,
HTML error pages). ``python -m tests.checkpoint.hubserver`` runs it standalone
(benchmarks/remote.py), with ``/_stats`` and ``/_reset`` for its counters.
"""

from __future__ import annotations

import argparse
import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import NamedTuple

COMMIT = "c" * 40
_PATH = re.compile(r"^/(?P<repo>[^/]+/[^/]+)/resolve/(?P<rev>[^/]+)/(?P<file>.+)$")
_RANGE = re.compile(r"bytes=(\d+)-(\d*)")


class Answer(NamedTuple):
    """A canned answer, given instead of the real one."""

    status: int
    headers: dict[str, str]
    body: bytes = b""


class Request(NamedTuple):
    method: str
    path: str
    range: str | None
    time: float  # time.monotonic() when it arrived
    authorization: str | None


class HubServer:
    def __init__(
        self, repos: dict[str, Path], *, honour_range: bool = True, delay: float = 0.0, commit: str = COMMIT,
        port: int = 0,
    ) -> None:
        self.repos = repos
        self.honour_range = honour_range
        self.delay = delay  # seconds added before every answer
        self.commit = commit
        self.script: dict[str, list[Answer]] = {}  # file name -> answers given first, in order
        self.requests: list[Request] = []
        self.bytes_sent = 0
        self._lock = threading.Lock()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), self._handler())
        self.httpd.daemon_threads = True
        self.endpoint = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> HubServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
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

            def _send(self, status: int, headers: dict[str, str], body: bytes, send_body: bool) -> None:
                self.send_response(status)
                headers = {"Content-Length": str(len(body)), **headers}
                for k, v in headers.items():
                    self.send_header(k, v)
                self.end_headers()
                if send_body:
                    with server._lock:  # counted before sending: a client that has the bytes sees them counted
                        server.bytes_sent += len(body)
                    self.wfile.write(body)

            def _answer(self, send_body: bool) -> None:
                if self.path in ("/_stats", "/_reset"):
                    return self._control()
                with server._lock:
                    server.requests.append(Request(
                        self.command, self.path, self.headers.get("range"), time.monotonic(),
                        self.headers.get("authorization"),
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
                if answer is not None:
                    return self._send(answer.status, answer.headers, answer.body, send_body)
                p = server.repos[m["repo"]] / m["file"]
                head = {"X-Repo-Commit": server.commit}
                if not p.is_file():
                    head.update({"X-Error-Code": "EntryNotFound", "X-Error-Message": "Entry not found"})
                    return self._send(404, head, b"", send_body)
                self._file(p, head, send_body)

            def _file(self, p: Path, head: dict[str, str], send_body: bool) -> None:
                st = p.stat()
                size = st.st_size
                head["ETag"] = f'"{st.st_mtime_ns:x}-{size:x}"'
                start, end, status = 0, size - 1, 200
                m = _RANGE.match(self.headers.get("range") or "")
                if m and server.honour_range:
                    start = int(m[1])
                    end = min(int(m[2]) if m[2] else size - 1, size - 1)
                    status = 206
                    head["Content-Range"] = f"bytes {start}-{end}/{size}"
                body = b""
                if send_body:
                    with open(p, "rb") as f:  # only the bytes asked for: shards may be huge sparse files
                        f.seek(start)
                        body = f.read(max(0, end - start + 1))
                else:
                    head["Content-Length"] = str(max(0, end - start + 1))
                self._send(status, head, body, send_body)

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
    server.httpd.serve_forever()


if __name__ == "__main__":
    main()
