"""SG2xx: what is stored against what the config makes the engine build."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from itertools import chain, compress, repeat
from operator import attrgetter, contains, not_
from typing import Protocol, TypeGuard

from specguard.declared import DeclaredScheme
from specguard.declared.edits import CONFIG_JSON, HF_QUANT_JSON, Applicability, Fix
from specguard.engines import EngineChoice
from specguard.formats import scheme as s
from specguard.formats.scheme import Scheme
from specguard.formats.specs import needs
from specguard.layouts import roles as r
from specguard.layouts.roles import ModuleKind, Role, role_label
from specguard.lint.context import LintContext, describe
from specguard.lint.finding import ERROR, WARNING, Finding
from specguard.lint.fixes import planned
from specguard.lint.registry import rule
from specguard.resolve import MISROUTED, UNKNOWN, Resolver, Route, Verdict

_PARAMS = attrgetter("params")


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


def _groups(ctx: LintContext, pick: Callable[[Built], tuple | None]) -> Iterator[tuple[tuple, list[Built], Resolver]]:
    """Built routes that ``pick`` selects, grouped per checkpoint by the key it returns (one
    finding per group), with the checkpoint's resolver."""
    groups: dict[tuple, list[Built]] = defaultdict(list)
    owner: dict[int, Resolver] = {}
    for res, rt in ctx.all_routes():
        if not _built(rt) or rt.prefix in ctx.explained(res):
            continue  # (SG103 reports the cause of the explained ones once)
        key = pick(rt)
        if key is not None:
            owner[id(res)] = res
            groups[(id(res), *key)].append(rt)
    for key, routes in groups.items():
        yield key[1:], routes, owner[key[0]]


def _names(routes: Sequence[Built | Route]) -> tuple[str, ...]:
    return tuple(n for rt in routes for n in rt.checkpoint_names)


def _named(routes: Sequence[Built | Route], **data: object) -> dict[str, object]:
    """Every SG2xx finding names its modules twice, one way each: ``modules`` holds the
    checkpoint names, ``data["runtime_prefixes"]`` the engine's prefixes its message and
    its fix's targets use."""
    return {"runtime_prefixes": [rt.prefix for rt in routes], **data}


def _misrouted(rt: Built) -> bool:
    return rt.verdict == MISROUTED


SG201 = rule("SG201", "stored-format-differs-from-declared", ERROR,
      "A module is stored in one quantized format while the config makes the engine build another.")


@SG201
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
        targets = [rt.prefix for rt in routes]
        fix = _fix(ctx, res, routes)
        of = f" of {res.checkpoint.name}" if len(ctx.resolvers) > 1 else ""
        yield SG201.finding(
            f"{len(routes)} {role} {kind.replace('_', ' ')} layer(s){of}: stored "
            f"{first.stored.short()}; declared {first.declared.scheme.short()} by {_declared_by(res, first)}; "
            f"built {method} by {ctx.engine_name} on {res.platform} ({_class(first)}, {_built_because(res, first)}): "
            f"{describe(targets)}",
            _names(routes), fix, data=_named(routes),
        )


def _declared_by(res: Resolver, rt: Built) -> str:
    """The file and key of the claim: ``s4/drafter/config.json expert_dtype=fp4``."""
    source = rt.declared.source
    if source.startswith(f"{HF_QUANT_JSON}:"):
        return f"{res.checkpoint.name}/{HF_QUANT_JSON} {source.split(':', 1)[1]}"
    return f"{res.checkpoint.name}/{CONFIG_JSON} {source.removeprefix('config.')}"


def _built_because(res: Resolver, rt: Built) -> str:
    """The engine's reason, and whose config.json it read: building a separate drafter, vLLM
    0.33's DeepSeek-V4 quant configs read ``moe_quant_algo`` and ``expert_dtype`` from the
    target's hf_config (engines/vllm/v0_33.py ``_fp8``), so the target's claim reaches it."""
    why = rt.vllm.reason.split(": ", 1)[-1]
    if res.target is not None and ("moe_quant_algo" in why or "expert_dtype" in why):
        return f"{why}, read from the target's {res.target.checkpoint.name}/{CONFIG_JSON}"
    return why


def _class(rt: Built) -> str:
    """The quant-config class, short: ``deepseek_v41 DeepseekV4FP8Config``."""
    path = rt.vllm.quant_config or "no quant config"
    parts = path.split(".")
    return f"{parts[-3]} {parts[-1]}" if len(parts) >= 3 else path


SG202 = rule("SG202", "declared-scheme-needs-missing-tensors", ERROR,
      "The scheme the engine builds needs tensors the checkpoint does not store: those parameters stay "
      "uninitialized (torch.empty).")


