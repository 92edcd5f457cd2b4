"""Checkpoint sources: a local directory or file, the HF cache, or remote headers.

The result is one immutable ``Checkpoint``: every tensor's header entry, which
shard holds it, and the configs. Nothing here reads tensor data except
``Checkpoint.read``, which content rules call for scale tensors only.
"""

from __future__ import annotations

import functools
import gc
import mmap
import operator
import os
import re
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import repeat
from pathlib import Path

import numpy as np
import orjson

from specguard.checkpoint.dtypes import NUMPY
from specguard.checkpoint.errors import CheckpointError
from specguard.checkpoint.header import FileHeader, TensorInfo, read_header

INDEX = "model.safetensors.index.json"
SINGLE = "model.safetensors"
CONFIGS = ("config.json", "hf_quant_config.json")
_REPO_ID = re.compile(r"^[\w.-]+/[\w.-]+$")

Progress = Callable[[int, int], None]  # (files done, files total)


@dataclass(frozen=True)
class Checkpoint:
    """Headers and configs of one checkpoint; tensor bytes stay on disk."""

    name: str  # what the user asked for (path or repo id)
    root: Path | None  # local directory holding the files (None when remote)
    files: tuple[str, ...]  # shard names relative to root, in read order
    tensors: Mapping[str, TensorInfo]
    config: Mapping[str, object] | None = None
    hf_quant_config: Mapping[str, object] | None = None
    remote: bool = False
    index: Mapping[str, object] | None = None  # the index's "metadata" (total_size), when indexed
    unindexed: tuple[str, ...] = ()  # tensors a shard stores but the index omits (loaders skip them)
    unreferenced: tuple[str, ...] = ()  # *.safetensors in the directory the index never names
    # tensors read from those files (names the indexed shards do not already hold):
    # stored, but an engine that follows the index never opens their file
    outside_index: tuple[str, ...] = ()
    bytes_read: list[int] = field(default_factory=lambda: [0], compare=False, repr=False)

    @functools.cached_property
    def total_bytes(self) -> int:
        return sum(t.offsets[1] - t.offsets[0] for t in self.tensors.values())

    def read(self, name: str) -> np.ndarray:
        """The bytes of one tensor as a numpy array of its dtype (sub-byte types as U8)."""
        raw = self.read_bytes(name)
        t = self.tensors[name]
        dtype = NUMPY.get(t.dtype)
        if dtype is None:  # F4 / F6: packed, no numpy element type
            return np.frombuffer(raw, np.uint8)
        return np.frombuffer(raw, dtype).reshape(t.shape)

    def read_ranges(self, files: list[str], begin: np.ndarray, length: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Bytes ``[begin[i], begin[i] + length[i])`` of ``files[i]`` for many i, as one
        uint8 buffer and each range's position in it.

        Each shard is memory-mapped and the ranges gathered with one numpy index,
        so 100,000 small ranges cost no Python loop; only the pages holding them
        are touched, and those pages (4 KiB each) are what ``bytes_read`` counts.
        """
        if self.root is None:
            raise CheckpointError(self.name, "tensor bytes are not read from a remote checkpoint")
        length = length.astype(np.int64)
        pos = np.concatenate([[0], np.cumsum(length)[:-1]]).astype(np.int64)
        out = np.empty(int(length.sum()), dtype=np.uint8)
        shard_names, shard_of = np.unique(np.array(files, dtype=object), return_inverse=True)
        order = np.argsort(shard_of, kind="stable")
        bounds = np.searchsorted(shard_of[order], np.arange(len(shard_names) + 1))
        for k, file in enumerate(shard_names.tolist()):
            idx = order[bounds[k] : bounds[k + 1]]
            counts = length[idx]
            within = np.arange(int(counts.sum()), dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts)
            src = np.repeat(begin[idx], counts) + within
            dst = np.repeat(pos[idx], counts) + within
            try:
                with open(self.root / file, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
                    mm.madvise(mmap.MADV_RANDOM)  # no readahead: each sample is a few bytes far apart
                    view = np.frombuffer(mm, dtype=np.uint8)
                    if src.size and int(src.max()) >= view.size:
                        raise CheckpointError(file, f"truncated: {view.size} bytes, a scale lies past the end")
                    out[dst] = view[src]
                    del view
            except (OSError, ValueError) as err:
                raise CheckpointError(file, f"cannot read: {err}") from err
            self.bytes_read[0] += PAGE * len(np.unique(src // PAGE))
        return out, pos

    def read_bytes(self, name: str) -> bytes:
        return self.read_bytes_range(name, self.tensors[name].nbytes)

    def read_bytes_range(self, name: str, length: int) -> bytes:
        """The first ``length`` bytes of a tensor (content rules sample scales)."""
        t = self.tensors[name]
        if self.root is None:
            raise CheckpointError(f"{self.name} [{name}]", "tensor bytes are not read from a remote checkpoint")
        length = min(length, t.nbytes)
        try:
            with open(self.root / t.file, "rb") as f:
                f.seek(t.offsets[0])
                raw = f.read(length)
        except OSError as e:
            raise CheckpointError(f"{t.file} [{name}]", f"cannot read: {e.strerror or e}") from e
        if len(raw) != length:
            raise CheckpointError(f"{t.file} [{name}]", f"truncated: {len(raw)} of {length} bytes")
        self.bytes_read[0] += len(raw)
        return raw


def open_checkpoint(
    source: str | os.PathLike[str],
    *,
    revision: str | None = None,
    remote: bool = False,
    progress: Progress | None = None,
) -> Checkpoint:
    """Open a local path, a HF repo id from the local cache, or (``remote``) its headers."""
    path = Path(source)
    if path.exists():
        return _open_local(path, str(source), progress)
    if not _REPO_ID.match(str(source)):
        raise CheckpointError(str(source), "no such file or directory")
    if remote:
        from specguard.checkpoint.remote import open_remote

        return open_remote(str(source), revision)
    return _open_local(_from_hf_cache(str(source), revision), str(source), progress)


@contextmanager
def gc_paused() -> Iterator[None]:
    """The header pass allocates ~10 objects per tensor, all of them kept: the
    cyclic collector would rescan the growing heap for nothing (about 40 % of
    the pass on 100k tensors, benchmarks/headers.py)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


PAGE = 4096  # bytes the OS reads per touched page of a memory map


def _open_local(path: Path, name: str, progress: Progress | None) -> Checkpoint:
    with gc_paused():
        return _read_local(path, name, progress)


def _read_local(path: Path, name: str, progress: Progress | None) -> Checkpoint:
    if path.is_file():
        header = read_header(path, path.name)
        return Checkpoint(name, path.parent, (path.name,), header.tensors)
    root = path
    files, weight_map, meta = _shard_list(root)
    headers: list[FileHeader] = []
    for i, f in enumerate(files):
        headers.append(read_header(root / f, f))
        if progress:
            progress(i + 1, len(files))
    tensors = _merge(headers, weight_map)
    index = unindexed = unreferenced = None
    outside: list[str] = []
    if weight_map is not None:
        index = meta
        # _merge proved every index entry is stored; equal counts leave nothing unindexed
        unindexed = () if len(tensors) == len(weight_map) else tuple(n for n in tensors if n not in weight_map)
        named = set(files)
        unreferenced = tuple(sorted(p.name for p in root.glob("*.safetensors")
                                    if p.name not in named and p.is_file()))
        files = [*files, *unreferenced]
        for f in unreferenced:
            outside += _outside_index(read_header(root / f, f), tensors)
    return Checkpoint(
        name, root, tuple(files), tensors, _json_file(root, "config.json"),
        _json_file(root, "hf_quant_config.json"), index=index, unindexed=unindexed or (),
        unreferenced=unreferenced or (), outside_index=tuple(outside),
    )


def _outside_index(header: FileHeader, tensors: dict[str, TensorInfo]) -> list[str]:
    """Add a file the index never names: its tensors are stored truth (a drafter an
    exporter forgot to index), but a name the indexed shards hold is a stale copy
    (vLLM's ``filter_duplicate_safetensors_files`` drops the file) and is skipped."""
    added = [n for n in header.tensors if n not in tensors]
    for n in added:
        tensors[n] = header.tensors[n]
    return added


def _shard_list(root: Path) -> tuple[list[str], dict[str, str] | None, dict]:
    """Shards to read, the index's weight_map (None without an index) and its metadata."""
    if (root / INDEX).exists():
        index = _json_file(root, INDEX)
        weight_map = weight_map_of(index, str(root / INDEX))
        files = sorted(set(weight_map.values()))
        for f in files:
            _check_inside(root, f)
        meta = index.get("metadata")
        return files, weight_map, meta if isinstance(meta, dict) else {}
    if (root / SINGLE).is_file():
        return [SINGLE], None, {}
    files = sorted(p.name for p in root.glob("*.safetensors") if p.is_file())
    if not files:
        raise CheckpointError(str(root), "no model.safetensors.index.json and no *.safetensors file")
    return files, None, {}


def weight_map_of(index: object, where: str) -> dict[str, str]:
    """The index's weight_map, checked to map names to shard file names."""
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict) or not set(map(type, weight_map.values())) <= {str}:
        raise CheckpointError(where, "weight_map must map tensor names to shard file names")
    return weight_map


