"""`specguard report`: one self-contained HTML page showing a checkpoint at a glance.

The page holds a summary (verdict per engine, lint's exit code, bytes per stored
format), a module map (one row per layer, one column per module kind, each cell
coloured by stored format and marked where the engine builds something else),
the findings with their rule pages, and the config change `specguard fix` would
write. Everything is inlined (no network, no external scripts or fonts): it
opens from disk and from a CI artifact store alike.

The page is built from the same routes, findings and repair plan the other
commands print; it computes nothing of its own but the grouping into cells.
"""

from __future__ import annotations

import argparse
import html
import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from specguard._version import __version__
from specguard.commands.lint import exit_code as lint_exit_code
from specguard.commands.output import human_bytes
from specguard.commands.route import resolvers as open_resolvers
from specguard.commands.route import route_record
from specguard.errors import SpecguardError, UsageError
from specguard.layouts.roles import EMBEDDING_KIND, HEAD_KIND, NORM, ROUTED_EXPERTS, role_label
from specguard.layouts.runs import group_runs
from specguard.lint import LintResult, lint
from specguard.lint.registry import RULES, rule_doc
from specguard.resolve import OK, UNKNOWN, Resolver, Route

REPORT_SCHEMA = 1

# Module-map columns, in display order: (key, heading). A column shows only when a cell has it.
COLUMNS = (
    ("attention", "attention"),
    ("router", "router"),
    ("experts", "experts"),
    ("shared", "shared experts"),
    ("mlp", "dense MLP"),
    ("norms", "norms"),
    ("draft_only", "draft-only"),
    ("embedding", "embedding"),
    ("head", "head"),
    ("other", "other"),
)

# Verdict marks: a glyph and a word, so no mark depends on colour alone.
MARKS = {"misrouted": "✕", "missing": "!", "unmatched pattern": "?", "refused": "⊘", "unknown": "?"}


@dataclass
class EngineView:
    """One modelled engine's answer for the checkpoint: its routes and lint result."""

    name: str
    resolvers: list[Resolver]
    lint: LintResult
    routes: list[tuple[Resolver, Route]] = field(default_factory=list)


def run_report(args: argparse.Namespace) -> int:
    out = Path(args.output) if args.output else Path("specguard-report.html")
    _check_writable(out)
    views = []
    for key in _engine_keys(args):
        rs = open_resolvers(args, key)
        view = EngineView(_engine_name(rs[0]), rs, lint(rs))
        view.routes = [(r, rt) for r in rs for rt in r.routes()]
        views.append(view)
    page = render_page(build_report(views, fix=_fix_section(args, views[0].resolvers), fail_on=args.fail_on))
    _write(out, page)
    print(f"wrote {out} ({_size(len(page.encode()))}): {_summary_line(views, args.fail_on)}")
    return 0


def _engine_keys(args: argparse.Namespace) -> list[str]:
    """``--engine all``: every modelled engine; else the one chosen (default: the installed one)."""
    from specguard.engines.registry import installed, keys

    choice = getattr(args, "engine", None)
    return list(keys()) if choice == "all" else [choice or installed()]


def _engine_name(r: Resolver) -> str:
    return f"{r.vllm.name} on {r.platform}"


def _check_writable(out: Path) -> None:
    """Refuse a bad -o before any work: a directory, or a parent that is not a directory."""
    if out.is_dir():
        raise UsageError(f"{out}: is a directory; -o names the HTML file to write")
    parent = out.parent if str(out.parent) else Path(".")
    if not parent.is_dir():
        raise UsageError(f"{out}: {parent} is not a directory")


def _write(out: Path, page: str) -> None:
    """Write beside the target and rename: an interrupted run leaves no half page."""
    tmp = out.with_name(f".{out.name}.specguard-tmp")
    try:
        tmp.write_text(page, encoding="utf-8")
        tmp.replace(out)
    finally:
        tmp.unlink(missing_ok=True)


def _size(n: int) -> str:
    return f"{n / 1024:.1f} KB" if n < 1024 * 1024 else f"{n / 1024 / 1024:.2f} MB"


# -- the fix the page shows ------------------------------------------------------------------------