@SG202
def needs_missing(ctx: LintContext) -> Iterator[Finding]:
    def pick(rt: Built) -> tuple | None:
        if not rt.stored.quantized or not rt.vllm.scheme.quantized:
            return None
        missing = _missing_for(ctx, rt)
        return (role_label(rt.role), rt.vllm.method, missing) if missing else None

    for (role, method, missing), routes, res in _groups(ctx, pick):
        params = _engine_params(routes[0], missing)
        yield SG202.finding(f"{method} needs {', '.join(missing)} but {len(routes)} {role} layer(s) store none; "
            f"never loaded, left uninitialized: {', '.join(params)} in {describe(rt.prefix for rt in routes)}",
            _names(routes),
            planned(ctx, res, [rt.prefix for rt in routes], "the engine then builds the format they are stored in")
            or "store the missing scales, or route these modules to the format they are stored in "
            + ("(`specguard route`; the specguard vLLM plugin does it at load time)" if ctx.has_plugin
               else "(`specguard route`)"),
            data=_named(routes, missing=list(missing), engine_parameters=params),
        )


def _missing_for(ctx: LintContext, rt: Built) -> tuple[str, ...]:
    """Tensors the built method reads that some module behind the route does not store."""
    want = needs(rt.vllm.scheme)
    if not want:
        return ()
    # each module's parameters, found with C-level maps (45,000 expert modules in a DeepSeek export)
    if len(ctx.resolvers) == 1:  # the route's own modules, as its routing found them
        held = ctx.resolvers[0].route_params(rt)  # type: ignore[arg-type]  # (a Route)
    else:
        held = list(chain.from_iterable(map(_PARAMS, filter(None, map(res.table.modules.get, rt.checkpoint_names)))
                                        for res in ctx.resolvers))
    out: set[str] = set()
    for alternatives in want:
        # the modules holding none of the alternatives: those lacking the first, then of them those
        # lacking the next...
        rest = held
        for a in alternatives:
            if all(map(contains, rest, repeat(a))):  # the common case: one C-level pass, no list
                rest = []
                break
            rest = list(compress(rest, map(not_, map(contains, rest, repeat(a)))))
            if not rest:
                break
        if rest:
            out.add(alternatives[0])
    return tuple(a[0] for a in want if a[0] in out)


def _engine_params(rt: Built, missing: tuple[str, ...]) -> list[str]:
    """vLLM's parameter names: fused MoE layers hold w13_* (w1+w3) and w2_* per layer."""
    if rt.kind == r.ROUTED_EXPERTS:
        return [f"{w}_{p}" for p in missing for w in ("w13", "w2")]
    return list(missing)


SG203 = rule("SG203", "declared-quantized-stored-unquantized", ERROR,
      "The config makes the engine build a quantized layer for a module stored in BF16/FP16/FP32.")


@SG203
def declared_quantized_stored_plain(ctx: LintContext) -> Iterator[Finding]:
    def pick(rt: Built) -> tuple | None:
        if _misrouted(rt) and not rt.stored.quantized and rt.vllm.scheme.quantized:
            return (role_label(rt.role), rt.stored.format, rt.vllm.scheme.format, rt.vllm.reason)
        return None

    for (role, stored, built, source), routes, res in _groups(ctx, pick):
        if routes[0].vllm.method.startswith("AutoGPTQ"):
            yield _gptq_over_plain(ctx, res, role, stored, built, source, routes)
            continue
        draft = any(rt.role.is_draft for rt in routes)  # only a draft can be built without the target's config
        yield SG203.finding(f"{len(routes)} {role} module(s) stored {stored} but built {built} ({source}): "
            f"{describe(rt.prefix for rt in routes)}",
            _names(routes),
            planned(ctx, res, [rt.prefix for rt in routes], "the engine then builds them unquantized, as stored")
            or "exclude these modules with a pattern that matches the engine's runtime prefixes (see SG101), "
            + ("or build the draft without the target's quant config" if draft
               else "or store them as the config declares them"),
            data=_named(routes),
        )


def _gptq_over_plain(ctx: LintContext, res: Resolver, role: str, stored: str, built: str, source: str,
                     routes: list[Built]) -> Finding:
    """GPTQ layers built over float tensors: no ``weight`` parameter takes them
    (auto_gptq.py creates qweight/qzeros/scales/g_idx; fused_moe ``RoutedExperts``
    raises AttributeError for ``w2_weight``, ``AutoWeightsLoader`` ValueError for a linear)."""
    quantized = [rt.prefix for _, rt in ctx.all_routes() if rt.stored is not None and rt.stored.quantized]
    fixed = res.vllm.gptq_dynamic_fix(_gptq_dynamic(ctx), [rt.prefix for rt in routes], quantized)
    fix = planned(ctx, res, [rt.prefix for rt in routes], "the first-matching '-:' rules build them unquantized") or (
        "store these modules as the config declares them: a '-:' rule naming mtp would also build the "
        "drafter's quantized layers unquantized (qwen3_5_mtp.py)")
    return SG203.finding(
        f"{len(routes)} {role} module(s) stored {stored} but built {built} ({source}); {ctx.engine_name} fails to "
        f"start: a GPTQ layer has no parameter for their `weight` tensors: {describe(rt.prefix for rt in routes)}",
        _names(routes),
        fix,
        data=_named(routes, dynamic=fixed),
    )


def _gptq_dynamic(ctx: LintContext) -> dict:
    for res in ctx.resolvers:
        qc = res.config.get("quantization_config")
        if isinstance(qc, dict) and isinstance(qc.get("dynamic"), dict):
            return dict(qc["dynamic"])
    return {}