def escapes(shard: str) -> bool:
    """An absolute path, a ``..`` part or a backslash: a name that leaves its folder."""
    return os.path.isabs(shard) or ".." in Path(shard).parts or "\\" in shard


def _check_inside(root: Path, shard: str) -> None:
    """A shard name must stay inside the checkpoint directory (hostile indexes)."""
    where = f"{root / INDEX} [{shard}]"
    if escapes(shard):
        raise CheckpointError(where, "shard path escapes the checkpoint directory")
    real_root = root.resolve()
    real = (root / shard).resolve()
    if not real.is_relative_to(real_root) and not _is_hf_blob(real_root, real) \
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


def _merge(headers: list[FileHeader], weight_map: dict[str, str] | None) -> dict[str, TensorInfo]:
    tensors: dict[str, TensorInfo] = {}
    for h in headers:
        before = len(tensors)
        tensors.update(h.tensors)
        if len(tensors) != before + len(h.tensors):  # rare: find the name stored twice
            for name in h.tensors:
                other = next((g for g in headers if g is not h and name in g.tensors), None)
                if other is not None:
                    raise CheckpointError(f"{h.file} [{name}]", f"tensor also stored in {other.file}")
    if weight_map is not None:
        listed = weight_map.get
        for h in headers:
            if not all(map(operator.eq, map(listed, h.tensors), repeat(h.file))):
                _stray(h, weight_map)  # a tensor the index places elsewhere or omits: allowed, see below
        if len(weight_map) != len(tensors) or not all(map(tensors.__contains__, weight_map)):
            for name, shard in weight_map.items():
                t = tensors.get(name)
                if t is None or t.file != shard:
                    raise CheckpointError(f"{shard} [{name}]", "index names this tensor but the shard lacks it")
    return tensors


