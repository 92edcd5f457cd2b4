"""SG2xx: what is stored against what the config makes the engine build."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from typing import Protocol, TypeGuard

from specguard.declared import DeclaredScheme
from specguard.engines import EngineChoice
from specguard.engines.vllm.v0_33 import ENGINE
from specguard.formats import scheme as s
from specguard.formats.scheme import Scheme
from specguard.layouts import roles as r
from specguard.layouts.roles import ModuleKind, Role, role_label
from specguard.lint.context import LintContext, describe
from specguard.lint.finding import ERROR, Finding
from specguard.lint.registry import rule
from specguard.resolve import MISROUTED, Route, Verdict

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
    for _, rt in ctx.all_routes():
        if not _built(rt):
            continue
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
    def pick(rt: Built) -> tuple | None:
        if _misrouted(rt) and rt.stored.quantized and rt.vllm.scheme.quantized:
            return (role_label(rt.role), rt.kind, rt.stored.format, rt.vllm.method, rt.declared.source)
        return None

    for (role, kind, _stored, method, source), routes in _groups(ctx, pick):
        fix = _fix(routes[0])
        yield Finding(
            "SG201", ERROR,
            f"{len(routes)} {role} {kind.replace('_', ' ')} layer(s) stored {routes[0].stored.short()}, "
            f"declared {routes[0].vllm.scheme.short()} by {source}; {ENGINE} builds {method}: "
            f"{describe(rt.prefix for rt in routes)}",
            _names(routes), fix,
        )


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
    out: list[str] = []
    for res in ctx.resolvers:
        for name in rt.checkpoint_names:
            mod = res.table.modules.get(name)
            if mod is None:
                continue
            for alternatives in want:
                if not any(a in mod.params for a in alternatives) and alternatives[0] not in out:
                    out.append(alternatives[0])
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
        yield Finding(
            "SG203", ERROR,
            f"{len(routes)} {role} module(s) stored {stored} but built {built} ({source}): "
            f"{describe(rt.prefix for rt in routes)}",
            _names(routes),
            "exclude these modules with a pattern that matches the engine's runtime prefixes "
            "(see SG101), or build the draft without the target's quant config",
        )


@rule("SG204", "stored-quantized-declared-unquantized", ERROR,
      "A module stored quantized is built as an unquantized layer: its packed bytes and scales are misread.")
def stored_quantized_declared_plain(ctx: LintContext) -> Iterator[Finding]:
    def pick(rt: Built) -> tuple | None:
        if _misrouted(rt) and rt.stored.quantized and not rt.vllm.scheme.quantized:
            return (role_label(rt.role), rt.stored.format, rt.vllm.method)
        return None

    for (role, stored, method), routes in _groups(ctx, pick):
        yield Finding(
            "SG204", ERROR,
            f"{len(routes)} {role} module(s) stored {stored} but built as {method} "
            f"({routes[0].vllm.reason}): {describe(rt.prefix for rt in routes)}",
            _names(routes),
            f"declare them {stored} (or store them unquantized)",
        )


def _fix(rt: Built) -> str:
    if rt.kind == r.ROUTED_EXPERTS and rt.stored.format == s.MXFP4 and rt.vllm.scheme.format == s.NVFP4:
        return (f'add `"ignore": ["mtp.*"]` to quantization_config ({ENGINE}\'s DeepSeek-V4.1 quant config '
                "routes matching experts to MXFP4 on CUDA/ROCm), or serve with the specguard vLLM plugin; "
                "an ignored_layers entry would load them as BF16, not MXFP4")
    return f"declare these modules {rt.stored.short()} or serve with the specguard vLLM plugin"
