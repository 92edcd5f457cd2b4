"""Helpers the strategies share: which problems are which, grouped per module."""

from __future__ import annotations

from collections.abc import Iterable

from specguard.formats import scheme as s
from specguard.layouts import roles as r
from specguard.repair.plan import Overlay, Problem
from specguard.resolve import MISROUTED


def misrouted(p: Problem) -> bool:
    rt = p.route
    return rt.verdict == MISROUTED and rt.stored is not None and rt.vllm is not None


def mxfp4_experts_built_nvfp4(p: Problem) -> bool:
    """S1/S4: DeepSeek-V4 routed experts stored MXFP4, built NVFP4 by the global ``moe_quant_algo``."""
    rt = p.route
    if not misrouted(p) or rt.stored is None or rt.vllm is None:
        return False
    return (rt.kind == r.ROUTED_EXPERTS and rt.stored.format == s.MXFP4
            and rt.vllm.scheme.format == s.NVFP4 and _v41_class(p))


def _v41_class(p: Problem) -> bool:
    """Built by DeepSeek-V4(.1)'s own quant config (the engine model names its classes)."""
    return p.route.vllm is not None and p.route.vllm.quant_config in getattr(p.resolver.vllm, "v41_quant_configs", ())


def stored_plain_built_quantized(p: Problem) -> bool:
    """S2: a module stored BF16/FP16/FP32 that the config makes the engine build quantized."""
    rt = p.route
    if not misrouted(p) or rt.stored is None or rt.vllm is None:
        return False
    return not rt.stored.quantized and rt.vllm.scheme.quantized


def by_module(problems: Iterable[Problem]) -> dict[tuple[int, str], list[Problem]]:
    """Problems keyed by (overlay, runtime prefix): one module, every platform it failed on."""
    out: dict[tuple[int, str], list[Problem]] = {}
    for p in problems:
        out.setdefault((id(p.overlay), p.route.prefix), []).append(p)
    return out


def settle(problems: Iterable[Problem]) -> None:
    for p in problems:
        p.handled = True


def num_hidden_layers(target: Overlay) -> int:
    """The target's layer count: vLLM numbers a separate drafter's layers after the target's."""
    from specguard.layouts.registry import text_config

    return int(text_config(target.config).get("num_hidden_layers") or 0)