def _fix_section(args: argparse.Namespace, rs: list[Resolver]) -> dict:
    """The config change `specguard fix --platform P --diff` prints, or why there is none."""
    from specguard.repair.diff import config_diff
    from specguard.repair.plan import plan_for

    target = rs[0].checkpoint
    command = f"specguard fix {target.name} --platform {args.platform} --out DIR"
    try:
        plan = plan_for([(args.platform, rs)])  # `fix`'s planner on the routes already made: no second pass
    except SpecguardError as e:
        return {"state": "unrepairable", "command": command, "why": str(e)}
    if plan.clean:
        return {"state": "clean", "command": command, "why": f"every module routes as stored on {args.platform}"}
    reencode = sum(len(ov.reencode) for ov in plan.overlays)
    return {"state": "repair", "command": command, "diff": config_diff(plan, None),
            "reencode": reencode}


# -- the data behind the page ----------------------------------------------------------------------


def column_of(rt: Route, main_locals: frozenset[str]) -> str:
    """The module-map column of a runtime module, from its layer class and its name in the layer."""
    local = _local_name(rt.prefix)
    leaf = local.rsplit(".", 1)[-1]
    if rt.kind == EMBEDDING_KIND:
        return "embedding"
    if rt.kind == HEAD_KIND:
        return "head"
    if rt.kind == ROUTED_EXPERTS:
        return "experts"
    if "shared_expert" in local:
        return "shared"
    if rt.role.is_draft and local not in main_locals:
        return "draft_only"  # e_proj, h_proj, enorm, shared_head: what only the draft has
    if rt.kind == NORM or leaf.endswith("norm"):
        return "norms"
    if leaf in ("gate", "router") or local.endswith(("mlp.gate", "ffn.gate")):
        return "router"
    if any(a in local.split(".", 1)[0] for a in ("attn", "attention", "mixer", "linear_attn")):
        return "attention"
    if local.split(".", 1)[0] in ("mlp", "ffn", "feed_forward", "block_sparse_moe"):
        return "mlp"
    return "other"


def _local_name(prefix: str) -> str:
    """``model.layers.43.ffn.experts`` -> ``ffn.experts``; a prefix outside layers stays whole."""
    parts = prefix.split(".")
    for i, p in enumerate(parts[:-1]):
        if p.isdigit() and i > 0 and parts[i - 1] in ("layers", "h", "blocks", "layer", "mtp", "decoder"):
            return ".".join(parts[i + 1:])
    return prefix


def _names(names: list[str], limit: int = 6) -> str:
    """Checkpoint names run-length grouped (``mtp 0 · ffn.experts 0-3 · w1,w2,w3``), as the CLI shows them."""
    labels = [run.label() for run in group_runs((n, None, n) for n in names)]
    more = f" (+{len(labels) - limit} more)" if len(labels) > limit else ""
    return "; ".join(labels[:limit]) + more


def _row_of(rt: Route, checkpoint: str, n_checkpoints: int) -> tuple[int, int, str]:
    """(group, order, label): main layers, then draft layers, then what sits outside layers."""
    role, layer = rt.role, rt.role.layer
    where = f" · {checkpoint}" if n_checkpoints > 1 and rt.role.is_draft else ""
    if layer is None:
        return (2, 0, "embedding · head · final norm")
    if role.is_draft:
        idx = f" {role.draft_index}" if role.draft_index is not None else ""
        return (1, layer, f"{role_label(role)}{idx} (layer {layer}){where}")
    return (0, layer, f"layer {layer}")


def _scheme_text(sc: dict | None) -> str:
    if not sc:
        return "nothing stored"
    bits = [sc["convention"]] if sc.get("convention") not in (None, "plain") else []
    if sc.get("scale_dtype"):
        bits.append(str(sc["scale_dtype"]).lower().replace("f8_", ""))
    if sc.get("group_size"):
        bits.append(f"g{sc['group_size']}")
    if sc.get("block"):
        bits.append("x".join(map(str, sc["block"])))
    return sc["format"] + (f" ({', '.join(bits)})" if bits else "")


