"""SG2xx: what is stored against what the config makes the engine build."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from typing import Protocol, TypeGuard

from specguard.declared import DeclaredScheme
from specguard.declared.edits import CONFIG_JSON, ConfigEdit
from specguard.engines import EngineChoice
from specguard.engines.vllm.gptq import gptq_dynamic_fix
from specguard.engines.vllm.v0_33 import v41_ignore_name
from specguard.formats import scheme as s
from specguard.formats.scheme import Scheme
from specguard.layouts import roles as r
from specguard.layouts.roles import ModuleKind, Role, role_label
from specguard.lint.context import LintContext, describe
from specguard.lint.finding import ERROR, Finding
from specguard.lint.fixes import checked, describe_edits
from specguard.lint.registry import rule
from specguard.resolve import MISROUTED, Resolver, Route, Verdict

# Tensors each engine method reads, by (format, convention): per tensor, the
# suffixes that satisfy it (vLLM renames DeepSeek-V4's bare `.scale` into the
# scale slot, so it counts). A (format, convention) not listed is not checked.
NEEDS: dict[tuple[str, str | None], tuple[tuple[str, ...], ...]] = {
    (s.NVFP4, s.MODELOPT): (("weight",), ("weight_scale", "scale"), ("weight_scale_2",), ("input_scale",)),
    (s.NVFP4, s.COMPRESSED_TENSORS): (("weight_packed",), ("weight_scale",), ("weight_global_scale",)),
    (s.MXFP4, s.COMPRESSED_TENSORS): (("weight_packed",), ("weight_scale",)),
    (s.MXFP4, s.GPT_OSS): (("blocks",), ("scales",)),
    (s.MXFP4, None): (("weight",), ("weight_scale", "scale")),
    (s.FP8_BLOCK, None): (("weight",), ("weight_scale", "weight_scale_inv", "scale")),
    (s.INT4_GROUP, s.COMPRESSED_TENSORS): (("weight_packed",), ("weight_scale",)),
}


def needs(scheme: Scheme) -> tuple[tuple[str, ...], ...]:
    hit = NEEDS.get((scheme.format, scheme.convention))
    if hit is None and scheme.convention not in (s.COMPRESSED_TENSORS, s.GPT_OSS):
        hit = NEEDS.get((scheme.format, None))
    return hit or ()


class Built(Protocol):
    """A route with something stored, the config's claim and the engine's choice:
    what every SG2xx rule compares (a Route whose optional parts are all there)."""

    @property
    def prefix(self) -> str: ...
    @property
    def role(self) -> Role: ...
    @property
    def kind(self) -> ModuleKind: ...
    @property
    def stored(self) -> Scheme: ...
    @property
    def declared(self) -> DeclaredScheme: ...
    @property
    def vllm(self) -> EngineChoice: ...
    @property
    def verdict(self) -> Verdict: ...
    @property
    def checkpoint_names(self) -> tuple[str, ...]: ...


def _built(rt: Route) -> TypeGuard[Built]:
    return rt.stored is not None and rt.declared is not None and rt.vllm is not None


def _groups(ctx: LintContext, pick: Callable[[Built], tuple | None]) -> Iterator[tuple[tuple, list[Built]]]:
    """Built routes that ``pick`` selects, grouped by the key it returns (one finding per group)."""
    groups: dict[tuple, list[Built]] = defaultdict(list)
    for res, rt in ctx.all_routes():
        if not _built(rt) or rt.prefix in ctx.explained(res):
            continue  # (SG103 reports the cause of the explained ones once)
        key = pick(rt)
        if key is not None:
            groups[key].append(rt)
    yield from groups.items()


def _names(routes: Sequence[Built]) -> tuple[str, ...]:
    return tuple(n for rt in routes for n in rt.checkpoint_names)


def _misrouted(rt: Built) -> bool:
    return rt.verdict == MISROUTED


@rule("SG201", "stored-format-differs-from-declared", ERROR,
      "A module is stored in one quantized format while the config makes the engine build another.")
def stored_differs(ctx: LintContext) -> Iterator[Finding]:
    groups: dict[tuple, list[tuple[Resolver, Built]]] = defaultdict(list)
    for res, rt in ctx.all_routes():
        if not _built(rt) or rt.prefix in ctx.explained(res):
            continue  # (SG103 reports the cause of the explained ones once)
        if _misrouted(rt) and rt.stored.quantized and rt.vllm.scheme.quantized:
            key = (id(res), role_label(rt.role), rt.kind, rt.stored.format, rt.vllm.method, rt.declared.source)
            groups[key].append((res, rt))
    for (_, role, kind, _stored, method, _source), pairs in groups.items():
        res, first = pairs[0]
        routes = [rt for _, rt in pairs]
        edits, fix = _fix(ctx, res, routes)
        yield Finding(
            "SG201", ERROR,
            f"{len(routes)} {role} {kind.replace('_', ' ')} layer(s) stored {first.stored.short()}; "
            f"declared {first.declared.scheme.short()} by {first.declared.source}; {ctx.engine_name} on {res.platform} "
            f"({_class(first)}) builds {method}: {describe(rt.prefix for rt in routes)}",
            _names(routes), fix, data={"edits": [e.as_dict() for e in edits], "targets": [rt.prefix for rt in routes]},
        )


def _class(rt: Built) -> str:
    """The quant-config class, short: ``deepseek_v41 DeepseekV4FP8Config``."""
    path = rt.vllm.quant_config or "no quant config"
    parts = path.split(".")
    return f"{parts[-3]} {parts[-1]}" if len(parts) >= 3 else path


@rule("SG202", "declared-scheme-needs-missing-tensors", ERROR,
      "The scheme the engine builds needs tensors the checkpoint does not store: those parameters stay "
      "uninitialized (torch.empty).")
def needs_missing(ctx: LintContext) -> Iterator[Finding]:
    def pick(rt: Built) -> tuple | None:
        if not rt.stored.quantized or not rt.vllm.scheme.quantized:
            return None
        missing = _missing_for(ctx, rt)
        return (role_label(rt.role), rt.vllm.method, missing) if missing else None

    for (role, method, missing), routes in _groups(ctx, pick):
        params = _engine_params(routes[0], missing)
        yield Finding(
            "SG202", ERROR,
            f"{method} needs {', '.join(missing)} but {len(routes)} {role} layer(s) store none; "
            f"never loaded, left uninitialized: {', '.join(params)} in {describe(rt.prefix for rt in routes)}",
            _names(routes),
            "store the missing scales, or route these modules to the format they are stored in "
            "(`specguard route`; the specguard vLLM plugin does it at load time)",
            data={"missing": list(missing), "engine_parameters": params},
        )


def _missing_for(ctx: LintContext, rt: Built) -> tuple[str, ...]:
    """Tensors the built method reads that some module behind the route does not store."""
    want = needs(rt.vllm.scheme)
    out: set[str] = set()
    seen: set[tuple[str, ...]] = set()  # modules storing the same parameters answer alike (256 experts a layer)
    for res in ctx.resolvers:
        for name in rt.checkpoint_names:
            mod = res.table.modules.get(name)
            if mod is None:
                continue
            stored = tuple(mod.params)
            if stored in seen:
                continue
            seen.add(stored)
            out.update(alternatives[0] for alternatives in want if not any(a in mod.params for a in alternatives))
    return tuple(a[0] for a in want if a[0] in out)


def _engine_params(rt: Built, missing: tuple[str, ...]) -> list[str]:
    """vLLM's parameter names: fused MoE layers hold w13_* (w1+w3) and w2_* per layer."""
    if rt.kind == r.ROUTED_EXPERTS:
        return [f"{w}_{p}" for p in missing for w in ("w13", "w2")]
    return list(missing)


