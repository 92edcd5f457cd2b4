"""Opening the checkpoint a command names (default: the embedded sample)."""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

from specguard.checkpoint.index import CONFIG, INDEX
from specguard.checkpoint.source import Checkpoint, open_checkpoint
from specguard.errors import LayoutError
from specguard.formats.table import ModuleTable
from specguard.layouts import GenericLayout, Role, layer_index, layout_for

_EXPERT_INDEX = re.compile(r"\.experts\.\d+(?=\.|$)")  # layouts/base.py
SHOW_PROGRESS_FROM = 8  # shards; fewer finish before a bar would draw


@contextmanager
def _progress_bar(label: str) -> Iterator[Callable[[int, int], None]]:
    """A transient bar on stderr, drawn only on a terminal (never into pipes or logs)."""
    bar: Any = None  # rich.progress is imported when a bar is drawn: piped output never needs it
    task = None

    def update(done: int, total: int) -> None:
        nonlocal bar, task
        if total < SHOW_PROGRESS_FROM or not sys.stderr.isatty():
            return
        if bar is None:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

            # a terminal's bar, never part of a kept audit's output (commands/replay.py)
            console = Console(file=getattr(sys.stderr, "unrecorded", sys.stderr))
            bar = Progress(TextColumn(label), BarColumn(), MofNCompleteColumn(), transient=True, console=console)
            bar.start()
            task = bar.add_task(label, total=total)
        bar.update(task, completed=done)

    try:
        yield update
    finally:
        if bar is not None:
            bar.stop()


def open_path(source: str | None, *, revision: str | None = None, remote: bool = False) -> Checkpoint:
    """Open ``source``, or the embedded sample when it is None."""
    if source is None:
        from specguard.factory import sample_checkpoint

        sample = sample_checkpoint()
        with _progress_bar("reading headers") as update:
            ckpt = open_checkpoint(sample, progress=update)
        return replace(ckpt, name=_home_relative(sample))  # as the README shows it, on every machine
    with _progress_bar("reading headers") as update:
        return open_checkpoint(source, revision=revision, remote=remote, progress=update)


def _home_relative(path: Path) -> str:
    """``~/.cache/specguard/...`` for a path under the home directory, else the path."""
    home = Path.home()
    return f"~/{path.relative_to(home)}" if path.is_relative_to(home) else str(path)


def drafter_beside(source: str | None) -> Path | None:
    """A separate drafter checkpoint in a folder beside ``source`` (`specguard factory s4`
    writes target/ and drafter/): a sibling named for a drafter, or one whose config.json
    names DSpark's target layers or an EAGLE architecture and whose index holds no main
    stack. None where there is none."""
    if source is None or not Path(source).is_dir():
        return None
    here = Path(source).resolve()
    for d in sorted(here.parent.iterdir()):
        if d != here and (d / CONFIG).is_file() and any(d.glob("*.safetensors")) and _is_drafter(d):
            return Path(source).parent / d.name
    return None


def _is_drafter(d: Path) -> bool:
    if "draft" in d.name.lower() or "eagle" in d.name.lower():
        return True
    try:
        cfg = json.loads((d / CONFIG).read_text())
        names = json.loads((d / INDEX).read_text())["weight_map"] if (d / INDEX).is_file() else None
    except (OSError, ValueError, KeyError, TypeError):
        return False
    if not isinstance(cfg, dict) or not isinstance(names, dict):
        return False
    says = "dspark_target_layer_ids" in cfg or any("eagle" in str(a).lower() for a in cfg.get("architectures") or ())
    return says and not any(n.startswith(("layers.", "model.layers.")) for n in names)


def open_source(args: argparse.Namespace) -> Checkpoint:
    return open_path(args.source, revision=args.revision, remote=args.remote)


def module_roles(table: ModuleTable) -> dict[str, Role]:
    """Role of every module (main / draft / embedding / head), from the layout rules.

    Without a config.json that says ``num_hidden_layers`` (a bare .safetensors
    file), roles come from the names alone: ``mtp.*`` is draft, every
    ``layers.N`` main.
    """
    try:
        layout = layout_for(dict(table.checkpoint.config or {}))
    except LayoutError:  # too little said, or implausible counts: roles from names alone
        deepest = max((layer_index(m.name) or 0 for m in table), default=0)
        layout = GenericLayout(deepest + 1)
    # Routed experts of one layer share a role (a layout places experts.N as experts.0):
    # one question per projection, not per expert (~10,000 of a DeepSeek's modules).
    by_generic: dict[str, Role] = {}
    roles: dict[str, Role] = {}
    for m in table:
        generic = _EXPERT_INDEX.sub(".experts.0", m.name)
        role = by_generic.get(generic)
        if role is None:
            role = by_generic[generic] = layout.role(generic)
        roles[m.name] = role
    return roles