SG204 = rule("SG204", "stored-quantized-declared-unquantized", ERROR,
      "A module stored quantized is built as an unquantized layer: its packed bytes and scales are misread.")


@SG204
def stored_quantized_declared_plain(ctx: LintContext) -> Iterator[Finding]:
    def pick(rt: Built) -> tuple | None:
        if _misrouted(rt) and rt.stored.quantized and not rt.vllm.scheme.quantized:
            return (role_label(rt.role), rt.stored.format, rt.vllm.method)
        return None

    for (role, stored, method), routes, res in _groups(ctx, pick):
        hint = getattr(res.vllm, "plain_draft_fix", None)
        why = hint(stored) if hint is not None and routes[0].role.is_draft else None
        if why is not None:  # the engine drops the draft's quant config whatever the config declares
            yield SG204.finding(f"{len(routes)} {role} module(s) stored {stored} but built as {method} "
                f"({routes[0].vllm.reason}): {describe(rt.prefix for rt in routes)}",
                _names(routes), why, data=_named(routes))
            continue
        if "quant_config=None" in routes[0].vllm.reason or routes[0].vllm.reason.startswith(("gptq:", "inc:")):
            yield SG204.finding(f"{len(routes)} {role} module(s) stored {stored} but built as {method} "
                f"({routes[0].vllm.reason}); {ctx.engine_name} fails to start: the unquantized layer has no "
                f"parameter for their scale tensors: {describe(rt.prefix for rt in routes)}",
                _names(routes),
                f"store them unquantized (dequantize the {stored} weights to BF16): no {ctx.engine_name} quant "
                f"config builds {stored} layers beside GPTQ ones", data=_named(routes),
            )
            continue
        yield SG204.finding(f"{len(routes)} {role} module(s) stored {stored} but built as {method} "
            f"({routes[0].vllm.reason}): {describe(rt.prefix for rt in routes)}",
            _names(routes),
            f"declare them {stored} (or store them unquantized)", data=_named(routes),
        )


def _fix(ctx: LintContext, res: Resolver, routes: list[Built]) -> Fix:
    """The repair planner's fix (lint/fixes.py ``planned``: what `specguard fix` writes for this
    platform); where it plans none, advice that changes no config."""
    rt = routes[0]
    mxfp4_as_nvfp4 = rt.kind == r.ROUTED_EXPERTS and rt.stored.format == s.MXFP4 and rt.vllm.scheme.format == s.NVFP4
    fix = planned(ctx, res, [p.prefix for p in routes])
    if fix is not None and fix.applicability == Applicability.REENCODE:
        return replace(fix, message=f"{fix.message}: {ctx.engine_name} on {res.platform} ({_class(rt)}) reads no "
                                    "list that routes experts to MXFP4, and BF16 holds MXFP4 values exactly")
    if fix is not None and mxfp4_as_nvfp4:
        return replace(fix, message=f"{fix.message}: on {res.platform}, {ctx.engine_name}'s DeepSeek-V4.1 "
                                    "quant config then routes them to MXFP4 (an ignored_layers entry would load "
                                    "them as BF16)")
    if fix is not None:
        return fix
    if mxfp4_as_nvfp4 and ctx.has_plugin:
        present = rt.declared.pattern is not None and rt.declared.scheme.format == s.MXFP4
        held = f"the config already declares them MXFP4 ({rt.declared.source}); " if present else ""
        where = (f"on {res.platform} {ctx.engine_name} builds every routed-expert layer from moe_quant_algo "
                 f"({_class(rt)} reads no list that routes experts to MXFP4)")
        return Fix(f"{held}{where}: serve with the specguard vLLM plugin, which routes them by the disk")
    plugin = " or serve with the specguard vLLM plugin" if ctx.has_plugin else ""
    return Fix(f"declare these modules {rt.stored.short()}{plugin}")


SG205 = rule("SG205", "engine-build-unknown", WARNING,
             "specguard cannot say what the engine builds for some modules (a quant stack or an architecture it "
             "does not model): it cannot vouch for them, so it says so instead of calling them ok.")


@SG205
def build_unknown(ctx: LintContext) -> Iterator[Finding]:
    causes: dict[tuple[str, str], list[Route]] = defaultdict(list)
    for res, rt in ctx.all_routes():
        if rt.verdict == UNKNOWN and rt.vllm is not None:
            causes[(res.vllm.name, rt.vllm.reason)].append(rt)
    for (engine, cause), routes in causes.items():
        said = cause if engine in cause else f"{engine}: {cause}"  # causes mostly name their engine already
        yield SG205.finding(
            f"{said}; {len(routes)} module(s) not vouched for: {describe(rt.prefix for rt in routes)}",
            _names(routes),
            "check these modules' load another way (LoadGuard: `specguard rule SG205`), or store them with a "
            "stack specguard models (`specguard rule SG205` lists them)",
            data=_named(routes, cause=cause, quant_config=routes[0].vllm.quant_config if routes[0].vllm else None),
        )