def build_report(views: Sequence[EngineView], *, fix: dict, fail_on: str = "warning") -> dict:
    """Everything the page shows, as plain data (also what the page's script reads)."""
    first = views[0]
    names = [r.checkpoint.name for r in first.resolvers]
    routes: list[dict] = []
    by_key: dict[tuple[str, str], int] = {}
    for e, view in enumerate(views):
        for r, rt in view.routes:
            # one module, whatever each engine calls it (SGLang: model.decoder.*), joined by what is stored
            key = (r.checkpoint.name, rt.checkpoint_names[0] if rt.checkpoint_names else rt.prefix)
            rec = route_record(r, rt)
            if key not in by_key:
                by_key[key] = len(routes)
                routes.append({"prefix": rt.prefix, "checkpoint": r.checkpoint.name, "role": str(rt.role),
                               "stored": _scheme_text(rec["stored"]),
                               "format": rec["stored"]["format"] if rec["stored"] else "none",
                               "declared": _scheme_text(rec["declared"]) if rec["declared"] else "—",
                               "declared_by": rec["declared_by"] or "—",
                               "names": _names(rec["checkpoint_names"]),
                               "built": [None] * len(views), "_route": rt})
            b = rec["vllm_builds"]
            routes[by_key[key]]["built"][e] = {
                "method": b["method"] if b else "—", "why": b["rule"] if b else "—",
                "verdict": str(rt.verdict), "reason": rt.reason}
    main_locals = frozenset(_local_name(x["_route"].prefix) for x in routes if not x["_route"].role.is_draft)
    rows: dict[tuple[int, int, str], dict[str, list[int]]] = {}
    for i, x in enumerate(routes):
        rt = x.pop("_route")
        row = _row_of(rt, x["checkpoint"], len(names))
        rows.setdefault(row, {}).setdefault(column_of(rt, main_locals), []).append(i)
    used = [c for c, _ in COLUMNS if any(c in cells for cells in rows.values())]
    cells: list[dict] = []
    grid = []
    for row_key in sorted(rows):
        where: dict[str, int] = {}
        for col, members in rows[row_key].items():
            where[col] = len(cells)
            cells.append(_cell(members, routes, len(views)))
        grid.append({"label": row_key[2], "group": ("main", "draft", "outside")[row_key[0]], "cells": where})
    return {
        "schema": REPORT_SCHEMA,
        "specguard": __version__,
        "checkpoints": names,
        "engines": [_engine_summary(v, fail_on) for v in views],
        "bytes_by_format": _bytes_by_format(first),
        "columns": [{"key": c, "title": dict(COLUMNS)[c]} for c in used],
        "rows": grid,
        "cells": cells,
        "routes": routes,
        "findings": [dict(f.as_dict(), engine=v.name) for v in views for f in v.lint.findings],
        "rules": _rule_pages({f.code for v in views for f in v.lint.findings}),
        "fix": fix,
    }


def _cell(members: list[int], routes: list[dict], n_engines: int) -> dict:
    formats = list(dict.fromkeys(routes[i]["format"] for i in members))
    marks = []
    for e in range(n_engines):
        bad = [routes[i]["built"][e]["verdict"] for i in members
               if routes[i]["built"][e] and routes[i]["built"][e]["verdict"] != OK]
        marks.append(bad[0] if bad else None)
    return {"formats": formats, "marks": marks, "routes": members}


def _engine_summary(view: EngineView, fail_on: str) -> dict:
    counts = Counter(str(rt.verdict) for _, rt in view.routes)
    exit_code = lint_exit_code(view.lint.findings, fail_on)  # the code `specguard lint` exits with
    verdict = ("loads as stored" if set(counts) <= {str(OK)}
               else "could not vouch" if set(counts) <= {str(OK), str(UNKNOWN)} else "does not load as stored")
    return {"name": view.name, "verdict": verdict, "counts": dict(counts), "lint_exit": exit_code,
            "fail_on": fail_on, "findings": len(view.lint.findings)}


def _bytes_by_format(view: EngineView) -> list[dict]:
    """Stored bytes per format, from the modules behind each route; anything unrouted counts as such."""
    total: Counter[str] = Counter()
    for r in view.resolvers:
        seen: set[str] = set()
        for rt in (rt for rr, rt in view.routes if rr is r):
            fmt = rt.stored.format if rt.stored else "none"
            for name in rt.checkpoint_names:
                if name not in seen and name in r.table.modules:
                    seen.add(name)
                    total[str(fmt)] += r.table[name].nbytes
        for m in r.table:
            if m.name not in seen:
                total["not routed"] += m.nbytes
    return [{"format": f, "bytes": n} for f, n in total.most_common()]


def _rule_pages(codes: set[str]) -> dict[str, dict]:
    """Each cited rule's page, rendered to HTML (the text `specguard rule CODE` prints)."""
    from markdown_it import MarkdownIt

    md = MarkdownIt("commonmark", {"html": False})  # a rule page may not inject markup
    out = {}
    for code in sorted(codes):
        r = RULES.get(code)
        doc = rule_doc(code) or (f"# {code}\n\n{r.summary}\n" if r else f"# {code}\n")
        out[code] = {"name": r.name if r else code, "html": md.render(doc)}
    return out


def _summary_line(views: Sequence[EngineView], fail_on: str) -> str:
    parts = []
    for v in views:
        s = _engine_summary(v, fail_on)
        bad = sum(n for k, n in s["counts"].items() if k != str(OK))
        parts.append(f"{v.name}: {s['verdict']} ({bad} module(s) not ok), lint exit {s['lint_exit']}")
    return "; ".join(parts)


