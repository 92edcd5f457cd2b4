"""`specguard route`: one row per runtime module, what to build and whether the modelled engine gets it right."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable
from typing import cast

from rich.console import Console
from rich.table import Table

from specguard.commands.output import ROUTE_SCHEMA_VERSION, write_json
from specguard.commands.sources import drafter_beside, open_path
from specguard.engines.registry import installed as installed_engine
from specguard.engines.registry import keys as engine_keys
from specguard.errors import UsageError
from specguard.formats.scheme import Scheme
from specguard.layouts.roles import role_label
from specguard.layouts.runs import group_runs
from specguard.resolve import MISROUTED, MISSING, OK, REFUSED, UNKNOWN, Resolver, Route, Verdict
from specguard.terminal import console, escape, print_table
from specguard.usage import EXIT_UNVOUCHED, reader_gone

_VERDICT_STYLE = {OK: "green", MISROUTED: "bold red", MISSING: "red", REFUSED: "bold red", UNKNOWN: "magenta"}


def resolvers(args: argparse.Namespace, engine: str | None = None) -> list[Resolver]:
    """The target's resolver, plus the drafter's (routed by its own disk) with --draft."""
    if args.draft_method == "eagle" and not args.draft:
        raise UsageError("--draft-method eagle routes a separate EAGLE drafter: pass --draft SRC "
                         "(the drafter's checkpoint; SOURCE is the target's)")
    engine = engine or getattr(args, "engine", None) or installed_engine()
    target = Resolver(open_path(args.source, revision=args.revision, remote=args.remote),
                      draft_method=args.draft_method if not args.draft else None, platform=args.platform,
                      own_draft=False if args.draft else None,  # a separate drafter replaces the stored draft
                      engine=engine)
    out = [target]
    beside = None if args.draft else drafter_beside(args.source)
    if beside is not None:  # else a pair checked half reads as clean
        print(f"note: {beside} beside {args.source} looks like its separate drafter, which this run does not "
              f"check: pass --draft {beside} to check them together", file=sys.stderr)
    if args.draft:
        out.append(Resolver(open_path(args.draft, revision=args.revision, remote=args.remote),
                            draft_method=args.draft_method or "dspark", target=target, platform=args.platform,
                            engine=engine))
    return out


def run_route(args: argparse.Namespace) -> int:
    if getattr(args, "engine", None) == "all":
        return run_matrix(args)
    rs = resolvers(args)
    routes = [(r, rt) for r in rs for rt in r.routes()]
    code = exit_code(rt.verdict for _, rt in routes)
    try:
        if args.json:
            write_json(rs[0].checkpoint.name, [route_record(r, rt) for r, rt in routes], ROUTE_SCHEMA_VERSION)
        else:
            render([rt for _, rt in routes], console(), title=" + ".join(r.checkpoint.name for r in rs),
                   show_ok=args.all, engine=rs[0].vllm.name)
        sys.stdout.flush()
    except BrokenPipeError:  # `specguard route | head -1`: the answer stands
        return reader_gone(code)
    return code


def exit_code(verdicts: Iterable[Verdict]) -> int:
    """1 where any module is misrouted, missing or refused; else 3 (could not vouch) where one
    is unknown; else 0. The same over one engine's routes or every engine's (``--engine all``)."""
    seen = set(verdicts) - {OK}
    return 1 if seen - {UNKNOWN} else EXIT_UNVOUCHED if seen else 0


def run_matrix(args: argparse.Namespace) -> int:
    """``--engine all``: every modelled engine's build and verdict per module, side by side."""
    by_engine = {key: [(r, rt) for r in resolvers(args, key) for rt in r.routes()] for key in engine_keys()}
    code = exit_code(rt.verdict for routes in by_engine.values() for _, rt in routes)
    try:
        if args.json:
            first = next(iter(by_engine.values()))
            write_json(first[0][0].checkpoint.name if first else args.source,
                       [route_record(r, rt) for routes in by_engine.values() for r, rt in routes],
                       ROUTE_SCHEMA_VERSION)
        else:
            render_matrix(by_engine, console(), show_ok=args.all)
        sys.stdout.flush()
    except BrokenPipeError:  # `specguard route --engine all | head -1`: the answer stands
        return reader_gone(code)
    return code


