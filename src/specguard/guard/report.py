"""What the guard found: frozen dataclasses with a text form and a stable JSON form."""

from __future__ import annotations

import io
import json
from dataclasses import dataclass
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

NEVER_WRITTEN = "never_written"
PARTLY_WRITTEN = "partly_written"
NON_FINITE = "non_finite"
IMPLAUSIBLE_SCALE = "implausible_scale"
PROBLEMS = (NEVER_WRITTEN, PARTLY_WRITTEN, NON_FINITE, IMPLAUSIBLE_SCALE)

REPORT_FORMAT = 1  # bump when the JSON layout changes

Ranges = tuple[tuple[int, int], ...]  # half-open [start, stop) index ranges


def ranges_from_flags(flags: list[bool] | tuple[bool, ...]) -> Ranges:
    """[F, T, T, F, T] -> ((1, 3), (4, 5))."""
    out: list[tuple[int, int]] = []
    start = None
    for i, f in enumerate(flags):
        if f and start is None:
            start = i
        elif not f and start is not None:
            out.append((start, i))
            start = None
    if start is not None:
        out.append((start, len(flags)))
    return tuple(out)


def format_ranges(r: Ranges, limit: int = 6) -> str:
    parts = [f"{a}" if b == a + 1 else f"{a}-{b - 1}" for a, b in r[:limit]]
    if len(r) > limit:
        parts.append(f"+{len(r) - limit} more")
    return ",".join(parts)


def _dim_labels(ndim: int) -> tuple[str, ...]:
    # 3-D is the fused-MoE layout [expert, out rows, in cols]; 2-D a linear.
    return {1: ("index",), 2: ("rows", "cols"), 3: ("experts", "rows", "cols")}.get(
        ndim, tuple(f"dim{i}" for i in range(ndim))
    )


@dataclass(frozen=True)
class GuardFinding:
    """One problem with one tensor.

    ``where`` holds, per dimension, the index ranges that contain at least one
    affected element (the projection of the affected set on that dimension):
    for ``experts 4-7 · rows 0-63 · cols 4-7`` every affected element has its
    expert index in 4..7, its row in 0..63 and its column in 4..7.
    """

    name: str
    problem: str
    dtype: str
    shape: tuple[int, ...]
    count: int  # affected elements
    total: int  # elements in the tensor
    where: tuple[Ranges, ...] = ()
    detail: str = ""

    def location(self) -> str:
        if not self.shape or self.count == self.total:
            return "all" if self.count else ""
        labels = _dim_labels(len(self.shape))
        parts = []
        for label, r, size in zip(labels, self.where, self.shape, strict=True):
            if r != ((0, size),):
                parts.append(f"{label} {format_ranges(r)}")
        return " · ".join(parts) or "every row and col has some"

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "problem": self.problem,
            "dtype": self.dtype,
            "shape": list(self.shape),
            "count": self.count,
            "total": self.total,
            "where": [[list(x) for x in r] for r in self.where],
            "detail": self.detail,
        }


@dataclass(frozen=True)
class LoadReport:
    """Everything a guarded load left unwritten, non-finite or implausible."""

    findings: tuple[GuardFinding, ...]
    checked: int  # tensors poisoned/tracked and checked
    skipped: tuple[tuple[str, str], ...] = ()  # (name, why) for tensors the guard cannot check
    notes: tuple[str, ...] = ()  # e.g. writes the recorder could not locate

    @property
    def ok(self) -> bool:
        return not self.findings

    def names(self, problem: str | None = None) -> tuple[str, ...]:
        """Sorted distinct tensor names, optionally of one problem kind."""
        return tuple(sorted({f.name for f in self.findings if problem in (None, f.problem)}))

    def by_problem(self) -> dict[str, tuple[GuardFinding, ...]]:
        return {p: tuple(f for f in self.findings if f.problem == p) for p in PROBLEMS}

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": REPORT_FORMAT,
            "ok": self.ok,
            "checked": self.checked,
            "findings": [f.to_dict() for f in self.findings],
            "skipped": [list(s) for s in self.skipped],
            "notes": list(self.notes),
        }

    def to_json(self, indent: int | None = 2) -> str:
        """Stable JSON: sorted findings, no addresses, timings or run-dependent values."""
        return json.dumps(self.to_dict(), indent=indent, sort_keys=True)

    def summary(self) -> str:
        checked = f"{self.checked} tensor{'' if self.checked == 1 else 's'} checked"
        if self.ok:
            return f"LoadGuard: {checked}, all written and finite"
        counts = {p: len(v) for p, v in self.by_problem().items() if v}
        what = ", ".join(f"{n} {p.replace('_', ' ')}" for p, n in counts.items())
        return f"LoadGuard: {checked}: {what}"

    def __rich__(self) -> Table:
        """The findings as a table (``specguard.terminal.print_table`` fits it to a terminal)."""
        table = Table(title=self.summary(), title_justify="left", show_lines=False)
        for col in ("tensor", "problem", "dtype", "shape", "affected", "where / detail"):
            table.add_column(col, overflow="fold")
        for f in self.findings:
            where = "; ".join(x for x in (f.location(), f.detail) if x)
            table.add_row(  # Text, not markup: a tensor named "[red]x" prints as named
                *map(Text, (f.name, f.problem.replace("_", " "), f.dtype,
                            "×".join(map(str, f.shape)) or "scalar", f"{f.count}/{f.total}", where)),
            )
        return table

    def __str__(self) -> str:
        if self.ok:
            return self.summary()
        buf = io.StringIO()
        longest = max(len(f.name) for f in self.findings)
        width = min(260, max(100, longest + 110))  # names unbroken, table still bounded
        Console(file=buf, width=width, no_color=True, highlight=False).print(self)
        return buf.getvalue().rstrip()
