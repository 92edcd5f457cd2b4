"""Checkpoint sources: a local directory or file, the HF cache, or remote headers.

Each source yields one immutable ``Checkpoint`` (checkpoint.py). Local shards
are read here; ``--remote`` headers in remote.py. Both share index.py.
"""

from __future__ import annotations

import gc
import os
import re
import stat
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from specguard.checkpoint.checkpoint import Checkpoint
from specguard.checkpoint.errors import CheckpointError, named
from specguard.checkpoint.header import FileHeader, TensorInfo, read_header
from specguard.checkpoint.index import (
    CONFIG,
    HF_QUANT_CONFIG,
    INDEX,
    SINGLE,
    escapes,
    load_index,
    load_json,
    merge,
)
from specguard.errors import UsageError, escaped

__all__ = ["Checkpoint", "Progress", "gc_paused", "open_checkpoint"]

_REPO_ID = re.compile(r"^[\w.-]+/[\w.-]+$")

Progress = Callable[[int, int], None]  # (files done, files total)


def open_checkpoint(
    source: str | os.PathLike[str],
    *,
    revision: str | None = None,
    remote: bool = False,
    progress: Progress | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    follow_links: bool = False,
) -> Checkpoint:
    """Open a local path, a HF repo id from the local cache, or (``remote``) its headers.

    ``cache_dir``: the Hugging Face cache to resolve a repo id in (default: the
    user's; vLLM's ``--download-dir``). ``follow_links``: read shards that are
    symlinks out of the directory, as an engine loading the checkpoint does
    (models kept on another disk); the CLI refuses them, reading only what the
    checkpoint's own directory holds.
    """
    path = Path(source)
    if path.exists():
        if revision:
            raise UsageError(f"--revision {revision} applies to a Hugging Face repo id; "
                             f"{source} is a local path")
        return _open_local(path, str(source), progress, follow_links)
    if not _REPO_ID.match(str(source)):
        raise CheckpointError(str(source), "no such file or directory")
    if remote:
        from specguard.checkpoint.remote import open_remote

        with gc_paused():
            return open_remote(str(source), revision, progress)
    return _open_local(_from_hf_cache(str(source), revision, cache_dir), str(source), progress, follow_links)


@contextmanager
def gc_paused() -> Iterator[None]:
    """The cyclic collector off within (the process's switch: every thread). For work
    whose objects are all kept: the header pass allocates ~10 per tensor, and the
    collector would rescan the growing heap for nothing (about 40 % of the pass on
    100k tensors, benchmarks/headers.py); classify, the Resolver, lint and a remote
    audit (commands/replay.py) use it alike."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _open_local(path: Path, name: str, progress: Progress | None, follow_links: bool = False) -> Checkpoint:
    with gc_paused():
        return _read_local(path, name, progress, follow_links)


def _read_local(path: Path, name: str, progress: Progress | None, follow_links: bool) -> Checkpoint:
    if path.is_file():
        if path.suffix == ".json":  # config.json, the index: its directory is the checkpoint
            raise CheckpointError(name, f"{path.name} is not a weights file: pass the directory ({path.parent})")
        _whole_checkpoint_beside(path, name)
        header = _header(path.parent, path.name)
        # the config beside a single file still says what the engine builds from it
        return Checkpoint(name, path.parent, (path.name,), header.tensors, _json_file(path.parent, CONFIG),
                          _json_file(path.parent, HF_QUANT_CONFIG), sections=_sections([header]))
    root = path
    files, weight_map, meta = _shard_list(root, follow_links)
    headers: list[FileHeader] = []
    for i, f in enumerate(files):
        headers.append(_header(root, f))
        if progress:
            progress(i + 1, len(files))
    tensors = merge(headers, weight_map)
    index = unindexed = unreferenced = None
    outside: list[str] = []
    if weight_map is not None:
        index = meta
        # merge proved every index entry is stored; equal counts leave nothing unindexed
        unindexed = () if len(tensors) == len(weight_map) else tuple(n for n in tensors if n not in weight_map)
        listed = set(files)
        unreferenced = tuple(sorted(p.name for p in root.glob("*.safetensors")
                                    if p.name not in listed and p.is_file()))
        files = [*files, *unreferenced]
        for f in unreferenced:
            outside += _outside_index(_header(root, f), tensors)
    # a file the index never names holds only the tensors no indexed shard has: its section is theirs
    sections = None if outside else _sections(headers)
    return Checkpoint(
        name, root, tuple(files), tensors, _json_file(root, CONFIG),
        _json_file(root, HF_QUANT_CONFIG), index=index, unindexed=unindexed or (),
        unreferenced=unreferenced or (), outside_index=tuple(outside), sections=sections,
    )


def _sections(headers: list[FileHeader]) -> dict[str, tuple[int, int]]:
    """Where each shard's tensor bytes begin and end: a validated header's tensors tile its
    data section from its start to the end of the file (header.py), so no tensor need be asked."""
    return {h.file: (h.data_start, h.size) for h in headers if h.tensors}


def _whole_checkpoint_beside(path: Path, name: str) -> None:
    """One shard of an indexed checkpoint is not a checkpoint: the rules would find the
    other shards' tensors missing."""
    if not (path.parent / INDEX).is_file():
        return
    try:
        weight_map, _ = load_index((path.parent / INDEX).read_bytes(), str(path.parent / INDEX))
    except (OSError, CheckpointError):
        return  # reading the directory reports a bad index; this file alone is still readable
    shards = set(weight_map.values())
    if path.name in shards and len(shards) > 1:
        raise CheckpointError(name, f"one of the {len(shards)} shards {INDEX} names: pass the directory "
                                    f"({path.parent})")