def render_matrix(by_engine: dict[str, list[tuple[Resolver, Route]]], out: Console, *, show_ok: bool) -> None:
    """One row per run of runtime modules: what is stored, then per engine the format it builds
    and its verdict; a footer names the modules where the engines disagree."""
    keys = list(by_engine)
    cells: dict[str, list[Route]] = {}
    for engine in keys:
        for _, rt in by_engine[engine]:  # joined by what is stored: engines name one module differently
            cells.setdefault(rt.checkpoint_names[0] if rt.checkpoint_names else rt.prefix, []).append(rt)
    rows = [(rts[0].prefix, rts) for rts in cells.values() if len(rts) == len(keys)]

    def cell(rt: Route) -> str:
        if rt.vllm is not None and rt.vllm.method == "not built":  # e.g. a NextN head the target's serves
            return "not built"
        built = rt.vllm.scheme.format if rt.vllm else "—"
        return f"{built} {rt.verdict}"

    def row_key(rts: list[Route]) -> tuple[str, ...]:
        return (role_label(rts[0].role), _short_format(rts[0].stored), *(cell(rt) for rt in rts))

    shown = [it for it in rows if show_ok or it[1][0].role.is_draft or any(rt.verdict != OK for rt in it[1])]
    t = Table(title=f"{len(rows)} runtime modules, {len(keys)} engines", title_justify="left")
    for col in ("runtime prefix", "role", "stored", *keys):
        t.add_column(col)
    for run in group_runs((prefix, row_key(rts), rts) for prefix, rts in shown):
        t.add_row(escape(run.label()), *(escape(str(c)) for c in cast(tuple[str, ...], run.key)))
    print_table(out, t)
    differ = [prefix for prefix, rts in rows if len({(cell(rt)) for rt in rts}) > 1]
    for k in keys:
        n = {v: sum(1 for _, rt in by_engine[k] if rt.verdict == v) for v in Verdict}
        out.print(f"{k}: " + " · ".join(f"{c} {v}" for v, c in n.items() if c), highlight=False)
    out.print(f"the engines differ on {len(differ)} module(s)" + (f": {escape(differ[0])} ..." if differ else ""),
              highlight=False)


def _short_format(sc: Scheme | None) -> str:
    return str(sc.format) if sc is not None else "—"


def route_record(r: Resolver, rt: Route) -> dict:
    return {
        "engine": r.engine,
        "checkpoint": r.checkpoint.name,
        "runtime_prefix": rt.prefix,
        "role": rt.role.name,
        "draft_kind": rt.role.draft_kind,
        "layer": rt.role.layer,
        "kind": rt.kind,
        "stored": _scheme_dict(rt.stored),
        "declared": _scheme_dict(rt.declared.scheme) if rt.declared else None,
        "declared_by": rt.declared.source if rt.declared else None,
        "build": _scheme_dict(rt.build),
        "vllm_builds": {"method": rt.vllm.method, **_scheme_fields(rt.vllm.scheme), "rule": rt.vllm.reason}
        if rt.vllm else None,
        "verdict": rt.verdict,
        "reason": rt.reason,
        "missing": list(rt.missing),
        "unmatched_patterns": list(rt.unmatched),
        "checkpoint_names": list(rt.checkpoint_names),
    }


def _scheme_dict(sc: Scheme | None) -> dict | None:
    return None if sc is None else _scheme_fields(sc)


def _scheme_fields(sc: Scheme) -> dict:
    return {"format": sc.format, "convention": sc.convention, "group_size": sc.group_size,
            "block": list(sc.block) if sc.block else None, "scale_dtype": sc.scale_dtype}


def _short(sc: Scheme | None) -> str:
    return sc.short() if sc is not None else "—"


def render(routes: list[Route], out: Console, *, title: str, show_ok: bool = True, engine: str) -> None:
    def key(rt: Route) -> tuple:
        vllm = rt.vllm.method if rt.vllm else "—"
        return (role_label(rt.role), _short(rt.stored), _short(rt.declared.scheme) if rt.declared else "—",
                vllm, rt.verdict)

    shown = [rt for rt in routes if show_ok or rt.verdict != OK or rt.role.is_draft]
    t = Table(title=f"{escape(title)} — {len(routes)} runtime modules", title_justify="left")
    for col in ("runtime prefix", "role", "stored as", "declared as", f"{engine} builds", "verdict"):
        t.add_column(col)
    for run in group_runs((rt.prefix, key(rt), rt) for rt in shown):
        role, stored, declared, vllm, verdict = cast(tuple[str, str, str, str, Verdict], run.key)
        t.add_row(*(escape(c) for c in (run.label(), role, stored, declared, vllm)),
                  f"[{_VERDICT_STYLE[verdict]}]{verdict}[/]")
    print_table(out, t)
    counts = {v: sum(1 for rt in routes if rt.verdict == v) for v in Verdict}
    hidden = len(routes) - len(shown)
    note = f" ({hidden} main-stack modules that route ok not shown; --all lists them)" if hidden else ""
    out.print(" · ".join(f"{n} {v}" for v, n in counts.items() if n) + note, highlight=False)
    for rt in routes:
        if rt.verdict != OK:
            out.print(f"[{_VERDICT_STYLE[rt.verdict]}]{rt.verdict}[/] {escape(rt.prefix)}: {escape(rt.reason)}",
                      highlight=False)
