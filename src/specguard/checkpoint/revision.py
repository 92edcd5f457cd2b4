"""Which commit a revision of a Hub repo names: one HEAD of its index.

A replayed audit (commands/replay.py) needs this one answer and nothing else, and
importing huggingface_hub's request headers with httpx2 costs more CPU than the whole
rest of a replay (benchmarks/remote.py: "cached"). So the plain case asks through the
standard library's http.client, with the token huggingface_hub would send where that is
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


def resolve(repo_id: str, revision: str | None) -> tuple[str, str] | None:
    """(endpoint, commit) of ``revision`` for a repo audited here before (one HEAD; none
    for a commit hash), else None: a first audit learns its commit from the index it reads.
    The open_remote that follows in this process reuses the answer."""
    where = endpoint()
    if revision and COMMIT.match(revision):
        return where, revision
    if not kept.seen(where, repo_id):
        return None
    found = _plain_lookup(where, repo_id, revision)
    if found is None:
        from specguard.checkpoint.remote import lookup

        found = lookup(repo_id, revision)
    RESOLVED[(where, repo_id, revision)] = found
    return where, found[0]


def plain_fits(where: str) -> tuple[bool, str | None]:
    """(True, the token to send) where the standard library's http.client does what the full
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


def _plain_lookup(where: str, repo_id: str, revision: str | None) -> tuple[str, bool] | None:
    """(commit, has an index) from one HEAD through http.client; None: ask the full client."""
    fits, token = plain_fits(where)
    if not fits:
        return None
    url = urlsplit(where)
    assert url.hostname is not None  # plain_fits saw it
    import http.client

    from specguard.checkpoint.hubhttp import Limits

    path = f"{url.path}/{repo_id}/resolve/{quote(revision or 'main', safe='')}/{INDEX}"
    headers = {"user-agent": "specguard", "accept-encoding": "identity"}
    if token:
        headers["authorization"] = f"Bearer {token}"
    timeout = Limits.from_env().request
    try:
        if url.scheme == "https":
            conn: http.client.HTTPConnection = http.client.HTTPSConnection(
                url.hostname, url.port, timeout=timeout, context=ssl_context())
        else:
            conn = http.client.HTTPConnection(url.hostname, url.port, timeout=timeout)
        try:
            conn.request("HEAD", path, headers=headers)
            r = conn.getresponse()
            status, commit, code = r.status, r.getheader("x-repo-commit") or "", r.getheader("x-error-code")
        finally:
            conn.close()
    except (OSError, http.client.HTTPException, ValueError):
        return None
    if not COMMIT.match(commit):
        return None
    if 200 <= status < 300:
        return commit, True
    if status == 404 and code == "EntryNotFound":
        return commit, False
    return None


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
