"""Every config change a finding proposes is re-routed before it is printed.

``checked(ctx, r, edits, targets)`` applies the edits to copies of the
checkpoint's config files, routes every runtime module again (the headers and
their classification are shared, nothing is re-read) and accepts the fix only
when each target route is then ``ok`` and every other route is exactly what it
was: same verdict, same stored, declared and built schemes, same engine method.
A fix that fails is not proposed; the rule falls back to advice that changes no
config (the specguard vLLM plugin).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace

from specguard.declared.edits import Applicability, ConfigEdit, Fix, apply_all
from specguard.errors import SpecguardError
from specguard.lint.context import LintContext, QuantFiles
from specguard.repair.plan import Plan, combined, plan_for
from specguard.resolve import OK, Resolver, Route


def _signature(rt: Route) -> tuple:
    return (rt.verdict, rt.stored.format if rt.stored else None,
            rt.declared.scheme.format if rt.declared else None,
            rt.vllm.method if rt.vllm else None, rt.vllm.scheme.format if rt.vllm else None)


def rerouted(r: Resolver, edits: Sequence[ConfigEdit]) -> Resolver | None:
    """``r`` routed under the edited configs (None: the edited config does not parse)."""
    try:
        cfg, hf = apply_all(edits, r.checkpoint.config, r.checkpoint.hf_quant_config)
        return r.with_configs(cfg, hf)
    except (SpecguardError, ValueError, KeyError, IndexError, TypeError):
        return None


def checked(ctx: LintContext, r: Resolver, edits: Sequence[ConfigEdit], targets: Iterable[str], *,
            exact: bool = True) -> bool:
    """Do the edits make every target route ``ok`` and leave every other route as it was?
    (No targets: the edits must change no route, e.g. dropping an entry that matches nothing.)
    ``exact=False`` (a planned repair): every other route that was ``ok`` stays ``ok`` (a wildcard
    entry may change the claim for a norm that is built unquantized either way)."""
    new = _rerouted_once(ctx, r, edits) if edits else None
    if new is None:
        return False
    before = {rt.prefix: rt for rt in ctx.routes(r)}
    after = {rt.prefix: rt for rt in new.routes()}
    want = {r.canonical(t) or t for t in targets}  # none: the edits must change nothing at all
    if not want <= before.keys():
        return False
    for p in before.keys() | after.keys():
        b, a = before.get(p), after.get(p)
        if p in want:
            promised_only = a is None and b is not None and b.stored is None  # the config no longer promises it
            if not promised_only and (a is None or a.verdict != OK):
                return False
        elif not _kept(b, a, exact):
            return False
    return True


def _rerouted_once(ctx: LintContext, r: Resolver, edits: Sequence[ConfigEdit]) -> Resolver | None:
    """``rerouted``, once per lint run for the same edits: the rules whose fix is the planner's
    (SG201, SG202) check the same plan (benchmarks/lint.py: one re-routing of 216 modules, not two)."""
    key = (id(r), repr(tuple(edits)))
    if key not in ctx._rerouted:
        ctx._rerouted[key] = rerouted(r, edits)
    return ctx._rerouted[key]


def _kept(before: Route | None, after: Route | None, exact: bool) -> bool:
    if before is None or after is None:
        return False
    if exact:
        return _signature(before) == _signature(after)
    return before.verdict != OK or after.verdict == OK


def quant_files(ctx: LintContext, r: Resolver) -> QuantFiles | None:
    """Route ``r`` as if config.json had no quantization_config, so that vLLM would read
    hf_quant_config.json (model_loader/weight_utils.py ``get_quant_config`` reads the
    file only then), and compare the claims prefix by prefix."""
    cfg = dict(r.checkpoint.config or {})
    hf = r.checkpoint.hf_quant_config
    if not hf or not _quantization_config(cfg):
        return None
    other = rerouted_as(r, _without_quantization_config(cfg), hf)
    if other is None:
        return None
    now = {rt.prefix: rt for rt in ctx.routes(r)}
    alt = {rt.prefix: rt for rt in other.routes()}
    differ = tuple(p for p, rt in now.items() if p in alt and _claim(rt) is not None and _claim(alt[p]) is not None
                   and _claim(rt) != _claim(alt[p]))
    if not differ:
        return None
    explained = frozenset(p for p in differ if now[p].verdict != OK and alt[p].verdict == OK)
    return QuantFiles(differ, explained)


def _claim(rt: Route) -> str | None:
    return rt.declared.scheme.format if rt.declared is not None else None


def rerouted_as(r: Resolver, config: Mapping, hf_quant: Mapping | None) -> Resolver | None:
    try:
        return r.with_configs(config, hf_quant)
    except (SpecguardError, ValueError, KeyError, TypeError):
        return None


def _quantization_config(cfg: Mapping) -> object:
    text = cfg.get("text_config")
    return cfg.get("quantization_config") or (text.get("quantization_config") if isinstance(text, dict) else None)


def _without_quantization_config(cfg: dict) -> dict:
    out = {k: v for k, v in cfg.items() if k != "quantization_config"}
    if isinstance(out.get("text_config"), dict):
        out["text_config"] = {k: v for k, v in out["text_config"].items() if k != "quantization_config"}
    return out


def plan(ctx: LintContext) -> Plan:
    """The repair planner's plan for the resolvers lint reads (repair/plan.py: the one planner;
    `specguard fix` writes what it plans), made once per lint run and only when a rule asks."""
    if ctx._plan is None:
        ctx._plan = plan_for([(ctx.resolvers[0].platform, ctx.resolvers)], strict=False)
    return ctx._plan


def planned(ctx: LintContext, r: Resolver, prefixes: Sequence[str], why: str = "") -> Fix | None:
    """The planner's fix for these runtime modules, as lint prints it: config edits re-routed
    first (every module they touch then routes ok, nothing else changes), a re-encode left to
    `specguard fix` (which verifies what it writes). None: no planned repair."""
    got = plan(ctx).changes_for(r.checkpoint, prefixes)
    if got is None:
        return None
    changes, reencode = got
    fix = combined(changes, reencode)
    if fix is None:
        return None
    targets = list(fix.targets)
    text = "; ".join(in_files(r, e) for e in fix.edits)
    if fix.applicability == Applicability.REENCODE:
        text = (f"re-encode {len(reencode)} module(s) to BF16 (exact; `specguard fix --out DIR` writes them)"
                + (f" and {text}" if text else ""))
    elif not checked(ctx, r, fix.edits, targets, exact=False):
        return None
    else:
        text += f" (re-routed with the change: {len(targets)} runtime module(s) then route ok)"
    return replace(fix, message=f"{text}: {why}" if why else text)


def in_files(r: Resolver, edit: ConfigEdit) -> str:
    """The edit, naming the checkpoint's file: ``add "x" to s4/drafter/config.json ...``."""
    return str(edit).replace(f" {edit.file} ", f" {r.checkpoint.name}/{edit.file} ", 1)
