"""Run-length grouping of module names: 43 layers x 256 experts x 3 projections
collapse into one row ``layers 0-42 · ffn.experts 0-255 · w1,w2,w3``.

Names are split on dots; integer parts become slots. Items with the same
template (the name minus its last part, integers abstracted) and the same
caller-supplied key share a row; the row lists each slot's integers as ranges
and the distinct last parts.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field


@dataclass
class Run:
    """One row: a name template, the integers seen per slot, the leaves, the items."""

    template: tuple[str, ...]
    key: Hashable
    slots: list[set[int]]
    leaves: list[str] = field(default_factory=list)
    items: list[object] = field(default_factory=list)

    def label(self) -> str:
        """``layers 0-42 · ffn.experts 0-255 · w1,w2,w3``."""
        words: list[str] = []
        pending: list[str] = []
        slot = 0
        for part in self.template:
            if part == "#":
                words.append(f"{'.'.join(pending)} {ranges(self.slots[slot])}".strip())
                pending = []
                slot += 1
            else:
                pending.append(part)
        if pending:
            words.append(".".join(pending))
        leaves = ",".join(self.leaves)
        if leaves:
            words.append(leaves)
        return " · ".join(w for w in words if w)


def ranges(values: Iterable[int]) -> str:
    """``{0,1,2,5,7,8}`` -> ``0-2,5,7-8``."""
    out: list[str] = []
    vals = sorted(values)
    i = 0
    while i < len(vals):
        j = i
        while j + 1 < len(vals) and vals[j + 1] == vals[j] + 1:
            j += 1
        out.append(str(vals[i]) if i == j else f"{vals[i]}-{vals[j]}")
        i = j + 1
    return ",".join(out)


def _template(stem: str) -> tuple[tuple[str, ...], list[int]]:
    """``layers.3.ffn.experts.7`` -> (``layers # ffn experts #``, [3, 7])."""
    parts = stem.split(".")
    return tuple("#" if p.isdigit() else p for p in parts), [int(p) for p in parts if p.isdigit()]


def group_runs(items: Iterable[tuple[str, Hashable, object]]) -> list[Run]:
    """Group ``(name, key, item)`` triples into rows, in order of first appearance."""
    runs: dict[tuple[tuple[str, ...], Hashable], Run] = {}
    # A module's projections (w1, w2, w3) share their stem: its split and its slots' integers count once.
    by_stem: dict[tuple[str, Hashable], Run] = {}
    parents: dict[tuple[str, Hashable], Run] = {}  # see _run_of
    run: Run | None = None
    last: tuple[str, Hashable] | None = None  # the previous item's (stem, key): a module's projections follow it
    for name, key, item in items:
        stem, dot, leaf = name.rpartition(".")
        if not dot or leaf.isdigit():  # a name without a leaf: `layers.3`, `embed`
            stem, leaf = name, ""
        if run is None or last != (stem, key):
            last = (stem, key)
            run = by_stem.get(last)
            if run is None:
                run = by_stem[last] = _run_of(stem, key, runs, parents)
        if leaf and leaf not in run.leaves:
            run.leaves.append(leaf)
        run.items.append(item)
    return list(runs.values())


def _run_of(stem: str, key: Hashable, runs: dict[tuple[tuple[str, ...], Hashable], Run],
            parents: dict[tuple[str, Hashable], Run]) -> Run:
    """The run a stem not seen before joins, its integers added. The stems of a layer's 256
    experts share their parent (``layers.3.ffn.experts``), so their run and every slot but
    the last: the parent's split is done once."""
    parent, dot, last = stem.rpartition(".")
    if not (dot and last.isdigit()):
        return _join(stem, key, runs)
    run = parents.get((parent, key))
    if run is None:
        run = parents[(parent, key)] = _join(stem, key, runs)
    else:
        run.slots[-1].add(int(last))
    return run


def _join(stem: str, key: Hashable, runs: dict[tuple[tuple[str, ...], Hashable], Run]) -> Run:
    template, numbers = _template(stem)
    run = runs.get((template, key))
    if run is None:
        run = runs[(template, key)] = Run(template, key, [set() for _ in numbers])
    for slot, n in zip(run.slots, numbers, strict=True):
        slot.add(n)
    return run


def describe(names: Iterable[str], limit: int = 4) -> str:
    """Run-length grouped names: ``mtp 0 · ffn.experts 0-3 · w1,w2,w3``. Every label
    names exactly the modules it stands for: modules are grouped by parent, and parents
    share a label only when they hold the same leaves (``layers 1-3 · mlp · experts,gate``
    never stands for a layer without a gate); ``(+N more)`` counts the labels not shown."""
    leaves: dict[str, list[str]] = {}
    for n in dict.fromkeys(names):
        parent, _, leaf = n.rpartition(".")
        if not parent or leaf.isdigit():
            parent, leaf = n, ""
        leaves.setdefault(parent, []).append(leaf)
    runs = group_runs((f"{parent}.{ls[0]}" if ls[0] else parent, tuple(ls), len(ls)) for parent, ls in leaves.items())
    for run in runs:  # a run's parents all hold the same leaves (its key)
        run.leaves = [leaf for leaf in run.key if leaf]  # type: ignore[attr-defined]
    labels = [run.label() for run in runs]
    more = f" (+{len(labels) - limit} more)" if len(labels) > limit else ""
    return "; ".join(labels[:limit]) + more
