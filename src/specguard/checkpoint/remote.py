"""Remote headers over HTTP range requests (hubhttp.py: httpx2 within deadlines).

Only the index, the config files and each shard's header bytes travel; tensor
data never does. For a repo of S shards, S + 3 requests in three rounds and
the waves of the last:

1. the index at the asked revision; its answer names the commit the revision
   resolves to (``X-Repo-Commit``), or says the repo has no index (404);
2. both config files by commit (a 404 says one is absent: no separate question
   whether it exists), together with the header of the shard holding the most
   tensors, which shows how many bytes an entry takes beyond its name;
3. every other shard's header from a bounded pool, each in one range read sized
   from the names the index gives it, parsed as it arrives.

What was read is cached by commit (cache.py). A repo seen before starts with a
HEAD instead, which resolves the revision without the index's bytes: a second
audit of the same revision costs that one request; after a push the index then
travels with the configs (S + 4).
Answers are validated as strictly as local files, plus what only a server can
get wrong: a range shorter than asked, a size that lies, an HTML page, a whole
file for a range (refused from its headers), an error status (named: not found,
gated, rate-limited).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Literal

from specguard.checkpoint import cache
from specguard.checkpoint import revision as revision_
from specguard.checkpoint.checkpoint import Checkpoint
from specguard.checkpoint.errors import CheckpointError
from specguard.checkpoint.header import MAX_HEADER, FileHeader, check_header_length, parse_header
from specguard.checkpoint.hubhttp import Answer, Ask, Session, refusal
from specguard.checkpoint.index import (
    CONFIG,
    CONFIGS,
    HF_QUANT_CONFIG,
    INDEX,
    SINGLE,
    escapes,
    load_index,
    load_json,
    merge,
)
from specguard.checkpoint.revision import COMMIT

# Requests in flight at once. The Hub counts requests per 5-minute window (its
# resolver quota is in the thousands even for anonymous users), not open
# connections. 64 reads a 64-shard header set in one wave after the first shard
# (benchmarks/remote.py) and a 163-shard one (DeepSeek-V3) in three.
POOL = 64
FIRST_READ = 100_000  # bytes for a shard with no index to size it from, as huggingface_hub does
ENTRY_MARGIN = 1.05  # on the learned bytes per entry: shards of other tensor kinds (a drafter's) differ ~5 %
CALIBRATE_FROM = 16  # tensors a shard needs before its bytes per entry size the others' reads
SLACK = 256  # bytes per first read beyond the estimate (metadata, padding)
SMALL_FILE = MAX_HEADER  # the most an index or config answer may hold (a shard header's own cap)
_CONTENT_RANGE = re.compile(r"bytes (\d+)-(\d+)/(\d+)$")

Progress = Callable[[int, int], None]


def open_remote(repo_id: str, revision: str | None, progress: Progress | None = None,
                stop: threading.Event | None = None) -> Checkpoint:
    """The repo's headers at ``revision`` (a prefetch of them begun earlier, if one was).
    ``stop``: set, every read in flight ends within hubhttp.POLL."""
    begun = _BEGUN.pop((revision_.endpoint(), repo_id, revision), None)
    if begun is not None:
        return begun.result(progress)
    return _open(repo_id, revision, progress, stop)


def _open(repo_id: str, revision: str | None, progress: Progress | None, stop: threading.Event | None,
          on_read: Callable[[Checkpoint], None] | None = None) -> Checkpoint:
    """``on_read``: handed the checkpoint as soon as it is read and validated, before what
    was read is written to the cache (a prefetch's command goes on meanwhile)."""
    hub = _Hub(repo_id)
    if revision and COMMIT.match(revision):  # a commit names the same bytes forever: no lookup needed
        snapshot = cache.load(cache.snapshot_path(hub.endpoint, repo_id, revision))
        if snapshot is not None:
            return _build(repo_id, revision, snapshot)
    hub.connect(stop)
    try:
        if cache.seen(hub.endpoint, repo_id):
            looked_up = revision_.RESOLVED.pop((hub.endpoint, repo_id, revision), None)
            commit, indexed = looked_up or hub.lookup(revision)
            snapshot = cache.load(cache.snapshot_path(hub.endpoint, repo_id, commit))
            if snapshot is not None:
                revision_.READ[(hub.endpoint, repo_id, revision)] = commit
                return _build(repo_id, commit, snapshot)
            index, fetch_index = None, indexed  # the index travels with the configs
        else:
            (index, commit), fetch_index = hub.get_file(INDEX, revision), False
        snapshot, headers, weights = _fetch(hub, commit, index, progress, fetch_index=fetch_index)
        checkpoint = _build(repo_id, commit, snapshot, headers, weights)  # validated before it is cached
    finally:
        hub.close()
    revision_.READ[(hub.endpoint, repo_id, revision)] = commit
    if on_read is not None:
        on_read(checkpoint)
    cache.save(cache.snapshot_path(hub.endpoint, repo_id, commit), snapshot)
    return checkpoint


class _Prefetch:
    """An open_remote running in a thread of its own: its round trips pass while the
    command imports the stages that read its answer (benchmarks/remote.py)."""

    def __init__(self, repo_id: str, revision: str | None) -> None:
        self.stop = threading.Event()
        self.ready = threading.Event()  # set: ``outcome`` holds the checkpoint or the error
        self.progress: Progress | None = None
        self.outcome: tuple[Checkpoint | None, BaseException | None] = (None, None)
        self.thread = threading.Thread(target=self._run, args=(repo_id, revision), daemon=True,
                                       name="specguard-prefetch")

    def _run(self, repo_id: str, revision: str | None) -> None:
        # Every import this thread makes comes before the command takes its result (the cache
        # write after it imports nothing). From then on, the main thread may import beside it
        # with Ctrl-C live (usage.py ctrl_c_deferred says why that matters).
        try:
            self.outcome = (_open(repo_id, revision, self._report, self.stop, self._read), None)
        except BaseException as e:  # handed to the command's own open_remote, raised there
            self.outcome = (None, e)
        finally:
            self.ready.set()

    def _read(self, checkpoint: Checkpoint) -> None:
        self.outcome = (checkpoint, None)
        self.ready.set()  # the command goes on while the cache is written

    def _report(self, done: int, total: int) -> None:
        if self.progress is not None:
            self.progress(done, total)

    def result(self, progress: Progress | None) -> Checkpoint:
        self.progress = progress
        try:
            self.ready.wait()
        except BaseException:  # Ctrl-C: the reads in flight end within hubhttp.POLL
            self.cancel()
            raise
        checkpoint, error = self.outcome
        if error is not None:
            raise error
        assert checkpoint is not None
        return checkpoint

    def cancel(self) -> None:
        self.stop.set()
        self.thread.join(timeout=1.0)

    def __enter__(self) -> _Prefetch:
        return self

    def __exit__(self, *exc: object) -> None:
        key = next((k for k, v in _BEGUN.items() if v is self), None)
        if key is not None:  # never asked for
            del _BEGUN[key]
            self.cancel()
        else:  # taken: it may still be writing the cache
            self.thread.join()


_BEGUN: dict[tuple[str, str, str | None], _Prefetch] = {}


def prefetch(repo_id: str, revision: str | None) -> _Prefetch:
    """open_remote(repo_id, revision) started in a thread; the command's own call takes its
    result. Use it as a context: on the way out, one the command never asked for is
    stopped, and a taken one's cache write is waited for."""
    begun = _BEGUN[(revision_.endpoint(), repo_id, revision)] = _Prefetch(repo_id, revision)
    begun.thread.start()
    return begun


def lookup(repo_id: str, revision: str | None) -> tuple[str, bool]:
    """The commit ``revision`` resolves to, and whether the repo has an index: one HEAD
    through the full client (revision.py asks it where its plain case cannot)."""
    hub = _Hub(repo_id)
    hub.connect()
    try:
        return hub.lookup(revision)
    finally:
        hub.close()


class _Hub:
    """Requests to one repo: the user's token on each, within the audit's limits (hubhttp.py)."""

    def __init__(self, repo_id: str) -> None:
        self.repo_id = repo_id
        self.endpoint = revision_.endpoint()
        self.session: Session | None = None

    def connect(self, stop: threading.Event | None = None) -> None:
        from huggingface_hub import constants

        if constants.is_offline_mode():
            raise CheckpointError(self.repo_id, "offline mode is on (HF_HUB_OFFLINE): --remote needs the network")
        plain, token = revision_.plain_fits(self.endpoint)
        if plain:  # the token build_hf_headers() would send, without importing it (revision.py plain_token)
            headers = {"user-agent": _user_agent()}
            if token:
                headers["authorization"] = f"Bearer {token}"
        else:
            from huggingface_hub.utils import build_hf_headers

            headers = build_hf_headers()  # carries HF_TOKEN or the saved login token
        self.token = "authorization" in {k.lower() for k in headers}
        self.session = Session(self.repo_id, headers, connections=POOL, plain=plain,
                               stop=stop or threading.Event())

    def close(self) -> None:
        if self.session is not None:
            self.session.close()

    def url(self, name: str, revision: str | None) -> str:
        from urllib.parse import quote

        rev = quote(revision or "main", safe="")  # as huggingface_hub's hf_hub_url
        return f"{self.endpoint}/{self.repo_id}/resolve/{rev}/{quote(name)}"

    def request(self, method: Literal["GET", "HEAD"], name: str, revision: str | None, **kw: Any) -> Answer:
        assert self.session is not None
        return self.session.get(self.url(name, revision), f"{self.repo_id}/{name}", method=method, **kw)

    def lookup(self, revision: str | None) -> tuple[str, bool]:
        """The commit ``revision`` resolves to, and whether the repo has an index: one HEAD."""
        r = self.request("HEAD", INDEX, revision, limit=0)
        if r.status >= 300 and not _missing_entry(r):
            raise refusal(r, self.repo_id, revision, self.token)
        return self.commit_of(r, revision), r.status < 300

    def get_file(self, name: str, revision: str | None) -> tuple[bytes | None, str]:
        """A small file's bytes (None when the repo has no such file) and the commit they are from."""
        return self.file_of(self.request("GET", name, revision, limit=SMALL_FILE), name, revision)

    def file_ask(self, name: str, revision: str | None) -> Ask:
        return Ask(self.url(name, revision), f"{self.repo_id}/{name}", "GET", None, None, SMALL_FILE)

    def file_of(self, r: Answer, name: str, revision: str | None) -> tuple[bytes | None, str]:
        """get_file's answer from the server's."""
        if _missing_entry(r):
            return None, self.commit_of(r, revision)
        if r.status >= 300:
            raise refusal(r, self.repo_id if name == INDEX else f"{self.repo_id}/{name}", revision, self.token)
        return r.body, self.commit_of(r, revision)

    def commit_of(self, r: Answer, revision: str | None) -> str:
        """The commit the Hub resolved ``revision`` to: on its own answer, before any CDN redirect."""
        commit = r.commit
        if commit is None:
            if revision and COMMIT.match(revision):
                return revision
            raise CheckpointError(self.repo_id, f"the server did not name the commit of {revision or 'main'} "
                                                "(no X-Repo-Commit): not a Hugging Face Hub endpoint?")
        if not COMMIT.match(commit):
            raise CheckpointError(self.repo_id, f"the server named {commit[:60]!r} as the commit, not a hash")
        return commit

    def get_range(self, name: str, commit: str, start: int, end: int) -> tuple[bytes, int]:
        """Bytes [start, end] of a file (fewer only where the file ends) and its size."""
        assert self.session is not None
        ask = self.range_ask(name, commit, start, end)
        return self.range_of(self.session.get(ask.url, ask.where, first=start, last=end, limit=ask.limit),
                             name, commit, start, end)

    def range_ask(self, name: str, commit: str, start: int, end: int) -> Ask:
        return Ask(self.url(name, commit), f"{self.repo_id}/{name}", "GET", start, end, end - start + 1)

    def range_of(self, r: Answer, name: str, commit: str, start: int, end: int) -> tuple[bytes, int]:
        """The bytes a range read's answer holds and the file's size, checked against what was asked."""
        where = f"{self.repo_id}/{name}"
        if _missing_entry(r):
            raise _NoSuchShard(name)
        if r.status >= 300:
            raise refusal(r, where, commit, self.token)
        if r.status == 200:  # a whole file no longer than asked (hubhttp refused a longer one unread)
            return r.body, len(r.body)
        m = _CONTENT_RANGE.match(r.headers.get("content-range", ""))
        if r.status != 206 or m is None:
            raise CheckpointError(where, f"HTTP {r.status} without a Content-Range: the file size is unknown")
        first, last, size = map(int, m.groups())
        expected = min(end, size - 1) - start + 1
        if first != start or last - first + 1 != expected or len(r.body) != expected:
            raise CheckpointError(
                where, f"asked for bytes {start}-{end} of {size}, got {len(r.body)} bytes "
                f"(Content-Range {first}-{last}): a truncated or wrong range",
            )
        return r.body, size


def _user_agent() -> str:
    """As build_hf_headers() names the client, with specguard as the library."""
    import platform

    import huggingface_hub

    from specguard._version import __version__

    return f"specguard/{__version__}; hf_hub/{huggingface_hub.__version__}; python/{platform.python_version()}"


class _NoSuchShard(Exception):
    pass


def _missing_entry(r: Answer) -> bool:
    return r.status == 404 and r.headers.get("x-error-code") == "EntryNotFound"


Indexed = tuple[dict[str, str], dict]  # an index's weight_map and metadata (index.py load_index)


def _fetch(
    hub: _Hub, commit: str, index: bytes | None, progress: Progress | None, *, fetch_index: bool = False,
) -> tuple[cache.Snapshot, list[FileHeader], Indexed | None]:
    """Rounds 2 and 3: the configs (and the index, when the revision was resolved by a
    HEAD) together, then every shard's header, each parsed as it arrives. Returns what
    was read, the parsed headers and the parsed index (parsed once: 100,000 entries)."""
    assert hub.session is not None
    files = [*CONFIGS, INDEX] if fetch_index else list(CONFIGS)
    got: dict[str, bytes | None] = {}
    try:
        if fetch_index:
            for i, answer in hub.session.get_all([hub.file_ask(n, commit) for n in files]):
                got[files[i]] = hub.file_of(answer, files[i], commit)[0]
            files, index = [], got[INDEX]
            if index is None:  # the HEAD saw it, the GET did not
                raise CheckpointError(f"{hub.repo_id}/{INDEX}", f"found at {commit}, then not found at it")
        shards: dict[str, list[str]] = {SINGLE: []}
        indexed = None
        if index is not None:
            indexed = load_index(index, f"{hub.repo_id}/{INDEX}")
            shards = _shards_of(indexed[0], hub.repo_id)
        raws, headers = _read_headers(hub, commit, shards, progress, files, got)
    except BaseException:  # a bad shard or Ctrl-C: reads in flight see the stop within hubhttp.POLL
        hub.session.stop.set()
        raise
    return cache.Snapshot(index, {n: got[n] for n in CONFIGS}, raws), headers, indexed


def _shards_of(weight_map: dict[str, str], repo_id: str) -> dict[str, list[str]]:
    """Each shard's tensor names, in file-name order."""
    shards: dict[str, list[str]] = {}
    for name, shard in weight_map.items():  # 100,000 entries: no list built per entry (setdefault's)
        names = shards.get(shard)
        if names is None:
            names = shards[shard] = []
        names.append(name)
    for shard in shards:
        if escapes(shard):
            raise CheckpointError(f"{repo_id}/{INDEX} [{shard}]", "shard path escapes the repository")
    return dict(sorted(shards.items()))


def _read_headers(
    hub: _Hub, commit: str, shards: dict[str, list[str]], progress: Progress | None, files: list[str],
    got: dict[str, bytes | None],
) -> tuple[list[tuple[str, int, bytes]], list[FileHeader]]:
    """Every shard's (name, size, header bytes) and parsed header, in name order; ``files``
    (the configs) are read with the first shard, into ``got``.

    The shard holding the most tensors goes first, alone: its header says how
    many bytes an entry takes beyond its name, which sizes every other shard's
    single read to within a few percent. Then every other shard's read at once,
    sized from the most bytes per entry any shard read so far has shown (shards
    differ: longer offsets, other dtypes and shapes), each parsed as it arrives."""
    names = list(shards)
    raws: dict[str, tuple[str, int, bytes]] = {}
    parsed: dict[str, FileHeader] = {}
    learned: list[float | None] = [None]  # bytes per entry beyond its name, the most seen

    def arrived(shard: str, size: int, raw: bytes) -> None:  # while other reads are in flight
        raws[shard] = (shard, size, raw)
        parsed[shard] = parse_header(raw, size, f"{hub.repo_id}/{shard}", file=shard)
        if len(shards[shard]) >= CALIBRATE_FROM:
            learned[0] = max(learned[0] or 0.0, _bytes_per_entry(shards[shard], raw))
        _report(progress, len(parsed), len(names))

    first = max(names, key=lambda s: len(shards[s]))
    rest = [s for s in names if s != first]
    for group in ([first], rest):
        sized = [_first_read(shards[s], learned[0]) for s in group]
        asks = [hub.range_ask(s, commit, 0, n - 1) for s, n in zip(group, sized, strict=True)]
        asks += [hub.file_ask(n, commit) for n in files]
        assert hub.session is not None
        for i, answer in hub.session.get_all(asks):  # sent at once, taken as they come
            if i >= len(group):
                got[files[i - len(group)]] = hub.file_of(answer, files[i - len(group)], commit)[0]
                continue
            with _shard_named(hub, group[i]):
                head, size = hub.range_of(answer, group[i], commit, 0, sized[i] - 1)
            arrived(group[i], *_header_of(hub, commit, group[i], head, size))
        files = []
    return [raws[s] for s in names], [parsed[s] for s in names]


def _first_read(tensor_names: list[str], per_entry: float | None) -> int:
    """Bytes to ask for first: the 8-byte length and the whole header, estimated."""
    if not tensor_names or (per_entry is None and len(tensor_names) <= 1):
        return FIRST_READ
    if per_entry is None:  # no shard read yet: above the ~70-100 bytes an entry takes beyond its name
        per_entry = 128.0
    name_bytes = _utf8_length(tensor_names)
    return 8 + name_bytes + int(len(tensor_names) * per_entry * ENTRY_MARGIN) + SLACK


def _utf8_length(names: list[str]) -> int:
    """The names' total length in UTF-8: their length in characters when all are ASCII, as
    tensor names nearly always are (one join, not an encode per name)."""
    joined = "".join(names)
    return len(joined) if joined.isascii() else len(joined.encode())


def _bytes_per_entry(tensor_names: list[str], header: bytes) -> float:
    name_bytes = _utf8_length(tensor_names)
    return max(0.0, len(header) - name_bytes) / len(tensor_names)


def _header_of(hub: _Hub, commit: str, shard: str, head: bytes, size: int) -> tuple[int, bytes]:
    """The size and header bytes from a shard's first range read (``head``), reading the rest
    of the header when it is longer."""
    where = f"{hub.repo_id}/{shard}"
    with _shard_named(hub, shard):
        if len(head) < 8:
            raise CheckpointError(where, f"truncated: {size} bytes, shorter than the 8-byte header length")
        n = int.from_bytes(head[:8], "little")
        check_header_length(n, size, where)
        raw = head[8 : 8 + n]
        if len(raw) < n:
            rest, _ = hub.get_range(shard, commit, len(head), 8 + n - 1)
            raw += rest
    return size, raw


@contextmanager
def _shard_named(hub: _Hub, shard: str) -> Iterator[None]:
    """A shard the server does not have, named as the index's fault (or the repo's, without one)."""
    try:
        yield
    except _NoSuchShard as e:
        if shard == SINGLE:
            raise CheckpointError(hub.repo_id, f"no {INDEX} and no {SINGLE} in the repository") from e
        raise CheckpointError(f"{hub.repo_id}/{INDEX} [{shard}]", "shard named by the index does not exist") from e


def _report(progress: Progress | None, done: int, total: int) -> None:
    if progress:
        progress(done, total)


def _build(
    repo_id: str, commit: str, snapshot: cache.Snapshot, headers: list[FileHeader] | None = None,
    indexed: Indexed | None = None,
) -> Checkpoint:
    """What was read (fresh, with its headers and index parsed on arrival, or cached) as a Checkpoint."""
    weight_map = meta = None
    if indexed is not None:
        weight_map, meta = indexed
    elif snapshot.index is not None:
        weight_map, meta = load_index(snapshot.index, f"{repo_id}/{INDEX}")
    if headers is None:
        headers = [parse_header(raw, size, f"{repo_id}/{shard}", file=shard) for shard, size, raw in snapshot.shards]
    tensors = merge(headers, weight_map)
    unindexed: tuple[str, ...] = ()
    if weight_map is not None and len(tensors) != len(weight_map):
        unindexed = tuple(n for n in tensors if n not in weight_map)
    configs = {n: None if raw is None else load_json(raw, f"{repo_id}/{n}") for n, raw in snapshot.configs.items()}
    return Checkpoint(
        repo_id, None, tuple(h.file for h in headers), tensors, configs.get(CONFIG), configs.get(HF_QUANT_CONFIG),
        remote=True, commit=commit, index=meta, unindexed=unindexed,
    )
