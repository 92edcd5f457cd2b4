"""Remote headers over HTTP range requests, through huggingface_hub's client.

Only the index, config files and each shard's header bytes travel; tensor data
never does. Headers are validated by the same strict parser as local files;
the file size for the layout check comes from the ``Content-Range`` answer.
"""

from __future__ import annotations

import os
import re

import orjson

from specguard.checkpoint.errors import CheckpointError
from specguard.checkpoint.header import FileHeader, TensorInfo, check_header_length, parse_header

INDEX = "model.safetensors.index.json"
SINGLE = "model.safetensors"
FIRST_READ = 100_000  # bytes asked for first; most headers fit, as in huggingface_hub
TIMEOUT = 30.0
_CONTENT_RANGE = re.compile(r"bytes \d+-\d+/(\d+)")


def open_remote(repo_id: str, revision: str | None):  # -> Checkpoint (import cycle)
    import httpx2 as httpx  # huggingface_hub's HTTP client
    from huggingface_hub import HfApi
    from huggingface_hub.errors import HfHubHTTPError

    from specguard.checkpoint.source import Checkpoint, _merge, escapes, weight_map_of

    api = HfApi(endpoint=os.environ.get("HF_ENDPOINT"))
    try:
        weight_map = None
        if api.file_exists(repo_id, INDEX, revision=revision):
            weight_map = weight_map_of(_json(api, repo_id, INDEX, revision), f"{repo_id}/{INDEX}")
            files = sorted(set(weight_map.values()))
            for f in files:
                if escapes(f):
                    raise CheckpointError(f"{repo_id}/{INDEX} [{f}]", "shard path escapes the repository")
        elif api.file_exists(repo_id, SINGLE, revision=revision):
            files = [SINGLE]
        else:
            raise CheckpointError(repo_id, f"no {INDEX} and no {SINGLE} in the repository")
        headers = [_remote_header(api, repo_id, f, revision) for f in files]
        configs = {
            name: _json(api, repo_id, name, revision) if api.file_exists(repo_id, name, revision=revision) else None
            for name in ("config.json", "hf_quant_config.json")
        }
    except HfHubHTTPError as e:
        raise CheckpointError(repo_id, f"HTTP error: {str(e).splitlines()[0]}") from e
    except (OSError, httpx.HTTPError) as e:  # refused, DNS, timeouts, offline mode
        raise CheckpointError(repo_id, f"cannot reach the server: {e}") from e
    tensors: dict[str, TensorInfo] = _merge(headers, weight_map)
    return Checkpoint(
        repo_id, None, tuple(files), tensors, configs["config.json"], configs["hf_quant_config.json"], remote=True
    )


def _json(api, repo_id: str, name: str, revision: str | None) -> dict:
    path = api.hf_hub_download(repo_id, name, revision=revision)  # small file, into the HF cache
    try:
        with open(path, "rb") as f:
            obj = orjson.loads(f.read())
    except orjson.JSONDecodeError as e:
        raise CheckpointError(f"{repo_id}/{name}", f"not readable JSON ({e})") from e
    if not isinstance(obj, dict):
        raise CheckpointError(f"{repo_id}/{name}", "must hold a JSON object")
    return obj


def _get_range(api, url: str, start: int, end: int) -> tuple[bytes, int | None]:
    """Bytes [start, end] of ``url`` and the file's total size (from Content-Range)."""
    import httpx2 as httpx  # huggingface_hub's HTTP client
    from huggingface_hub.utils import build_hf_headers, get_session, hf_raise_for_status

    try:
        r = get_session().get(
            url, headers={**build_hf_headers(), "range": f"bytes={start}-{end}"}, timeout=TIMEOUT,
            follow_redirects=True,
        )
    except httpx.HTTPError as e:
        raise OSError(str(e)) from e
    hf_raise_for_status(r)
    m = _CONTENT_RANGE.match(r.headers.get("content-range", ""))
    if m:
        return r.content, int(m.group(1))
    if r.status_code == 200:  # server ignored the range: the body is the whole file
        return r.content[start : end + 1], len(r.content)
    return r.content, None


def _remote_header(api, repo_id: str, shard: str, revision: str | None) -> FileHeader:
    from huggingface_hub import hf_hub_url

    where = f"{repo_id}/{shard}"
    url = hf_hub_url(repo_id, shard, revision=revision, endpoint=api.endpoint)
    head, size = _get_range(api, url, 0, FIRST_READ - 1)
    if size is None:
        raise CheckpointError(where, "server did not say the file size (no Content-Range)")
    if len(head) < 8:
        raise CheckpointError(where, f"truncated: {size} bytes, shorter than the 8-byte header length")
    n = int.from_bytes(head[:8], "little")
    check_header_length(n, size, where)
    raw = head[8 : 8 + n]
    if len(raw) < n:
        rest, _ = _get_range(api, url, len(head), 8 + n - 1)
        raw += rest
    if len(raw) != n:
        raise CheckpointError(where, f"truncated header: {len(raw)} of {n} bytes")
    h = parse_header(raw, size, where)
    # File names inside the checkpoint are shard names, as for local checkpoints.
    tensors = {k: t._replace(file=shard) for k, t in h.tensors.items()}
    return FileHeader(shard, size, h.data_start, tensors, h.metadata)
