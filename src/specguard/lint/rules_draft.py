"""SG3xx: the draft region the config promises against the one on disk."""

from __future__ import annotations

from collections.abc import Iterator

from specguard.engines.vllm.v0_33 import ENGINE
from specguard.lint.context import LintContext, describe
from specguard.lint.finding import ERROR, WARNING, Finding
from specguard.lint.registry import rule


def _stored_draft_layers(ctx: LintContext, r) -> set[int]:
    """Runtime layers with draft tensors (drafter-wide modules such as DSpark's main_proj have no layer)."""
    return {rt.role.layer for rt in ctx.routes(r)
            if rt.stored is not None and rt.role.is_draft and rt.role.layer is not None}


@rule("SG301", "draft-weights-missing", ERROR,
      "The config promises draft (MTP/DSpark) layers but the checkpoint stores none of their tensors.")
def draft_missing(ctx: LintContext) -> Iterator[Finding]:
    for r in ctx.resolvers:
        promised = list(r.layout.draft_layers)
        if promised and not _stored_draft_layers(ctx, r):
            n = r.layout.num_hidden_layers
            yield Finding(
                "SG301", ERROR,
                f"config promises {len(promised)} draft layer(s) (runtime layers {promised[0]}-{promised[-1]}, "
                f"num_hidden_layers {n}) but no draft tensor is stored: {_engine_on_missing_draft(r, promised[0])}",
                tuple(f"model.layers.{i}" for i in promised),
                "export the draft weights with the checkpoint, or set num_nextn_predict_layers to 0",
            )


# The MTP loaders that check every promised layer was loaded (vLLM 0.33:
# models/deepseek_mtp.py and models/deepseek_v4/*/mtp.py ``load_weights``, gated by
# model_loader/mtp_validation.py, on by default).
_MTP_CHECKED = ("deepseek_v3", "deepseek_v4")


def _engine_on_missing_draft(r, first: int) -> str:
    if r.layout.family in _MTP_CHECKED:
        return (f"with speculative decoding on, {r.vllm.name} refuses to load it (ValueError: MTP speculative "
                f"decoding layer {first} weights missing from checkpoint)")
    return "an engine would serve a randomly initialised drafter (0 % acceptance)"


@rule("SG302", "draft-layer-count-mismatch", WARNING,
      "The number of draft layers stored differs from the number the config declares.")
def draft_count(ctx: LintContext) -> Iterator[Finding]:
    for r in ctx.resolvers:
        promised = set(r.layout.draft_layers)
        stored = _stored_draft_layers(ctx, r)
        if not stored or stored == promised:
            continue
        extra, absent = sorted(stored - promised), sorted(promised - stored)
        parts = []
        if absent:
            parts.append(f"runtime layer(s) {absent} declared but not stored")
        if extra:
            parts.append(f"runtime layer(s) {extra} stored but not declared")
        yield Finding(
            "SG302", WARNING, f"draft layers: {'; '.join(parts)}",
            tuple(f"model.layers.{i}" for i in absent + extra),
            "make num_nextn_predict_layers agree with the draft layers stored",
        )


@rule("SG303", "draft-weights-outside-index", ERROR,
      "Draft tensors are stored in a file the index never names: vLLM reads only indexed files, so the "
      "drafter is never loaded.")
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
        yield Finding(
            "SG303", ERROR,
            f"{len(names)} draft tensor(s) stored only in {', '.join(files)}, which the index never names; "
            f"{ENGINE} reads indexed files only (filter_duplicate_safetensors_files), {effect}: "
            f"{describe(names)}",
            tuple(names),
            f"add the {len(names)} names to weight_map with the value "
            f"{' / '.join(repr(f) for f in files)} (and their {nbytes:,} bytes to metadata.total_size)",
            data={"files": files, "tensors": len(names), "bytes": nbytes,
                  "loader": "unwritten" if quantized else "fails to start"},
        )