@rule("SG203", "declared-quantized-stored-unquantized", ERROR,
      "The config makes the engine build a quantized layer for a module stored in BF16/FP16/FP32.")
def declared_quantized_stored_plain(ctx: LintContext) -> Iterator[Finding]:
    def pick(rt: Built) -> tuple | None:
        if _misrouted(rt) and not rt.stored.quantized and rt.vllm.scheme.quantized:
            return (role_label(rt.role), rt.stored.format, rt.vllm.scheme.format, rt.vllm.reason)
        return None

    for (role, stored, built, source), routes in _groups(ctx, pick):
        if routes[0].vllm.method.startswith("AutoGPTQ"):
            yield _gptq_over_plain(ctx, role, stored, built, source, routes)
            continue
        yield Finding(
            "SG203", ERROR,
            f"{len(routes)} {role} module(s) stored {stored} but built {built} ({source}): "
            f"{describe(rt.prefix for rt in routes)}",
            _names(routes),
            "exclude these modules with a pattern that matches the engine's runtime prefixes "
            "(see SG101), or build the draft without the target's quant config",
        )


def _gptq_over_plain(ctx: LintContext, role: str, stored: str, built: str, source: str,
                     routes: list[Built]) -> Finding:
    """GPTQ layers built over float tensors: no ``weight`` parameter takes them
    (auto_gptq.py creates qweight/qzeros/scales/g_idx; fused_moe ``RoutedExperts``
    raises AttributeError for ``w2_weight``, ``AutoWeightsLoader`` ValueError for a linear)."""
    quantized = [rt.prefix for _, rt in ctx.all_routes() if rt.stored is not None and rt.stored.quantized]
    fixed = gptq_dynamic_fix(_gptq_dynamic(ctx), [rt.prefix for rt in routes], quantized)
    fix = (f"set quantization_config.dynamic to {json.dumps(fixed)}" if fixed is not None else
           "store these modules as the config declares them: a '-:' rule naming mtp would also build the "
           "drafter's quantized layers unquantized (qwen3_5_mtp.py)")
    return Finding(
        "SG203", ERROR,
        f"{len(routes)} {role} module(s) stored {stored} but built {built} ({source}); {ctx.engine_name} fails to "
        f"start: a GPTQ layer has no parameter for their `weight` tensors: {describe(rt.prefix for rt in routes)}",
        _names(routes),
        fix,
        data={"dynamic": fixed},
    )


