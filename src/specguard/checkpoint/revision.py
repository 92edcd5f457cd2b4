"""Which commit a revision of a Hub repo names: one HEAD of its index.

A replayed audit (commands/replay.py) needs this one answer and nothing else, and
importing huggingface_hub's request headers with httpx2 costs more CPU than the whole
rest of a replay (benchmarks/remote.py: "cached"). So the plain case asks over the
standard library's sockets, with the token huggingface_hub would send where that is
certain without it (HF_TOKEN, or a saved token that is no refreshable OAuth login).
Whatever the plain case cannot vouch for goes to the full client (remote.py ``lookup``:
retries, deadlines, one-line errors): a proxy or CA setting, OIDC, offline mode, a
macOS/Windows trust store, and any answer but a 2xx or an EntryNotFound 404 naming a
commit, or any network error. The answer is the server's either way.
"""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING
from urllib.parse import quote, urlsplit

from specguard.checkpoint import kept

if TYPE_CHECKING:
    import ssl
    from collections.abc import Callable

COMMIT = re.compile(r"^[0-9a-f]{40}$")
INDEX = "model.safetensors.index.json"  # index.py INDEX
# Settings the full client (httpx2, trust_env) honours and the plain case does not.
_FULL_CLIENT_ENV = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy",
                    "HF_OIDC_RESOURCE")

# (endpoint, repo, revision) -> (commit, has an index): a lookup resolve() made, which
# this process's open_remote uses instead of asking again.
RESOLVED: dict[tuple[str, str, str | None], tuple[str, bool]] = {}
# (endpoint, repo, revision) -> the commit this process read it at (open_remote).
READ: dict[tuple[str, str, str | None], str] = {}


def endpoint() -> str:
    """The Hub's URL: HF_ENDPOINT, else huggingface_hub's default."""
    from huggingface_hub import constants

    return (os.environ.get("HF_ENDPOINT") or constants.ENDPOINT).rstrip("/")


def read_at(repo_id: str, revision: str | None) -> tuple[str, str] | None:
    """(endpoint, commit) at which this process read ``revision`` of the repo, if it did."""
    where = endpoint()
    commit = READ.get((where, repo_id, revision))
    return None if commit is None else (where, commit)


def resolve(repo_id: str, revision: str | None,
            meanwhile: Callable[[], object] | None = None) -> tuple[str, str] | None:
    """(endpoint, commit) of ``revision`` for a repo audited here before (one HEAD; none
    for a commit hash), else None: a first audit learns its commit from the index it reads.
    The open_remote that follows in this process reuses the answer. ``meanwhile``: work
    that needs no answer, done while the server answers the HEAD (or after it)."""
    where = endpoint()
    if revision and COMMIT.match(revision):
        return where, revision
    if not kept.seen(where, repo_id):
        return None
    found = _plain_lookup(where, repo_id, revision, meanwhile)
    if found is None:
        from specguard.checkpoint.remote import lookup

        found = lookup(repo_id, revision)
    RESOLVED[(where, repo_id, revision)] = found
    return where, found[0]


def plain_fits(where: str) -> tuple[bool, str | None]:
    """(True, the token to send) where the standard library's sockets do what the full
    client (httpx2 with huggingface_hub's headers) would for ``where``; (False, None) where not:
    a proxy or CA setting, OIDC, offline mode, a macOS/Windows trust store, an odd endpoint."""
    import sys

    if sys.platform in ("darwin", "win32") or any(os.environ.get(v) for v in _FULL_CLIENT_ENV):
        return False, None
    from huggingface_hub import constants

    if constants.is_offline_mode():
        return False, None
    sent, token = plain_token()
    url = urlsplit(where)
    if not sent or url.scheme not in ("http", "https") or not url.hostname or url.query or url.fragment:
        return False, None
    return True, token


