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

from specguard.declared.edits import ConfigEdit, apply_all
from specguard.errors import SpecguardError
from specguard.lint.context import LintContext, QuantFiles
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


def checked(ctx: LintContext, r: Resolver, edits: Sequence[ConfigEdit], targets: Iterable[str]) -> bool:
    """Do the edits make every target route ``ok`` and leave every other route as it was?
    (No targets: the edits must change no route, e.g. dropping an entry that matches nothing.)"""
    new = rerouted(r, edits) if edits else None
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
            if a is None or a.verdict != OK:
                return False
        elif b is None or a is None or _signature(b) != _signature(a):
            return False
    return True


def describe_edits(edits: Sequence[ConfigEdit]) -> str:
    return "; ".join(str(e) for e in edits)


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