# -- the page --------------------------------------------------------------------------------------


def _asset(name: str) -> str:
    return resources.files("specguard.commands").joinpath("report_assets", name).read_text(encoding="utf-8")


def _json_for_script(data: dict) -> str:
    """JSON safe inside <script>: no ``</`` or ``<!--`` can end or comment the element."""
    text = json.dumps(data, separators=(",", ":"), ensure_ascii=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def render_page(data: dict) -> str:
    """The page: server-rendered summary, map and findings (readable without scripts); the
    script adds the details panel, keyboard moves and the engine switch."""
    e = html.escape
    title = " + ".join(data["checkpoints"])
    parts = [
        "<!doctype html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>specguard report — {e(title)}</title>",
        f"<style>{_asset('report.css')}</style></head><body>",
        f'<header><h1>specguard report</h1><p class="ckpt">{e(title)}</p>'
        f'<p class="gen">specguard {e(data["specguard"])}</p></header>',
        '<main>',
        _summary_html(data),
        _map_html(data),
        _findings_html(data),
        _fix_html(data["fix"]),
        "</main>",
        f'<script type="application/json" id="report-data">{_json_for_script(data)}</script>',
        f"<script>{_asset('report.js')}</script>",
        "</body></html>",
    ]
    return "\n".join(parts)


def _summary_html(data: dict) -> str:
    e = html.escape
    rows = []
    for g in data["engines"]:
        counts = ", ".join(f"{n} {k}" for k, n in sorted(g["counts"].items()))
        cls = "ok" if g["verdict"] == "loads as stored" else "bad"
        rows.append(f'<tr><th scope="row">{e(g["name"])}</th><td class="v-{cls}">{e(g["verdict"])}</td>'
                    f'<td>{e(counts)}</td><td>{g["findings"]}</td>'
                    f'<td><code>{g["lint_exit"]}</code> (--fail-on {e(g["fail_on"])})</td></tr>')
    total = sum(b["bytes"] for b in data["bytes_by_format"]) or 1
    bars = "".join(
        f'<li><span class="sw fmt-{_fmt_class(b["format"])}" aria-hidden="true"></span>'
        f'<span class="fname">{e(b["format"])}</span> {human_bytes(b["bytes"])} '
        f'<span class="pct">({100 * b["bytes"] / total:.1f} %)</span></li>' for b in data["bytes_by_format"])
    return (
        '<section id="summary" aria-labelledby="summary-h"><h2 id="summary-h">Summary</h2>'
        '<div class="scroll"><table class="summary"><thead><tr><th scope="col">engine</th>'
        '<th scope="col">verdict</th><th scope="col">modules</th><th scope="col">findings</th>'
        '<th scope="col">lint exit code</th></tr></thead><tbody>' + "".join(rows) + "</tbody></table></div>"
        f'<h3>Stored bytes by format</h3><ul class="bytes">{bars}</ul></section>'
    )


_STYLED = frozenset({"bf16", "fp16", "fp32", "f32", "fp8_block", "fp8_tensor", "fp8_channel", "nvfp4", "mxfp4",
                     "mxfp8", "int4", "int8", "int4_group", "int8_channel", "none"})


def _fmt_class(fmt: str) -> str:
    """The CSS class of a format's colour; formats without their own colour share one."""
    return fmt if fmt in _STYLED else "other"


_ABBR = {"bf16": "bf16", "fp16": "fp16", "fp32": "fp32", "fp8_block": "f8b", "fp8_tensor": "f8t",
         "fp8_channel": "f8c", "nvfp4": "nv4", "mxfp4": "mx4", "mxfp8": "mx8", "none": "—"}


def _abbr(fmt: str) -> str:
    return _ABBR.get(fmt, fmt[:4])


def _map_html(data: dict) -> str:
    e = html.escape
    cols = data["columns"]
    engines = [g["name"] for g in data["engines"]]
    head = "".join(f'<th scope="col">{e(c["title"])}</th>' for c in cols)
    body = []
    for r, row in enumerate(data["rows"]):
        tds = []
        for c, col in enumerate(cols):
            idx = row["cells"].get(col["key"])
            if idx is None:
                tds.append('<td class="empty"></td>')
                continue
            cell = data["cells"][idx]
            fmts = "".join(f'<span class="sw fmt-{_fmt_class(f)}">{e(_abbr(f))}</span>' for f in cell["formats"])
            marks = "".join(
                f'<span class="mark" data-engine="{i}" title="{e(engines[i])}: {e(m)}">'
                f'{MARKS.get(m, "?")}<span class="mark-eng">{i + 1 if len(engines) > 1 else ""}</span></span>'
                for i, m in enumerate(cell["marks"]) if m)
            marked = " marked" if any(cell["marks"]) else ""
            label = f'{row["label"]}, {col["title"]}: {", ".join(cell["formats"])}'
            if any(cell["marks"]):
                label += "; " + "; ".join(f"{engines[i]} {m}" for i, m in enumerate(cell["marks"]) if m)
            tds.append(f'<td class="cell{marked}" data-cell="{idx}" data-row="{r}" data-col="{c}" '
                       f'data-column="{e(col["key"])}" tabindex="-1" role="button" aria-label="{e(label)}">'
                       f'{fmts}{marks}</td>')
        body.append(f'<tr class="g-{row["group"]}"><th scope="row">{e(row["label"])}</th>{"".join(tds)}</tr>')
    formats = sorted({f for cell in data["cells"] for f in cell["formats"]})
    legend = "".join(f'<li><span class="sw fmt-{_fmt_class(f)}">{e(_abbr(f))}</span> {e(f)}</li>' for f in formats)
    legend += "".join(f'<li><span class="mark">{g}</span> {e(m)}</li>'
                      for m, g in MARKS.items() if any(m in cell["marks"] for cell in data["cells"]))
    if len(engines) > 1:
        legend += "".join(f'<li><span class="mark-eng">{i + 1}</span> {e(n)}</li>' for i, n in enumerate(engines))
    return (
        '<section id="map" aria-labelledby="map-h"><h2 id="map-h">Module map</h2>'
        '<p class="hint">One row per layer, one column per module kind; colour and label: the stored format. '
        'A mark: the engine builds something else than what is stored. Select a cell (click, or arrow keys '
        'and Enter) for stored / declared / built.</p>'
        f'<ul class="legend" aria-label="legend">{legend}</ul>'
        '<div class="scroll map-scroll"><table class="map" role="grid" aria-labelledby="map-h">'
        f'<thead><tr><th scope="col">layer</th>{head}</tr></thead><tbody>{"".join(body)}</tbody></table></div>'
        '<div id="details" class="details" aria-live="polite" tabindex="-1">'
        '<p class="hint">No cell selected.</p></div></section>'
    )


def _findings_html(data: dict) -> str:
    e = html.escape
    if not data["findings"]:
        items = '<p class="ok">No findings.</p>'
    else:
        lis = []
        for f in data["findings"]:
            fix = f'<p class="fix"><b>fix:</b> {e(f["fix"])}</p>' if f.get("fix") else ""
            lis.append(f'<li class="finding sev-{e(f["severity"])}"><p><a class="code" href="#rule-{e(f["code"])}">'
                       f'{e(f["code"])}</a> <span class="sev">{e(f["severity"])}</span> '
                       f'<span class="eng">[{e(f["engine"])}]</span> {e(f["message"])}</p>{fix}</li>')
        items = f'<ol class="findings">{"".join(lis)}</ol>'
    rules = "".join(f'<details id="rule-{e(c)}" class="rule"><summary>{e(c)} {e(p["name"])}</summary>'
                    f'{p["html"]}</details>' for c, p in data["rules"].items())
    return (f'<section id="findings" aria-labelledby="findings-h"><h2 id="findings-h">Findings</h2>{items}'
            f'<h3>Rule pages</h3>{rules or "<p>none cited</p>"}</section>')


def _fix_html(fix: dict) -> str:
    e = html.escape
    body = f'<p>The repair <code>{e(fix["command"])}</code> would write:</p>'
    if fix["state"] == "repair":
        lines = "".join(f'<span class="{_diff_class(line)}">{e(line)}</span>'
                        for line in fix["diff"].splitlines(keepends=True))
        body += f'<pre class="diff">{lines or e("(no config change)")}</pre>'
        if fix.get("reencode"):
            body += f'<p>and re-encode {fix["reencode"]} module(s) exactly (the config alone cannot say it).</p>'
    else:
        body += f'<p class="why">{e(fix["why"])}</p>'
    return f'<section id="fix" aria-labelledby="fix-h"><h2 id="fix-h">Repair</h2>{body}</section>'


def _diff_class(line: str) -> str:
    if line.startswith(("+++", "---")):
        return "d-file"
    return {"+": "d-add", "-": "d-del", "@": "d-hunk"}.get(line[:1], "d-ctx")