def _plain_lookup(where: str, repo_id: str, revision: str | None,
                  meanwhile: Callable[[], object] | None = None) -> tuple[str, bool] | None:
    """(commit, has an index) from one HEAD on a socket of its own; None: ask the full client."""
    fits, token = plain_fits(where)
    if not fits:
        return None
    from specguard.checkpoint.limits import Limits

    url = urlsplit(where)
    path = f"{url.path}/{repo_id}/resolve/{quote(revision or 'main', safe='')}/{INDEX}"
    headers = {"User-Agent": "specguard", "Accept-Encoding": "identity"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    answer = _head(url.scheme, url.netloc, path, headers, Limits.from_env().request, meanwhile)
    if answer is None:
        return None
    status, got = answer
    commit = got.get("x-repo-commit", "")
    if not COMMIT.match(commit):
        return None
    if 200 <= status < 300:
        return commit, True
    if status == 404 and got.get("x-error-code") == "EntryNotFound":
        return commit, False
    return None


_STATUS = re.compile(rb"HTTP/1\.[01] (\d{3})[^\r\n]*\r\n")
_HEAD_LIMIT = 1 << 16  # bytes of status line and headers; a longer answer goes to the full client


def _head(scheme: str, netloc: str, path: str, headers: dict[str, str], timeout: float,
          meanwhile: Callable[[], object] | None = None) -> tuple[int, dict[str, str]] | None:
    """(status, lower-case headers) of one ``HEAD``, or None for anything unexpected (the
    full client then asks, and says what went wrong). Hand-written, not http.client:
    importing that (its email parser) cost a replayed audit a quarter of its CPU
    (benchmarks/remote.py, "cached"). ``meanwhile`` runs once the request is sent."""
    import socket

    url = urlsplit(f"{scheme}://{netloc}")
    try:
        host, port = url.hostname, url.port or (443 if scheme == "https" else 80)
    except ValueError:
        return None
    if not host or "@" in netloc or any(c in v for v in (path, *headers.values()) for c in "\r\n"):
        return None
    request = "".join([f"HEAD {path} HTTP/1.1\r\nHost: {netloc}\r\n",
                       *(f"{k}: {v}\r\n" for k, v in headers.items()), "Connection: close\r\n\r\n"])
    got = b""
    try:
        sock = socket.create_connection((host, port), timeout=timeout)
        try:
            if scheme == "https":
                sock = ssl_context().wrap_socket(sock, server_hostname=host)
            sock.sendall(request.encode("latin-1"))
            if meanwhile is not None:  # while the server answers
                meanwhile()
            while b"\r\n\r\n" not in got:
                piece = sock.recv(_HEAD_LIMIT)
                if not piece or len(got) + len(piece) > _HEAD_LIMIT:
                    return None
                got += piece
        finally:
            sock.close()
    except (OSError, UnicodeError, ValueError):
        return None
    m = _STATUS.match(got)
    if m is None:
        return None
    lines = got[m.end() : got.index(b"\r\n\r\n")].decode("latin-1").split("\r\n")
    fields = {}
    for line in lines:
        name, colon, value = line.partition(":")
        if not colon or not name or name != name.strip():
            return None
        fields[name.lower()] = value.strip()
    return int(m[1]), fields


def ssl_context() -> ssl.SSLContext:
    """The certificates httpx2 trusts on Linux (httpcore2's ``default_ssl_context``):
    SSL_CERT_FILE, else SSL_CERT_DIR, else the system's."""
    import ssl

    if cafile := os.environ.get("SSL_CERT_FILE"):
        return ssl.create_default_context(cafile=cafile)
    if capath := os.environ.get("SSL_CERT_DIR"):
        return ssl.create_default_context(capath=capath)
    return ssl.create_default_context()


def plain_token() -> tuple[bool, str | None]:
    """(certain, token): the token huggingface_hub's build_hf_headers() would send, where
    that is certain without importing it (utils/_auth.py ``get_token``: OIDC, then
    HF_TOKEN or HUGGING_FACE_HUB_TOKEN, then the saved token, refreshed when it is an
    OAuth login near expiry); (False, None) where it is not."""
    from huggingface_hub import constants

    if os.environ.get("HF_OIDC_RESOURCE"):
        return False, None
    if constants.HF_HUB_DISABLE_IMPLICIT_TOKEN:
        return True, None
    env = _clean(os.environ.get("HF_TOKEN") or os.environ.get("HUGGING_FACE_HUB_TOKEN"))
    if env:
        return True, env
    try:
        with open(constants.HF_TOKEN_PATH) as f:
            saved = _clean(f.read())
    except FileNotFoundError:
        return True, None
    except (OSError, ValueError):
        return False, None
    if saved is None:
        return True, None
    try:
        with open(constants.HF_STORED_TOKENS_PATH) as f:
            refreshable = "refresh_token" in f.read()
    except FileNotFoundError:
        refreshable = False
    except (OSError, ValueError):
        return False, None
    return (False, None) if refreshable else (True, saved)


def _clean(token: str | None) -> str | None:
    """As huggingface_hub's ``_clean_token``."""
    if token is None:
        return None
    return token.replace("\r", "").replace("\n", "").strip() or None