def _gptq_dynamic(ctx: LintContext) -> dict:
    for res in ctx.resolvers:
        qc = res.config.get("quantization_config")
        if isinstance(qc, dict) and isinstance(qc.get("dynamic"), dict):
            return dict(qc["dynamic"])
    return {}


@rule("SG204", "stored-quantized-declared-unquantized", ERROR,
      "A module stored quantized is built as an unquantized layer: its packed bytes and scales are misread.")
def stored_quantized_declared_plain(ctx: LintContext) -> Iterator[Finding]:
    def pick(rt: Built) -> tuple | None:
        if _misrouted(rt) and rt.stored.quantized and not rt.vllm.scheme.quantized:
            return (role_label(rt.role), rt.stored.format, rt.vllm.method)
        return None

    for (role, stored, method), routes in _groups(ctx, pick):
        if "quant_config=None" in routes[0].vllm.reason or routes[0].vllm.reason.startswith("gptq:"):
            yield Finding(
                "SG204", ERROR,
                f"{len(routes)} {role} module(s) stored {stored} but built as {method} "
                f"({routes[0].vllm.reason}); {ctx.engine_name} fails to start: the unquantized layer has no "
                f"parameter for their scale tensors: {describe(rt.prefix for rt in routes)}",
                _names(routes),
                f"store them unquantized (dequantize the {stored} weights to BF16): no {ctx.engine_name} quant "
                f"config builds {stored} layers beside GPTQ ones",
            )
            continue
        yield Finding(
            "SG204", ERROR,
            f"{len(routes)} {role} module(s) stored {stored} but built as {method} "
            f"({routes[0].vllm.reason}): {describe(rt.prefix for rt in routes)}",
            _names(routes),
            f"declare them {stored} (or store them unquantized)",
        )


def _fix(ctx: LintContext, res: Resolver, routes: list[Built]) -> tuple[list[ConfigEdit], str]:
    """A config change only where it re-routes clean on this platform (lint/fixes.py); never one
    already present; otherwise advice that changes no config."""
    rt = routes[0]
    if rt.kind == r.ROUTED_EXPERTS and rt.stored.format == s.MXFP4 and rt.vllm.scheme.format == s.NVFP4:
        present = rt.declared.pattern is not None and rt.declared.scheme.format == s.MXFP4
        if not present:
            n = res.layout.num_hidden_layers
            names = sorted({x for x in (v41_ignore_name(p.prefix, n) for p in routes) if x})
            entry = ["mtp.*"] if names and all(x.startswith("mtp.") for x in names) else names
            edits = [ConfigEdit(CONFIG_JSON, ("quantization_config", "ignore"), "extend", entry)]
            if checked(ctx, res, edits, [p.prefix for p in routes]):
                return edits, (f"{describe_edits(edits)}: on {res.platform}, {ctx.engine_name}'s DeepSeek-V4.1 "
                               "quant config "
                               "then routes them to MXFP4 (re-routed with the change: they route ok, nothing else "
                               "changes); an ignored_layers entry would load them as BF16, not MXFP4")
        held = f"the config already declares them MXFP4 ({rt.declared.source}); " if present else ""
        where = (f"on {res.platform} {ctx.engine_name} builds every routed-expert layer from moe_quant_algo "
                 f"({_class(rt)} reads no list that routes experts to MXFP4)")
        return [], f"{held}{where}: serve with the specguard vLLM plugin, which routes them by the disk"
    return [], f"declare these modules {rt.stored.short()} or serve with the specguard vLLM plugin"
