"""Write a plan as a directory: changed files written, every other file linked.

Links are hard links where DIR shares the source's filesystem, else symlinks;
a file that is itself a symlink (an HF cache snapshot points into ``blobs/``)
is linked to what it points at. Everything goes into a temporary sibling of
DIR, is verified there (repair/verify.py), and is renamed into place at the
end; any failure, Ctrl-C or SIGTERM removes the sibling, so DIR is either
complete or absent. A sibling whose process was killed outright (SIGKILL, a
lost machine) names that process: the next ``fix`` of DIR removes it.
"""

from __future__ import annotations

import filecmp
import json
import os
import shutil
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from specguard.checkpoint.errors import CheckpointError
from specguard.checkpoint.source import INDEX
from specguard.formats.table import Module, classify
from specguard.repair import shards as sh
from specguard.repair.plan import DRAFTER, TARGET, Overlay, Plan

CONFIG, HF_QUANT = "config.json", "hf_quant_config.json"


class BadOutput(CheckpointError):
    """DIR cannot be written (not empty, inside the source, ...)."""


@dataclass
class Written:
    """What one overlay directory holds."""

    overlay: Overlay
    path: Path  # final location
    written: dict[str, int] = field(default_factory=dict)  # file -> bytes written
    replaced: dict[str, int] = field(default_factory=dict)  # source shard -> its size
    linked: list[str] = field(default_factory=list)
    symlinked: list[str] = field(default_factory=list)
    unchanged: bool = False  # DIR already held exactly this repair

    @property
    def added_bytes(self) -> int:
        return sum(self.written.values()) - sum(self.replaced.values())


def layout(plan: Plan, out: Path) -> dict[str, Path]:
    """Where each overlay goes: DIR itself, or DIR/target and DIR/drafter with --draft."""
    if len(plan.overlays) == 1:
        return {TARGET: out}
    return {TARGET: out / TARGET, DRAFTER: out / DRAFTER}


def check_out(plan: Plan, out: Path) -> None:
    """Refuse, before anything is printed or written, a DIR the repair cannot go to."""
    if out.exists() and not out.is_dir():
        raise BadOutput(str(out), "--out must be a new or empty directory")
    if out.is_dir() and any(out.iterdir()) and not all((p / CONFIG).is_file() for p in layout(plan, out).values()):
        raise BadOutput(str(out), "--out must be a new or empty directory (or hold this very repair)")
    existing = next((p for p in (out, *out.parents) if p.exists()), None)
    if existing is not None and not os.access(existing, os.W_OK | os.X_OK):
        raise BadOutput(str(out), f"cannot create: {existing} is not writable")
    real = out.resolve()
    for ov in plan.overlays:
        root = ov.checkpoint.root
        if root is None:
            raise BadOutput(ov.checkpoint.name, "a remote checkpoint cannot be linked; use --diff")
        src = root.resolve()
        if real == src or src in real.parents or real in src.parents:
            raise BadOutput(str(out), f"--out must lie outside the source checkpoint ({root})")


def write_repair(plan: Plan, out: Path, verify) -> list[Written]:
    """Write ``plan`` into ``out`` atomically; ``verify(paths)`` raises if the result
    does not route right (nothing is left behind then). A non-empty ``out`` that
    already holds exactly this repair is left as it is (``Written.unchanged``);
    any other non-empty ``out`` is refused."""
    check_out(plan, out)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise BadOutput(str(out), f"cannot create: {e.strerror or e}") from e
    tmp = out.parent / f"{_sibling_prefix(out)}{os.getpid()}"
    _remove_orphans(out)
    shutil.rmtree(tmp, ignore_errors=True)
    occupied = out.exists() and any(out.iterdir())
    with _sigterm_as_exit():
        return _write_into(plan, out, tmp, occupied, verify)


def _write_into(plan: Plan, out: Path, tmp: Path, occupied: bool, verify) -> list[Written]:
    try:
        places = layout(plan, tmp)
        results = [_write_overlay(ov, places[ov.role]) for ov in plan.overlays]
        verify({ov.role: places[ov.role] for ov in plan.overlays})
        if occupied:
            if not same_tree(tmp, out):
                raise BadOutput(str(out), "--out must be a new or empty directory (or hold this very repair)")
            shutil.rmtree(tmp)
            for w in results:
                w.unchanged = True
        else:
            if out.exists():
                out.rmdir()
            os.rename(tmp, out)
    except OSError as e:  # disk full, permissions: one line, nothing left
        shutil.rmtree(tmp, ignore_errors=True)
        raise BadOutput(str(out), f"cannot write: {e.strerror or e}") from e
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    final = layout(plan, out)
    for w in results:
        w.path = final[w.overlay.role]
    return results


def _sibling_prefix(out: Path) -> str:
    return f".{out.name}.specguard-fix-"


