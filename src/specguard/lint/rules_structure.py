"""SG5xx: fused shards and group/block sizes against the shapes they must tile."""

from __future__ import annotations

from collections.abc import Iterator
from itertools import chain, repeat
from operator import attrgetter, itemgetter, methodcaller

import numpy as np

from specguard.formats import scheme as s
from specguard.layouts.roles import ModuleKind
from specguard.lint.context import LintContext, describe
from specguard.lint.finding import ERROR, WARNING, Finding
from specguard.lint.registry import rule

GLOBAL_SCALES = ("weight_scale_2", "weight_global_scale")
# the expert projections vLLM's expert mapping loads into one w13 (engines/vllm/loader.py CONVENTIONS:
# DeepSeek-V4's w1/w3, the HF names gate_proj/up_proj)
_W13_SHARD = methodcaller("endswith", (".w1", ".w3", ".gate_proj", ".up_proj"))
_EXPERT = itemgetter(0)  # of str.rpartition("."): the expert module both shards belong to


SG501 = rule("SG501", "fused-shards-disagree", ERROR,
      "Shards the engine fuses into one layer (q/k/v, gate/up, w1/w3) are stored in different schemes or "
      "with different per-tensor global scales.", reads_bytes=True)


@SG501
def fused_shards(ctx: LintContext) -> Iterator[Finding]:
    for _, rt in ctx.all_routes():
        if rt.stored is not None and rt.stored.format == s.MIXED:
            yield SG501.finding(f"{rt.prefix} fuses shards stored differently ({rt.stored.reason})",
                          rt.checkpoint_names, "store every shard of a fused layer in one scheme")
    for r in ctx.resolvers:
        yield from _global_scales(ctx, r)


def _global_scales(ctx: LintContext, r) -> Iterator[Finding]:
    """vLLM keeps one global scale per fused layer (a linear's: the max; a routed expert's w13: w1's,
    warning "w1_weight_scale_2 must match w3_weight_scale_2", quantization/modelopt.py): shards
    quantized against different ones lose precision in all but one."""
    experts_kind = ModuleKind.ROUTED_EXPERTS
    routes = ctx.routes(r)
    fused = {n: rt.prefix for rt in routes if len(rt.checkpoint_names) > 1 and rt.kind != experts_kind
             for n in rt.checkpoint_names}
    experts = [rt.checkpoint_names for rt in routes if rt.kind == experts_kind]
    if not fused and not any(experts):
        return
    samples = ctx.scales(r)
    # each per-tensor global scale's first element, gathered column by column (no loop over every scale)
    first = np.zeros(len(samples), dtype=np.float64)
    read = np.zeros(len(samples), dtype=bool)  # a float scale with an element read
    for col in samples.columns:
        if col.dtype in ("F32", "BF16", "F16"):
            first[col.owners] = col.values[col.starts]
            read[col.owners] = True
    wanted = np.flatnonzero(read & samples.per_tensor & samples.param_in(GLOBAL_SCALES))
    # the fused layer each module's scale joins: its route's, or for w1 and w3 of one expert their w13
    # (route by route: no set of every expert module first, 25,000 on benchmarks/lint.py)
    shards = list(filter(_W13_SHARD, chain.from_iterable(experts)))  # C-level maps: 25,000 experts here
    layer_of = dict(zip(shards, map(_EXPERT, map(str.rpartition, shards, repeat("."))), strict=True))
    layer_of.update(fused)
    layers = list(map(layer_of.get, samples.modules_of(wanted)))
    at = [j for j, layer in enumerate(layers) if layer is not None]
    named: list[str] = list(map(layers.__getitem__, at))  # type: ignore[arg-type]  # (``at``: none is None)
    keys = list(zip(named, samples.params_of(wanted[at]), strict=True))
    # the scales grouped by (layer, parameter), numbered in order of first appearance: a few ufuncs
    # over every group instead of a Python list per group (25,000 experts on benchmarks/lint.py)
    number = {k: i for i, k in enumerate(dict.fromkeys(keys))}
    group = np.fromiter(map(number.__getitem__, keys), np.int64, len(keys))
    value = first[wanted[at]]
    size = np.bincount(group, minlength=len(number))
    finite = np.bincount(group, weights=np.isfinite(value), minlength=len(number)) == size
    low, high = np.full(len(number), np.inf), np.full(len(number), -np.inf)
    with np.errstate(invalid="ignore"):  # a NaN scale (SG401's finding) leaves its group out, below
        np.minimum.at(low, group, value)
        np.maximum.at(high, group, value)
    keyed = list(number)
    bad = [keyed[i] for i in np.flatnonzero((size > 1) & finite & (high > low * 1.0001)).tolist()]
    if bad:
        yield SG501.finding(
            f"{len(bad)} fused layer(s) whose shards carry different {bad[0][1]}: {describe(k[0] for k in bad)}",
            tuple(k[0] for k in bad), "quantize fused shards against one shared global scale", severity=WARNING,
        )


_SCHEME = attrgetter("scheme")

SG502 = rule("SG502", "group-size-does-not-divide", WARNING,
      "A group or block size does not divide the dimension it tiles, so the last group is partial.")


@SG502
def group_divides(ctx: LintContext) -> Iterator[Finding]:
    partial: list[str] = []
    broken: list[str] = []
    for r in ctx.resolvers:
        # modules share few scheme objects (a layer's experts: one): the modules whose scheme can
        # give a finding, picked by a C-level map over the table, are the only ones looked at
        stored = list(map(_SCHEME, r.table))
        schemes = dict(zip(map(id, stored), stored, strict=True))
        tiled = {k for k, sc in schemes.items() if (sc.format == s.FP8_BLOCK and sc.block)
                 or (sc.format in (s.INT4_GROUP, s.INT8_GROUP) and sc.group_size is None)}
        if not tiled:
            continue
        for m in (m for m, sc in zip(r.table, stored, strict=True) if id(sc) in tiled):
            sc = m.scheme
            w = m.params.get("weight") or m.params.get("weight_packed") or m.params.get("qweight")
            if w is None or len(w.shape) < 2:
                continue
            if sc.format == s.FP8_BLOCK and sc.block:
                # Partial blocks along the output dim are routine (DeepSeek-V3 kv_a_proj_with_mqa has 576
                # rows) and every kernel handles them; along the reduction dim some kernels do not.
                if w.shape[-1] % sc.block[1]:
                    partial.append(m.name)
            elif sc.format in (s.INT4_GROUP, s.INT8_GROUP) and sc.group_size is None:
                broken.append(m.name)
    if partial:
        yield SG502.finding(f"{len(partial)} FP8 block-quantized module(s) end in a partial block along the input "
                      f"dim (not a multiple of the block): {describe(partial)}", tuple(partial),
                      "pad to a multiple of the block; some FP8 block kernels require it")
    if broken:
        yield SG502.finding(f"{len(broken)} group-quantized module(s) whose scale count does not divide "
                            f"the input dimension: {describe(broken)}", tuple(broken),
                            "re-quantize with a group size that divides the input dimension", severity=ERROR)
