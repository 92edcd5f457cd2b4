"""`specguard inspect`: what every module is stored as, from headers (and, where a
header fits several formats, the few bytes that decide it: formats/settle.py)."""

from __future__ import annotations

import argparse
from collections import Counter
from collections.abc import Mapping
from typing import cast

from rich.console import Console
from rich.table import Table

from specguard.checkpoint.source import Checkpoint
from specguard.commands.output import human_bytes, write_json
from specguard.commands.sources import module_roles, open_source
from specguard.declared import ConfigError, parse_declared
from specguard.errors import SpecguardError
from specguard.formats.scheme import Scheme
from specguard.formats.settle import stored_schemes as stored_schemes_of
from specguard.formats.table import Module, ModuleTable, classify
from specguard.layouts import Role
from specguard.layouts.roles import RoleName, role_label
from specguard.layouts.runs import Run, group_runs
from specguard.terminal import console, escape, print_table


def run_inspect(args: argparse.Namespace) -> int:
    ckpt = open_source(args)
    table = classify(ckpt)
    roles = module_roles(table)
    stored = stored_schemes(table)
    if args.json:
        records = tensor_records(table, stored) if args.tensors else module_records(table, roles, stored)
        write_json(ckpt.name, records)
        return 0
    if args.tensors:
        render_tensors(table, console(), stored)
        return 0
    render(table, roles, console(), stored)
    return 0


def stored_schemes(table: ModuleTable) -> dict[str, Scheme]:
    """Each module's stored scheme as route shows it (formats/settle.py ``stored_scheme``):
    U8 scales settled by their first 4 KiB, a shared FP8 convention named by the config."""
    ckpt = table.checkpoint
    try:
        hf = dict(ckpt.hf_quant_config) if ckpt.hf_quant_config else None
        stack: str | None = parse_declared(dict(ckpt.config or {}), hf).stack
    except ConfigError:  # inspect reads headers; a bad claim is route's and lint's to report
        stack = None
    return _as_route_settles(table, stored_schemes_of(ckpt, table, stack))


def _as_route_settles(table: ModuleTable, stored: dict[str, Scheme]) -> dict[str, Scheme]:
    """A header that fits several schemes (a 128x128 FP8 weight with a [1, 1] scale: one
    tensor scale, or one 128x128 block) is shown as route settles it: the reading the config
    claims, else the one the engine builds (resolve.py ``_make_route``)."""
    several = [name for name, sc in stored.items() if sc.readings]
    if not several:
        return stored
    from specguard.resolve import Resolver  # here: only a header that fits several schemes needs routing

    try:
        routes = Resolver(table.checkpoint, table=table).routes()
    except (SpecguardError, ValueError):  # no config to route by: the header's first reading
        return stored
    settled = {n: rt.stored for rt in routes if rt.stored is not None for n in rt.checkpoint_names}
    for name in several:
        by_route = settled.get(name)
        if by_route is not None and stored[name].fits(by_route.format):
            stored[name] = stored[name].reading(by_route.format)
    return stored


def render_tensors(table: ModuleTable, out: Console, stored: Mapping[str, Scheme] | None = None) -> None:
    """``--tensors``: one row per tensor, with the module and format it belongs to."""
    t = Table(title=f"{escape(table.checkpoint.name)} — tensors", title_justify="left")
    for col in ("tensor", "dtype", "shape", "module", "format", "file"):
        t.add_column(col)
    for r in tensor_records(table, stored):
        t.add_row(*(escape(str(c)) for c in (r["tensor"], r["dtype"], "×".join(map(str, r["shape"])) or "scalar",
                                             r["module"], r["format"], r["file"])))
    print_table(out, t)


def module_records(table: ModuleTable, roles: Mapping[str, Role],
                   stored: Mapping[str, Scheme] | None = None) -> list[dict]:
    """One record per module (schema documented in docs/json.md)."""
    out = []
    for m in table:
        sc = stored[m.name] if stored else m.scheme
        out.append({
            "module": m.name,
            "role": roles[m.name].name,
            "draft_kind": roles[m.name].draft_kind,
            "format": sc.format,
            "convention": sc.convention,
            "group_size": sc.group_size,
            "block": list(sc.block) if sc.block else None,
            "scale_dtype": sc.scale_dtype,
            "weight_dtype": sc.weight_dtype,
            "reason": sc.reason,
            "missing": list(m.missing),
            "bytes": m.nbytes,
            "params": {p: {"dtype": t.dtype, "shape": list(t.shape)} for p, t in m.params.items()},
        })
    return out