def _stray(h: FileHeader, weight_map: dict[str, str]) -> None:
    """A shard tensor the index assigns to another shard. Loaders follow the
    index, so the copy in ``h`` is dead weight, not an error; but an index that
    assigns it to a shard lacking it is caught by the caller."""
    for name in h.tensors:
        shard = weight_map.get(name)
        if shard is not None and shard != h.file:
            raise CheckpointError(f"{shard} [{name}]", f"index places this tensor here but {h.file} stores it")


def _json_file(root: Path, name: str) -> dict | None:
    p = root / name
    if not p.exists():
        return None
    try:
        obj = orjson.loads(p.read_bytes())
    except (OSError, orjson.JSONDecodeError) as e:
        raise CheckpointError(str(p), f"not readable JSON ({e})") from e
    if not isinstance(obj, dict):
        raise CheckpointError(str(p), "must hold a JSON object")
    return obj


def _from_hf_cache(repo_id: str, revision: str | None) -> Path:
    """Snapshot folder of a cached repo, without touching the network."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        return Path(
            snapshot_download(
                repo_id, revision=revision, local_files_only=True,
                allow_patterns=["*.json", "*.safetensors"],
            )
        )
    except LocalEntryNotFoundError as e:
        raise CheckpointError(
            repo_id, "not in the local Hugging Face cache (pass --remote to read headers over HTTP)"
        ) from e
