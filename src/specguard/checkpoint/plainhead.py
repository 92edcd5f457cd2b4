"""A replayed audit's one HEAD (revision.py), sent before anything else imports.

The console script calls ``send`` first of all (__main__.py, commands/replay.py
``start``); the server answers while the parser and the command import and the
replay works out what it replays, and revision.py reads that answer. A replay is
that one request and little else, so every millisecond before it leaves counts
twice: this module and what it imports (kept.py, errors.py) load no more than
C modules -- no typing, re, urllib.parse, pathlib, socket.py or huggingface_hub
(together ~15-25 ms before the request could leave; benchmarks/remote.py "cached").

So it does only what it is sure of and leaves the rest to revision.py: it reads
huggingface_hub's settings from the environment as its constants.py does on import
(tests/checkpoint/test_replay_head.py checks each against the library), parses only plain
endpoints and revisions, and sends nothing where in doubt. revision.py then asks
for the same request through huggingface_hub and urlsplit, and uses the answer only
if it is exactly the request sent here; otherwise it asks again itself.
"""

from __future__ import annotations

import os
import sys

from specguard.checkpoint import kept
from specguard.errors import SpecguardError

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy knows the name)
if TYPE_CHECKING:
    import _socket

    Request = tuple[str, str, str, dict[str, str], float]  # scheme, netloc, path, headers, timeout

INDEX = "model.safetensors.index.json"  # index.py INDEX
DEFAULT_ENDPOINT = "https://huggingface.co"  # huggingface_hub constants._HF_DEFAULT_ENDPOINT
REQUEST_TIMEOUT = 30.0  # limits.py REQUEST_TIMEOUT
# limits.py ENV's variables, the request's first: each checked as Limits.from_env checks it.
LIMITS_ENV = ("SPECGUARD_REMOTE_TIMEOUT", "SPECGUARD_REMOTE_DEADLINE", "SPECGUARD_REMOTE_RETRY_WAIT")
# Settings the full client (httpx2, trust_env) honours and the plain case does not.
FULL_CLIENT_ENV = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy",
                   "HF_OIDC_RESOURCE")
_TRUE = {"1", "ON", "YES", "TRUE"}  # huggingface_hub constants.ENV_VARS_TRUE_VALUES
_HEX = frozenset("0123456789abcdef")
_PLAIN = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-~")  # quote() keeps them

# (endpoint, repo, revision) -> (the request sent, its socket; None: sending failed).
SENT: dict[tuple[str, str, str | None], tuple[Request, _socket.socket | None]] = {}


def send(repo_id: str, revision: str | None) -> None:
    """Send the HEAD revision.py's ``resolve`` will ask for, where it surely will over a
    plain socket: a repo audited here before, at a revision that is no commit hash, with
    plain settings. Never raises: what it cannot do, revision.py does."""
    try:
        hub = hub_settings()
        if hub is None or (revision and is_commit(revision)) or not kept.seen(hub[0], repo_id):
            return
        request = _request(hub, repo_id, revision)
        head = None if request is None else head_bytes(*request[1:4])
        if request is None or head is None:
            return
    except (OSError, ValueError, SpecguardError):  # nothing sent: the command says what is wrong
        return
    scheme, netloc = request[:2]
    host, _, port = netloc.partition(":")
    try:
        sock = connect(scheme, host, int(port or (443 if scheme == "https" else 80)), head, request[4])
    except (OSError, ValueError):  # no name, no route, no handshake
        sock = None
    SENT[(hub[0], repo_id, revision)] = (request, sock)  # None: revision.py goes to the full client at once


def is_commit(text: str) -> bool:
    return len(text) == 40 and _HEX.issuperset(text)


def _true(value: str | None) -> bool:
    return value is not None and value.upper() in _TRUE  # constants._is_true


def hub_settings() -> tuple[str, bool, str, str] | None:
    """(endpoint, implicit token disabled, token path, stored tokens path) as huggingface_hub's
    constants.py computes them from the environment; None in staging or offline mode."""
    env = os.environ
    if _true(env.get("HUGGINGFACE_CO_STAGING")) or _true(env.get("HF_HUB_OFFLINE") or env.get("TRANSFORMERS_OFFLINE")):
        return None
    endpoint = env.get("HF_ENDPOINT", DEFAULT_ENDPOINT).rstrip("/")
    home = _expand(env.get("HF_HOME", os.path.join(env.get("XDG_CACHE_HOME", _expand("~/.cache")), "huggingface")))
    token_path = _expand(env.get("HF_TOKEN_PATH", os.path.join(home, "token")))
    stored = os.path.join(os.path.dirname(token_path), "stored_tokens")
    return endpoint, _true(env.get("HF_HUB_DISABLE_IMPLICIT_TOKEN")), token_path, stored


def _expand(path: str) -> str:
    return os.path.expandvars(os.path.expanduser(path))


