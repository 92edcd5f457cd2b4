"""SG3xx: the draft region the config promises against the one on disk."""

from __future__ import annotations

from collections.abc import Iterator

from specguard.lint.context import LintContext, describe
from specguard.lint.finding import ERROR, WARNING, Finding
from specguard.lint.fixes import planned
from specguard.lint.registry import rule
from specguard.repair.strategies.draft_layers import NO_DRAFTER


def _stored_draft_layers(ctx: LintContext, r) -> set[int]:
    """Runtime layers with draft tensors (drafter-wide modules such as DSpark's main_proj have no layer)."""
    return {rt.role.layer for rt in ctx.routes(r)
            if rt.stored is not None and rt.role.is_draft and rt.role.layer is not None}


SG301 = rule("SG301", "draft-weights-missing", ERROR,
      "The config promises draft (MTP/DSpark) layers but the checkpoint stores none of their tensors.")


@SG301
def draft_missing(ctx: LintContext) -> Iterator[Finding]:
    for r in ctx.resolvers:
        promised = list(r.layout.draft_layers)
        if promised and not _stored_draft_layers(ctx, r):
            n = r.layout.num_hidden_layers
            yield SG301.finding(
                f"config promises {len(promised)} draft layer(s) (runtime layers {promised[0]}-{promised[-1]}, "
                f"num_hidden_layers {n}) but no draft tensor is stored: {_consequence(r, promised[0])}",
                tuple(f"model.layers.{i}" for i in promised),
                planned(ctx, r, [f"model.layers.{i}" for i in promised],
                        f"the config then says what is stored; {NO_DRAFTER}")
                or "export the draft weights with the checkpoint, or set num_nextn_predict_layers to 0",
            )


def _consequence(r, layer: int) -> str:
    """What vLLM 0.33 does with a promised draft that has no tensor."""
    if r.layout.draft_kind == "mtp" and r.layout.family in ("deepseek_v3", "deepseek_v4"):
        # deepseek_mtp.py / models/deepseek_v4/*/mtp.py load_weights: the MTP completeness check
        # (model_loader/mtp_validation.py, on by default)
        return (f"{r.vllm.name} refuses to load the MTP drafter (ValueError: MTP speculative decoding layer {layer} "
                "weights missing from checkpoint); the target alone serves")
    return "an engine would serve a randomly initialised drafter (0 % acceptance)"


SG302 = rule("SG302", "draft-layer-count-mismatch", WARNING,
      "The number of draft layers stored differs from the number the config declares.")


@SG302
def draft_count(ctx: LintContext) -> Iterator[Finding]:
    for r in ctx.resolvers:
        promised = set(r.layout.draft_layers)
        stored = _stored_draft_layers(ctx, r)
        if not stored or stored == promised:
            continue
        if any(rt.vllm is not None and rt.vllm.method == "not built" for rt in ctx.routes(r)):
            continue  # the stored draft is another method's (SG304): no count fits it, none to advise
        extra, absent = sorted(stored - promised), sorted(promised - stored)
        parts = []
        if absent:
            parts.append(f"runtime layer(s) {absent} declared but not stored")
        if extra:
            parts.append(f"runtime layer(s) {extra} stored but not declared")
        yield SG302.finding(f"draft layers: {'; '.join(parts)}",
            tuple(f"model.layers.{i}" for i in absent + extra), _count_fix(r, len(stored)),
        )


def _count_fix(r, stored: int) -> str:
    """Name the field the serving draft model reads, and only that one: a DSpark model
    counts its stages from ``n_mtp_layers`` (dspark.py), which MTP readers ignore, while
    ``num_nextn_predict_layers`` also sets how many MTP layers other engines build."""
    if r.layout.draft_kind == "dspark":
        return (f'set "n_mtp_layers": {stored} in config.json (read by vLLM 0.33\'s DSpark models only; '
                "leave num_nextn_predict_layers, which MTP readers use, as it is)")
    return f'set "num_nextn_predict_layers": {stored} to match the draft layers stored'


SG303 = rule("SG303", "draft-weights-outside-index", ERROR,
      "Draft tensors are stored in a file the index never names: vLLM reads only indexed files, so the "
      "drafter is never loaded.")


@SG303
def draft_outside_index(ctx: LintContext) -> Iterator[Finding]:
    for r in ctx.resolvers:
        c = r.checkpoint
        names = [n for n in c.outside_index if r.layout.role(n).is_draft]
        if not names:
            continue
        files = sorted({c.tensors[n].file for n in names})
        nbytes = sum(c.tensors[n].offsets[1] - c.tensors[n].offsets[0] for n in names)
        quantized = r.declared_config.stack != "none"
        if quantized:
            # default_loader.py load_weights: track_weights_loading only when quantization is None
            effect = "unchecked for a quantized model: the drafter keeps torch.empty, every draft is rejected"
        else:
            effect = "vLLM fails to start: 'Following weights were not initialized from checkpoint'"
        yield SG303.finding(
            f"{len(names)} draft tensor(s) stored only in {', '.join(files)}, which the index never names; "
            f"{ctx.engine_name} reads indexed files only (filter_duplicate_safetensors_files), {effect}: "
            f"{describe(names)}",
            tuple(names),
            f"add the {len(names)} names to weight_map with the value "
            f"{' / '.join(repr(f) for f in files)} (and their {nbytes:,} bytes to metadata.total_size)",
            data={"files": files, "tensors": len(names), "bytes": nbytes,
                  "loader": "unwritten" if quantized else "fails to start"},
        )


SG304 = rule("SG304", "draft-inputs-missing", ERROR,
      "The draft method builds input modules (MTP's e_proj/h_proj/enorm/hnorm, DSpark's main_proj) that the "
      "stored draft lacks: they are never loaded and stay uninitialized.")


@SG304
def draft_inputs_missing(ctx: LintContext) -> Iterator[Finding]:
    for r in ctx.resolvers:
        stored = _stored_draft_layers(ctx, r)
        if not stored:
            continue  # no draft at all: SG301
        absent = [p for layer, prefixes in r.layout.draft_inputs() if layer is None or layer in stored
                  for p in prefixes if r.canonical(p) is None]
        if not absent:
            continue
        kind = r.layout.draft_kind or "mtp"
        leaves = list(dict.fromkeys(p.rsplit(".", 1)[-1] for p in absent))
        yield SG304.finding(
            f"draft method {kind}: {ctx.engine_name} builds {', '.join(leaves)} for the draft but the checkpoint "
            "stores "
            f"none of them ({len(absent)} module(s): {', '.join(absent[:4])}{' ...' if len(absent) > 4 else ''}); "
            "they would stay uninitialized",
            tuple(absent), _method_fix(ctx, r, kind),
        )


def _method_fix(ctx: LintContext, r, kind: str) -> str:
    """Name the draft method whose own modules the checkpoint stores, when that is another."""
    reasons = " ".join(rt.vllm.reason for rt in ctx.routes(r) if rt.vllm is not None and rt.vllm.method == "not built")
    for method, mark in (("dspark", "a DSpark module"), ("mtp", "an MTP module")):
        if method != kind and mark in reasons:
            return f"serve it with the draft method it stores modules for (speculative_config method {method!r})"
    return f"store the {kind} draft's input modules, or serve with the draft method the stored draft is for"