def _header(root: Path, shard: str) -> FileHeader:
    """A shard's header; an error names the file with its directory (tensors keep the shard name)."""
    try:
        return read_header(root / shard, shard)
    except CheckpointError as e:
        if e.where != escaped(shard):
            raise
        raise CheckpointError(str(root / shard), e.what) from e


def _outside_index(header: FileHeader, tensors: dict[str, TensorInfo]) -> list[str]:
    """Add a file the index never names: its tensors are stored truth (a drafter an
    exporter forgot to index), but a name the indexed shards hold is a stale copy
    (vLLM's ``filter_duplicate_safetensors_files`` drops the file) and is skipped."""
    added = [n for n in header.tensors if n not in tensors]
    for n in added:
        tensors[n] = header.tensors[n]
    return added


def _shard_list(root: Path, follow_links: bool) -> tuple[list[str], dict[str, str] | None, dict]:
    """Shards to read, the index's weight_map (None without an index) and its metadata."""
    if (root / INDEX).exists():
        try:
            raw = (root / INDEX).read_bytes()
        except OSError as e:
            raise CheckpointError(str(root / INDEX), f"not readable JSON ({e})") from e
        present = tuple(n for n in os.listdir(root) if n.endswith(".safetensors"))
        weight_map, meta = load_index(raw, str(root / INDEX), present)
        files = sorted(set(weight_map.values()))
        real_root = root.resolve()
        for f in files:
            _check_inside(root, real_root, f, follow_links)
        return files, weight_map, meta
    if (root / SINGLE).is_file():
        return [SINGLE], None, {}
    files = sorted(p.name for p in root.glob("*.safetensors") if p.is_file())
    if not files:
        raise CheckpointError(str(root), "no model.safetensors.index.json and no *.safetensors file"
                              + _subfolder_hint(root))
    return files, None, {}


def _subfolder_hint(root: Path) -> str:
    """What a folder without weights holds instead: checkpoints one level down (what
    `specguard factory s4` writes: target/ and drafter/), and how to pass them."""
    inside = sorted(d.name for d in root.iterdir() if d.is_dir() and (d / CONFIG).is_file()
                    and any(d.glob("*.safetensors")))
    if not inside:
        return ""
    drafters = [d for d in inside if "draft" in d.lower() or "eagle" in d.lower()]
    folders = ", ".join(f"{d}/" for d in inside)
    if len(inside) == 2 and len(drafters) == 1:
        target = next(d for d in inside if d != drafters[0])
        return (f"; it holds the checkpoints {folders}: pass the target and its drafter "
                f"({root / target} --draft {root / drafters[0]})")
    return f"; it holds the checkpoints {folders}: pass one of them"


def _check_inside(root: Path, real_root: Path, shard: str, follow_links: bool) -> None:
    """A shard name must stay inside the checkpoint directory (hostile indexes)."""
    where = named(str(root / INDEX), shard)
    if escapes(shard):
        raise CheckpointError(where, "shard path escapes the checkpoint directory")
    if "/" not in shard:  # the common case in one lstat: a plain file right in the directory
        try:
            if stat.S_ISREG(os.lstat(root / shard).st_mode):
                return
        except OSError:
            pass
    real = (root / shard).resolve()
    if not follow_links and not real.is_relative_to(real_root) and not _is_hf_blob(real_root, real) \
            and not _is_overlay_link(root / shard):
        raise CheckpointError(where, "shard is a symlink that escapes the checkpoint directory")
    if not real.is_file():
        raise CheckpointError(where, "shard named by the index does not exist")


def _is_overlay_link(link: Path) -> bool:
    """`specguard fix` on another filesystem symlinks each shard to the same-named shard
    of the checkpoint it repairs (a directory with its own config.json): allowed."""
    if not link.is_symlink():
        return False
    first = link.parent / os.readlink(link)
    return first.name == link.name and first.suffix == ".safetensors" and (first.parent / "config.json").is_file()


def _is_hf_blob(root: Path, real: Path) -> bool:
    """HF cache snapshots are symlinks into the repo's own ``blobs/`` folder: allowed."""
    if root.parent.name != "snapshots":
        return False
    return real.is_relative_to(root.parent.parent / "blobs")


def _json_file(root: Path, name: str) -> dict | None:
    p = root / name
    if not p.exists():
        return None
    try:
        raw = p.read_bytes()
    except OSError as e:
        raise CheckpointError(str(p), f"not readable JSON ({e})") from e
    return load_json(raw, str(p))


def _from_hf_cache(repo_id: str, revision: str | None, cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """Snapshot folder of a cached repo, without touching the network."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        return Path(
            snapshot_download(
                repo_id, revision=revision, local_files_only=True,
                cache_dir=os.fspath(cache_dir) if cache_dir is not None else None,
                allow_patterns=["*.json", "*.safetensors"],
            )
        )
    except LocalEntryNotFoundError as e:
        what = f"revision {revision!r} is" if revision else "it is"
        where = f" at {cache_dir}" if cache_dir else ""
        # "org/model" reads both ways: a local path that does not exist, or a repo id
        raise CheckpointError(
            repo_id, f"no such local path, and as a repo id {what} not in the local Hugging Face cache{where} "
                     "(pass --remote to read headers over HTTP)"
        ) from e
