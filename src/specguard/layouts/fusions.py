"""Per-family fusion of checkpoint modules into engine layers, and module kinds.

Each function takes the part of a module name below its layer
(``attn.wq_a``, ``ffn.experts.3.w1``) and returns the engine's name for the
layer that loads it, the module kind, and the parameter path below the layer.
"""

from __future__ import annotations

from typing import NamedTuple

from specguard.layouts import roles as r

_NORM_LEAVES = frozenset({"norm", "enorm", "hnorm", "layernorm", "ln", "ln_f"})
_OTHER_LEAVES = frozenset({
    "attn_sink", "ape", "tid2eid", "e_score_correction_bias", "bias", "sinks",
    "inv_freq", "rotary_emb",
    "d2t", "t2d",  # EAGLE-3 vocabulary maps (llama_eagle3.py: draft_id_to_target_id buffer)
})


class Fused(NamedTuple):
    prefix: str  # below the layer, as the quant prefix names it
    kind: r.ModuleKind
    param: str  # below the layer, where the parameters live


def kind_of(rest: str) -> r.ModuleKind:
    """Module kind of a non-expert module from its last name part."""
    leaf = rest.rsplit(".", 1)[-1]
    if leaf in _NORM_LEAVES or leaf.endswith(("_norm", "norm")):
        return r.NORM
    if leaf in _OTHER_LEAVES or leaf.startswith("hc_"):
        return r.OTHER
    if leaf == "markov_w1":  # qwen3_dspark.py DSparkMarkovHead: an nn.Embedding ...
        return r.EMBEDDING_KIND
    if leaf == "markov_w2":  # ... and a ParallelLMHead
        return r.HEAD_KIND
    return r.LINEAR


def _experts(segs: list[str], at: int, routed: str, stacked: bool = False) -> Fused | None:
    """``…experts[.E[.proj]]`` collapses to ``…experts`` (one RoutedExperts layer).

    ``stacked`` also accepts ``…experts.<proj>`` (gpt-oss stores all experts of
    a projection in one tensor: ``mlp.experts.gate_up_proj_blocks``).
    """
    if len(segs) <= at or segs[at] != "experts":
        return None
    tail = segs[at + 1 :]
    if not tail or tail[0].isdigit() or (stacked and len(tail) == 1):
        layer = ".".join(segs[: at + 1])
        return Fused(layer, r.ROUTED_EXPERTS, f"{layer}.{routed}" if routed else layer)
    return None


def deepseek_v4(rest: str) -> Fused:
    """DeepSeek-V4 decoder layer (vllm/models/deepseek_v4/attention.py, compressor.py,
    nvidia/model.py DeepseekV4MoE/DeepseekV4MLP and ``packed_modules_mapping``)."""
    segs = rest.split(".")
    # DeepseekV4MoE._init_fused_moe_experts: prefix f"{prefix}.experts"; the
    # parameters sit under ``routed_experts`` (fused_moe_make_expert_params_mapping).
    hit = _experts(segs, 1, "routed_experts") if segs[0] == "ffn" else None
    if hit:
        return hit
    if segs in (["attn", "wq_a"], ["attn", "wkv"]):
        return _linear("attn.fused_wqa_wkv")  # DeepseekV4Attention.fused_wqa_wkv
    if len(segs) >= 2 and segs[-2] == "compressor" and segs[-1] in ("wkv", "wgate"):
        return _linear(".".join([*segs[:-1], "fused_wkv_wgate"]))  # DeepseekCompressor
    if segs[:2] == ["ffn", "shared_experts"] and len(segs) == 3:
        proj = {"w1": "gate_up_proj", "w3": "gate_up_proj", "w2": "down_proj"}.get(segs[2])
        if proj:
            return _linear(f"ffn.shared_experts.{proj}")  # DeepseekV4MLP
    return Fused(rest, kind_of(rest), rest)


def deepseek_v3(rest: str, *, fuse_qkv_a: bool = True, mha: bool = False) -> Fused:
    """DeepSeek-V2/V3/V3.2 decoder layer (vllm/model_executor/models/deepseek_v2.py
    DeepseekV2ForCausalLM.packed_modules_mapping; experts under ``mlp.experts``)."""
    segs = rest.split(".")
    hit = _experts(segs, 1, "routed_experts") if segs[0] == "mlp" else None
    if hit:
        return hit
    leaf = segs[-1]
    head = ".".join(segs[:-1])
    if fuse_qkv_a and segs[0] == "self_attn" and len(segs) == 2 and leaf in (
        "q_a_proj", "kv_a_proj_with_mqa"
    ):
        return _linear("self_attn.fused_qkv_a_proj")
    if mha and segs[0] == "self_attn" and len(segs) == 2 and leaf in ("q_proj", "k_proj", "v_proj"):
        return _linear("self_attn.qkv_proj")
    if segs[0] == "mlp" and leaf in ("gate_proj", "up_proj"):
        return _linear(f"{head}.gate_up_proj")
    return Fused(rest, kind_of(rest), rest)


def generic(rest: str) -> Fused:
    """The fusions most vLLM models share: q/k/v -> qkv_proj, gate/up -> gate_up_proj,
    per-expert linears -> one ``experts`` layer."""
    segs = rest.split(".")
    for at, seg in enumerate(segs):
        if seg == "experts":
            hit = _experts(segs, at, "", stacked=True)
            if hit:
                return hit
    leaf = segs[-1]
    head = ".".join(segs[:-1])
    if leaf in ("q_proj", "k_proj", "v_proj") and head.endswith(("self_attn", "attn", "attention")):
        return _linear(f"{head}.qkv_proj")
    if leaf in ("gate_proj", "up_proj"):
        return _linear(f"{head}.gate_up_proj" if head else "gate_up_proj")
    return Fused(rest, kind_of(rest), rest)


def _linear(prefix: str) -> Fused:
    return Fused(prefix, r.LINEAR, prefix)
