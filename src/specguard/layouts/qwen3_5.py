"""Qwen3.5 / 3.6 (dense and MoE) and Qwen3-Next: hybrid Gated DeltaNet layers and an
``mtp.*`` drafter.

vLLM 0.33 builds the drafter with quant prefixes that keep ``mtp.``
(qwen3_5_mtp.py / qwen3_next_mtp.py: ``maybe_prefix(prefix, "mtp")`` with the
proposer's empty prefix): ``mtp.fc``, ``mtp.layers.{j}.self_attn.qkv_proj``,
``mtp.layers.{j}.mlp.experts``; its parameters live under ``model.`` (the
loader rewrites ``mtp.`` to ``model.``). Main-stack names keep the checkpoint's
root here (vLLM's ``language_model.model.`` for the multimodal classes): the
declared stage matches the quant config's lists unrenamed, so both sides agree.

Fusions (qwen3_next.py ``Qwen3NextModel.hf_to_vllm_mapper``, qwen3_5.py
``Qwen3_5Model.hf_to_vllm_mapper``): q/k/v -> ``qkv_proj``; gate/up ->
``gate_up_proj`` (MLP and shared expert); ``in_proj_qkv``/``in_proj_z`` ->
``in_proj_qkvz``; ``in_proj_b``/``in_proj_a`` -> ``in_proj_ba``.
"""

from __future__ import annotations

from specguard.layouts import fusions
from specguard.layouts import roles as r
from specguard.layouts.fusions import Fused
from specguard.layouts.generic import GenericLayout

QWEN3_5_TYPES = frozenset({"qwen3_5", "qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text",
                           "qwen3_next", "qwen3_next_mtp", "qwen3_5_mtp"})
EXPERT_PROJECTIONS = ("gate_proj", "up_proj", "down_proj", "gate_up_proj")
_GDN_FUSED = {"in_proj_qkv": "in_proj_qkvz", "in_proj_z": "in_proj_qkvz",
              "in_proj_b": "in_proj_ba", "in_proj_a": "in_proj_ba"}
_NORMS = ("pre_fc_norm_embedding", "pre_fc_norm_hidden")
_OTHER = ("A_log", "dt_bias")


def qwen3_5(rest: str) -> Fused:
    segs = rest.split(".")
    if "experts" in segs:
        at = segs.index("experts")
        tail = segs[at + 1:]
        # auto-round's MTP export names experts ``experts.{proj}.{e}``: still the
        # experts layer (whether vLLM's loader can map the names is SG702's question)
        if len(tail) == 2 and tail[0] in EXPERT_PROJECTIONS and tail[1].isdecimal():
            layer = ".".join(segs[: at + 1])
            return Fused(layer, r.ROUTED_EXPERTS, layer)
    leaf = segs[-1]
    head = ".".join(segs[:-1])
    if leaf in _GDN_FUSED and head.endswith("linear_attn"):
        return Fused(f"{head}.{_GDN_FUSED[leaf]}", r.LINEAR, f"{head}.{_GDN_FUSED[leaf]}")
    if leaf in _NORMS:
        return Fused(rest, r.NORM, rest)
    if leaf in _OTHER:
        return Fused(rest, r.OTHER, rest)
    return fusions.generic(rest)


class Qwen3_5Layout(GenericLayout):
    """``mtp.*`` is the drafter (runtime layer N + j for ``mtp.layers.{j}``)."""

    family = "qwen3_5"

    def _fuse(self, module: str) -> Fused:
        return qwen3_5(module)
