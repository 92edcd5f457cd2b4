"""`specguard route`: one row per runtime module, what to build and whether the modelled engine gets it right."""

from __future__ import annotations

import argparse
import sys
from typing import cast

from rich.console import Console
from rich.table import Table

from specguard.commands.output import write_json
from specguard.commands.sources import drafter_beside, open_path
from specguard.engines.vllm.v0_33 import ENGINE
from specguard.errors import UsageError
from specguard.formats.scheme import Scheme
from specguard.layouts.roles import role_label
from specguard.layouts.runs import group_runs
from specguard.resolve import MISROUTED, MISSING, OK, REFUSED, UNMATCHED, Resolver, Route, Verdict
from specguard.terminal import console, escape, print_table

_VERDICT_STYLE = {OK: "green", MISROUTED: "bold red", MISSING: "red", UNMATCHED: "yellow", REFUSED: "bold red"}


def resolvers(args: argparse.Namespace) -> list[Resolver]:
    """The target's resolver, plus the drafter's (routed by its own disk) with --draft."""
    if args.draft_method == "eagle" and not args.draft:
        raise UsageError("--draft-method eagle routes a separate EAGLE drafter: pass --draft SRC "
                         "(the drafter's checkpoint; SOURCE is the target's)")
    target = Resolver(open_path(args.source, revision=args.revision, remote=args.remote),
                      draft_method=args.draft_method if not args.draft else None, platform=args.platform,
                      own_draft=False if args.draft else None)  # a separate drafter replaces the stored draft
    out = [target]
    beside = None if args.draft else drafter_beside(args.source)
    if beside is not None:  # else a pair checked half reads as clean
        print(f"note: {beside} beside {args.source} looks like its separate drafter, which this run does not "
              f"check: pass --draft {beside} to check them together", file=sys.stderr)
    if args.draft:
        out.append(Resolver(open_path(args.draft, revision=args.revision, remote=args.remote),
                            draft_method=args.draft_method or "dspark", target=target, platform=args.platform))
    return out


def run_route(args: argparse.Namespace) -> int:
    rs = resolvers(args)
    routes = [(r, rt) for r in rs for rt in r.routes()]
    if args.json:
        write_json(rs[0].checkpoint.name, [route_record(r, rt) for r, rt in routes])
    else:
        render([rt for _, rt in routes], console(), title=" + ".join(r.checkpoint.name for r in rs),
               show_ok=args.all)
    return 1 if any(rt.verdict != OK for _, rt in routes) else 0


def route_record(r: Resolver, rt: Route) -> dict:
    return {
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


def render(routes: list[Route], out: Console, *, title: str, show_ok: bool = True) -> None:
    def key(rt: Route) -> tuple:
        vllm = rt.vllm.method if rt.vllm else "—"
        return (role_label(rt.role), _short(rt.stored), _short(rt.declared.scheme) if rt.declared else "—",
                vllm, rt.verdict)

    shown = [rt for rt in routes if show_ok or rt.verdict != OK or rt.role.is_draft]
    t = Table(title=f"{escape(title)} — {len(routes)} runtime modules", title_justify="left")
    for col in ("runtime prefix", "role", "stored as", "declared as", f"{ENGINE} builds", "verdict"):
        t.add_column(col)
    for run in group_runs((rt.prefix, key(rt), rt) for rt in shown):
        role, stored, declared, vllm, verdict = cast(tuple[str, str, str, str, Verdict], run.key)
        t.add_row(*(escape(c) for c in (run.label(), role, stored, declared, vllm)),
                  f"[{_VERDICT_STYLE[verdict]}]{verdict}[/]")
    print_table(out, t)
    counts = {v: sum(1 for rt in routes if rt.verdict == v) for v in (OK, MISROUTED, MISSING, UNMATCHED, REFUSED)}
    hidden = len(routes) - len(shown)
    note = f" ({hidden} main-stack modules that route ok not shown; --all lists them)" if hidden else ""
    out.print(" · ".join(f"{n} {v}" for v, n in counts.items() if n) + note, highlight=False)
    for rt in routes:
        if rt.verdict != OK:
            out.print(f"[{_VERDICT_STYLE[rt.verdict]}]{rt.verdict}[/] {escape(rt.prefix)}: {escape(rt.reason)}",
                      highlight=False)
