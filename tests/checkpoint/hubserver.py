"""A real HTTP server speaking the slice of the Hugging Face Hub protocol that
huggingface_hub uses to resolve files and read byte ranges (HEAD/GET on
``/{repo}/resolve/{revision}/{file}``), serving checkpoint folders from disk.
It records every request so tests can check what was (not) downloaded.
"""

from __future__ import annotations

import hashlib
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

COMMIT = "c" * 40
_PATH = re.compile(r"^/(?P<repo>[^/]+/[^/]+)/resolve/(?P<rev>[^/]+)/(?P<file>.+)$")
_RANGE = re.compile(r"bytes=(\d+)-(\d*)")


class HubServer:
    def __init__(self, repos: dict[str, Path], *, honour_range: bool = True) -> None:
        self.repos = repos
        self.honour_range = honour_range
        self.requests: list[tuple[str, str, str | None]] = []  # (method, path, range)
        self.bytes_sent = 0
        handler = self._handler()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.endpoint = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> HubServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:  # keep test output clean
                pass

            def _file(self) -> Path | None:
                m = _PATH.match(self.path.split("?")[0])
                if not m or m["repo"] not in server.repos:
                    return None
                p = server.repos[m["repo"]] / m["file"]
                return p if p.is_file() else None

            def _answer(self, body: bool) -> None:
                server.requests.append((self.command, self.path, self.headers.get("range")))
                p = self._file()
                if p is None:
                    self.send_response(404)
                    self.send_header("X-Error-Code", "EntryNotFound")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                data = p.read_bytes()
                etag = hashlib.sha256(data).hexdigest()
                m = _RANGE.match(self.headers.get("range") or "")
                status, chunk = 200, data
                if m and server.honour_range:
                    start = int(m[1])
                    end = min(int(m[2]) if m[2] else len(data) - 1, len(data) - 1)
                    status, chunk = 206, data[start : end + 1]
                self.send_response(status)
                self.send_header("X-Repo-Commit", COMMIT)
                self.send_header("ETag", f'"{etag}"')
                self.send_header("Content-Length", str(len(chunk)))
                if status == 206:
                    self.send_header("Content-Range", f"bytes {start}-{start + len(chunk) - 1}/{len(data)}")
                self.end_headers()
                if body:
                    self.wfile.write(chunk)
                    server.bytes_sent += len(chunk)

            def do_HEAD(self) -> None:
                self._answer(body=False)

            def do_GET(self) -> None:
                self._answer(body=True)

        return Handler