def _remove_orphans(out: Path) -> None:
    """Remove the siblings of DIR whose fix process is gone (killed with SIGKILL: no
    handler ran); a sibling of a fix still running is left alone."""
    prefix = _sibling_prefix(out)
    try:
        names = [n for n in os.listdir(out.parent) if n.startswith(prefix)]
    except OSError:
        return
    for name in names:
        pid = name[len(prefix):]
        if pid.isdigit() and int(pid) != os.getpid() and not _running(int(pid)):
            shutil.rmtree(out.parent / name, ignore_errors=True)


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)  # signal 0: only asks whether the process exists
    except PermissionError:  # another user's
        return True
    except (OSError, OverflowError):  # gone (ESRCH), or a number no process can have
        return False
    return True


@contextmanager
def _sigterm_as_exit() -> Iterator[None]:
    """While writing, SIGTERM (``kill``, a CI timeout) exits through the cleanup like
    Ctrl-C does (exit 143) instead of leaving the sibling behind. Only where nobody
    set a handler already, and only in the main thread (the only one that may)."""
    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        yield
        return

    def terminated(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def same_tree(a: Path, b: Path) -> bool:
    """Same relative files with the same bytes (links to the same file count as equal)."""
    files_a = sorted(p.relative_to(a) for p in a.rglob("*") if not p.is_dir())
    files_b = sorted(p.relative_to(b) for p in b.rglob("*") if not p.is_dir())
    if files_a != files_b:
        return False
    for rel in files_a:
        x, y = (a / rel).resolve(), (b / rel).resolve()
        if x == y or (x.stat().st_ino == y.stat().st_ino and x.stat().st_dev == y.stat().st_dev):
            continue
        if x.stat().st_size != y.stat().st_size or not filecmp.cmp(x, y, shallow=False):
            return False
    return True


def _write_overlay(ov: Overlay, dest: Path) -> Written:
    dest.mkdir(parents=True)
    root = sh.local_root(ov.checkpoint)
    result = Written(ov, dest)
    modules = _modules(ov)
    rewritten = sorted({t.file for m in modules.values() for t in m.params.values()}
                       | {ov.checkpoint.tensors[n].file for n in ov.rename})
    for src in sorted(root.rglob("*")):
        rel = src.relative_to(root).as_posix()
        if src.is_dir() or ".git" in rel.split("/"):
            continue
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if rel in rewritten:
            entries = sh.plan_shard(ov.checkpoint, rel, modules, ov.rename)
            result.written[rel] = sh.write_shard(ov.checkpoint, rel, entries, target)
            result.replaced[rel] = src.stat().st_size
        elif rel == CONFIG and ov.config != dict(ov.checkpoint.config or {}):
            result.written[rel] = _json(target, ov.config)
        elif rel == HF_QUANT and ov.hf_quant_config is not None and \
                ov.hf_quant_config != dict(ov.checkpoint.hf_quant_config or {}):
            result.written[rel] = _json(target, ov.hf_quant_config)
        elif rel == INDEX and (rewritten or ov.index_add):
            result.written[rel] = _index(ov, src, target, modules)
        else:
            _link(src, target, result)
    return result


def _modules(ov: Overlay) -> dict[str, Module]:
    if not ov.reencode:
        return {}
    table = classify(ov.checkpoint)
    return {n: table[n] for n in ov.reencode}


def _json(path: Path, obj: dict) -> int:
    text = json.dumps(obj, indent=2) + "\n"
    path.write_text(text)
    return len(text.encode())


def _index(ov: Overlay, src: Path, target: Path, modules) -> int:
    """The index with each re-encoded module's scale gone, the draft tensors it never
    named added (``Overlay.index_add``) and sizes recomputed."""
    index = json.loads(src.read_text())
    dropped = {t.name for m in modules.values() for p, t in m.params.items() if p in ("scale", "weight_scale")}
    weight_map = {k: v for k, v in index["weight_map"].items() if k not in dropped} | ov.index_add
    total = 0
    for name in weight_map:
        t = ov.checkpoint.tensors[name]
        mod = modules.get(name.rsplit(".", 1)[0])
        total += t.numel * 2 * 2 if mod is not None and name.endswith(".weight") else t.nbytes
    index["weight_map"] = {ov.rename.get(k, k): v for k, v in weight_map.items()}
    index.setdefault("metadata", {})["total_size"] = total
    return _json(target, index)


def _link(src: Path, target: Path, result: Written) -> None:
    """A hard link to the file itself (an HF cache snapshot entry's blob); across
    filesystems a symlink to the source's entry of the same name, which the reader
    accepts as an overlay link (checkpoint/source.py ``_is_overlay_link``)."""
    try:
        os.link(src.resolve(), target)
        result.linked.append(str(target.name))
    except OSError:
        os.symlink(src.absolute(), target)
        result.symlinked.append(str(target.name))