def tensor_records(table: ModuleTable, stored: Mapping[str, Scheme] | None = None) -> list[dict]:
    """One record per tensor, with the module and parameter it belongs to."""
    return [
        {
            "tensor": t.name, "module": m.name, "param": p, "dtype": t.dtype, "shape": list(t.shape),
            "file": t.file, "offsets": list(t.offsets), "format": (stored[m.name] if stored else m.scheme).format,
        }
        for m in table
        for p, t in m.params.items()
    ]


def render(table: ModuleTable, roles: Mapping[str, Role], console: Console,
           stored: Mapping[str, Scheme] | None = None) -> None:
    ckpt: Checkpoint = table.checkpoint
    stored = stored or {m.name: m.scheme for m in table}
    spelled: dict[tuple[int, int], tuple[str, str, str]] = {}
    runs = group_runs((m.name, (_label(stored[m.name], roles[m.name], spelled), m.missing), m) for m in table)
    title = f"{escape(ckpt.name)} — {len(ckpt.tensors):,} tensors in {len(ckpt.files)} file(s)"
    if ckpt.outside_index:  # read all the same: the stored truth (lint SG303/SG601 say what loaders do)
        files = sorted({ckpt.tensors[n].file for n in ckpt.outside_index})
        title += f"; {len(ckpt.outside_index):,} in {escape(', '.join(files))}, which the index never names"
    t = Table(title=title, title_justify="left")
    t.add_column("modules")
    t.add_column("stored as")
    t.add_column("role")
    t.add_column("count", justify="right")
    t.add_column("size", justify="right")
    sizes = [sum(m.nbytes for m in cast(list[Module], run.items)) for run in runs]
    for run, size in zip(runs, sizes, strict=True):
        (label, role, fmt), missing = cast(tuple[tuple[str, str, str], tuple[str, ...]], run.key)
        label = escape(label)
        mods = cast(list[Module], run.items)
        if missing:
            label += f" [red]missing {escape(','.join(missing))}[/]"
        reason = stored[mods[0].name].reason
        if reason and fmt in ("unknown", "ambiguous"):
            label += f" [yellow]({escape(reason)})[/]"
        t.add_row(escape(run.label()), label, escape(role), str(len(mods)), human_bytes(size))
    print_table(console, t)
    print_table(console, _totals(runs, sizes))


def _label(scheme: Scheme, role: Role, spelled: dict[tuple[int, int], tuple[str, str, str]]) -> tuple[str, str, str]:
    """A module's (stored scheme, role, format) as shown, each distinct pair spelled once."""
    key = (id(scheme), id(role))  # both live as long as the mappings: ids stay unique
    shown = spelled.get(key)
    if shown is None:
        shown = spelled[key] = (scheme.short(), role_label(role), str(scheme.format))
    return shown


def _totals(runs: list[Run], run_bytes: list[int]) -> Table:
    """Modules and bytes per (format, role): a run's modules share both (its key)."""
    t = Table(title="totals", title_justify="left")
    t.add_column("format")
    counts: Counter[tuple[str, str]] = Counter()
    sizes: Counter[tuple[str, str]] = Counter()
    for run, size in zip(runs, run_bytes, strict=True):
        (_, role, fmt), _ = cast(tuple[tuple[str, str, str], tuple[str, ...]], run.key)
        counts[(fmt, role)] += len(run.items)
        sizes[(fmt, role)] += size
    role_names = sorted({r for _, r in counts}, key=_role_order)
    for r in role_names:
        t.add_column(escape(r), justify="right")
    for fmt in sorted({f for f, _ in counts}):
        cells = [
            f"{counts[(fmt, r)]} · {human_bytes(sizes[(fmt, r)])}" if counts[(fmt, r)] else "" for r in role_names
        ]
        t.add_row(escape(fmt), *cells)
    return t


def _role_order(label: str) -> tuple[int, str]:
    order = tuple(RoleName)
    first = label.split(" ")[0]
    return (order.index(first) if first in order else len(order), label)
