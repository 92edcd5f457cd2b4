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

The console script sends that HEAD first of all (plainhead.py ``send``: before the parser
and the command import), and the replay reads its answer here once the rest is done,
when it is the very request asked for here.
"""

from __future__ import annotations

import os
import re
from urllib.parse import quote, urlsplit

from specguard.checkpoint import kept, plainhead

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy knows the name)
if TYPE_CHECKING:
    import _socket
    import ssl
    from collections.abc import Callable

COMMIT = re.compile(r"^[0-9a-f]{40}$")
INDEX = plainhead.INDEX

# (endpoint, repo, revision) -> (commit, has an index): a lookup resolve() made, which
# this process's open_remote uses instead of asking again.
RESOLVED: dict[tuple[str, str, str | None], tuple[str, bool]] = {}
# (endpoint, repo, revision) -> the commit this process read it at (open_remote).
READ: dict[tuple[str, str, str | None], str] = {}
# (endpoint, repo, revision) -> what a plain_only resolve found (None: no answer, the full
# client's to ask), for the command's own resolve that follows it in the process.
_AHEAD: dict[tuple[str, str, str | None], tuple[str, bool] | None] = {}


def endpoint() -> str:
    """The Hub's URL: HF_ENDPOINT, else huggingface_hub's default."""
    from huggingface_hub import constants

    return (os.environ.get("HF_ENDPOINT") or constants.ENDPOINT).rstrip("/")


def read_at(repo_id: str, revision: str | None) -> tuple[str, str] | None:
    """(endpoint, commit) at which this process read ``revision`` of the repo, if it did."""
    where = endpoint()
    commit = READ.get((where, repo_id, revision))
    return None if commit is None else (where, commit)


def resolve(repo_id: str, revision: str | None, meanwhile: Callable[[], object] | None = None,
            plain_only: bool = False) -> tuple[str, str] | None:
    """(endpoint, commit) of ``revision`` for a repo audited here before (one HEAD; none
    for a commit hash), else None: a first audit learns its commit from the index it reads.
    The open_remote that follows in this process reuses the answer. ``meanwhile``: work
    that needs no answer, done while the server answers the HEAD (or after it).
    ``plain_only`` (commands/replay.py ``start``, before the command): None where the plain
    lookup has no answer; the next call (the command's) takes this one's answer, or asks
    the full client at once, without a second plain HEAD."""
    where = endpoint()
    key = (where, repo_id, revision)
    if revision and COMMIT.match(revision):
        return where, revision
    if key in _AHEAD:  # the console script asked before the command (plain_only): once, for this command
        found = _AHEAD.pop(key)
    elif key not in plainhead.SENT and not kept.seen(where, repo_id):
        return None
    else:
        found = _plain_lookup(where, repo_id, revision, meanwhile)
    if found is None:
        if plain_only:
            _AHEAD[key] = None
            return None
        from specguard.checkpoint.remote import lookup

        found = lookup(repo_id, revision)
    if plain_only:
        _AHEAD[key] = found
    RESOLVED[key] = found
    return where, found[0]


def plain_fits(where: str) -> tuple[bool, str | None]:
    """(True, the token to send) where the standard library's sockets do what the full
    client (httpx2 with huggingface_hub's headers) would for ``where``; (False, None) where not:
    a proxy or CA setting, OIDC, offline mode, a macOS/Windows trust store, an odd endpoint."""
    if not plainhead.plain_env():
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
    """(commit, has an index) from one HEAD on a socket of its own (plainhead.py ``send``'s,
    where it sent this very request); None: ask the full client."""
    request = _plain_request(where, repo_id, revision)
    sent, sock = plainhead.SENT.pop((where, repo_id, revision), (None, None))
    if sent is not None and sent != request:  # not the request asked for here: its answer is not this one's
        if sock is not None:
            sock.close()
        sent = None
    if sent is None:
        sock = None if request is None else _send(*request)
    answer = None if sock is None else _receive(sock, meanwhile)
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


def _plain_request(where: str, repo_id: str,
                   revision: str | None) -> tuple[str, str, str, dict[str, str], float] | None:
    """(scheme, netloc, path, headers, timeout) of the HEAD; None: a case for the full client."""
    fits, token = plain_fits(where)
    if not fits:
        return None
    timeout = plainhead.request_timeout()  # without limits.py's NamedTuple (typing: ~3 ms of a replay)
    if timeout is None:  # not a number of seconds: Limits says so
        from specguard.checkpoint.limits import Limits

        timeout = Limits.from_env().request
    url = urlsplit(where)
    path = f"{url.path}/{repo_id}/resolve/{quote(revision or 'main', safe='')}/{INDEX}"
    return url.scheme, url.netloc, path, plainhead.headers(token), timeout


_STATUS = re.compile(rb"HTTP/1\.[01] (\d{3})[^\r\n]*\r\n")
_HEAD_LIMIT = 1 << 16  # bytes of status line and headers; a longer answer goes to the full client


def _send(scheme: str, netloc: str, path: str, headers: dict[str, str],
          timeout: float) -> _socket.socket | None:
    """A socket with one ``HEAD`` sent on it, or None for anything unexpected (the full
    client then asks, and says what went wrong). Hand-written, not http.client:
    importing that (its email parser) cost a replayed audit a quarter of its CPU
    (benchmarks/remote.py, "cached")."""
    url = urlsplit(f"{scheme}://{netloc}")
    try:
        host, port = url.hostname, url.port or (443 if scheme == "https" else 80)
        head = plainhead.head_bytes(netloc, path, headers)
        if not host or head is None:
            return None
        return plainhead.connect(scheme, host, port, head, timeout)
    except (OSError, UnicodeError, ValueError):
        return None


def _receive(sock: _socket.socket,
             meanwhile: Callable[[], object] | None = None) -> tuple[int, dict[str, str]] | None:
    """(status, lower-case headers) of the ``HEAD`` sent on ``sock`` (closed after), or None
    for anything unexpected. ``meanwhile`` runs first: while the server answers."""
    got = b""
    try:
        try:
            if meanwhile is not None:
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
    that is certain without importing it (plainhead.py ``plain_token``), by huggingface_hub's
    own settings."""
    from huggingface_hub import constants

    return plainhead.plain_token(constants.HF_HUB_DISABLE_IMPLICIT_TOKEN, constants.HF_TOKEN_PATH,
                                 constants.HF_STORED_TOKENS_PATH)