def plain_env() -> bool:
    """No setting only the full client honours (a proxy, OIDC), no macOS/Windows trust store."""
    return sys.platform not in ("darwin", "win32") and not any(os.environ.get(v) for v in FULL_CLIENT_ENV)


def plain_token(implicit_disabled: bool, token_path: str, stored_path: str) -> tuple[bool, str | None]:
    """(certain, token): the token huggingface_hub's build_hf_headers() would send, where
    that is certain without importing it (utils/_auth.py ``get_token``: OIDC, then
    HF_TOKEN or HUGGING_FACE_HUB_TOKEN, then the saved token, refreshed when it is an
    OAuth login near expiry); (False, None) where it is not."""
    if os.environ.get("HF_OIDC_RESOURCE"):
        return False, None
    if implicit_disabled:
        return True, None
    env = _clean(os.environ.get("HF_TOKEN") or os.environ.get("HUGGING_FACE_HUB_TOKEN"))
    if env:
        return True, env
    try:
        with open(token_path) as f:
            saved = _clean(f.read())
    except FileNotFoundError:
        return True, None
    except (OSError, ValueError):
        return False, None
    if saved is None:
        return True, None
    try:
        with open(stored_path) as f:
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


def headers(token: str | None) -> dict[str, str]:
    found = {"User-Agent": "specguard", "Accept-Encoding": "identity"}
    if token:
        found["Authorization"] = f"Bearer {token}"
    return found


def _request(hub: tuple[str, bool, str, str], repo_id: str, revision: str | None) -> Request | None:
    """revision.py ``_plain_request`` for a plain endpoint (scheme://host[:port][/path]) and a
    revision quote() keeps as it is; None otherwise."""
    endpoint = hub[0]
    scheme, sep, rest = endpoint.partition("://")
    netloc, slash, path = rest.partition("/")
    host, colon, port = netloc.partition(":")
    if (not sep or scheme not in ("http", "https") or not host or (colon and not port.isdigit())
            or not all(c.isascii() and (c.isalnum() or c in ".-") for c in host)
            or any(c in endpoint for c in "?#@[]%\\ ") or not plain_env()
            or (revision is not None and not (revision and _PLAIN.issuperset(revision)))):
        return None
    certain, token = plain_token(*hub[1:])
    timeout = request_timeout()
    if not certain or timeout is None:
        return None
    return scheme, netloc, f"{slash}{path}/{repo_id}/resolve/{revision or 'main'}/{INDEX}", headers(token), timeout


def request_timeout() -> float | None:
    """limits.py ``Limits.from_env().request``; None where Limits would refuse a setting."""
    values = [_seconds(var) for var in LIMITS_ENV]
    if any(v is None for v in values):
        return None
    return values[0]


def _seconds(var: str) -> float | None:
    raw = os.environ.get(var)
    if raw is None or raw == "":
        return REQUEST_TIMEOUT if var == LIMITS_ENV[0] else 0.0
    try:
        value = float(raw)
    except ValueError:
        return None
    return value if 0 <= value < float("inf") else None


def head_bytes(netloc: str, path: str, fields: dict[str, str]) -> bytes | None:
    """The ``HEAD`` request's bytes; None where a field could smuggle a line, or a user in the URL."""
    if "@" in netloc or any(c in v for v in (path, *fields.values()) for c in "\r\n"):
        return None
    return "".join([f"HEAD {path} HTTP/1.1\r\nHost: {netloc}\r\n", *(f"{k}: {v}\r\n" for k, v in fields.items()),
                    "Connection: close\r\n\r\n"]).encode("latin-1")


def connect(scheme: str, host: str, port: int, head: bytes, timeout: float) -> _socket.socket | None:
    """A socket with ``head`` sent on it; None where it could not be (revision.py then asks
    the full client, which says what went wrong). Over the C module alone for http
    (socket.py's import is ~2 ms of a replay's wait, the idna codec's another 1-2 for a
    name given as text); ssl's for https."""
    if scheme == "http":
        sock = _connected(host.encode("ascii") if host.isascii() else host, port, timeout)
    else:
        sock = _tls(host, port, timeout)
    if sock is None:
        return None
    try:
        sock.sendall(head)
    except OSError:
        sock.close()
        return None
    return sock


def _connected(host: bytes | str, port: int, timeout: float) -> _socket.socket | None:
    """socket.create_connection's way: each address the name resolves to, in turn."""
    import _socket

    for family, kind, proto, _, where in _socket.getaddrinfo(host, port, 0, _socket.SOCK_STREAM):
        sock = _socket.socket(family, kind, proto)
        try:
            sock.settimeout(timeout)
            sock.connect(where)
            return sock
        except OSError:
            sock.close()
    return None


def _tls(host: str, port: int, timeout: float) -> _socket.socket | None:
    import socket

    from specguard.checkpoint.revision import ssl_context

    try:
        sock = socket.create_connection((host, port), timeout=timeout)
    except OSError:
        return None
    try:
        return ssl_context().wrap_socket(sock, server_hostname=host)
    except BaseException:
        sock.close()
        raise
