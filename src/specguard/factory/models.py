"""The modules of the families the scenarios use, named as their publishers name them.

DeepSeek-V4 native (``layers.{i}.attn.wq_a``, ``layers.{i}.ffn.experts.{e}.w1``,
``mtp.{j}.e_proj``, ``embed``, ``head``) and DeepSeek-V3 HF
(``model.layers.{i}.self_attn.q_a_proj``, ``model.layers.{i}.mlp.experts.{e}.gate_proj``,
MTP at ``model.layers.{N+j}`` with ``enorm``/``hnorm``/``eh_proj``/``shared_head``).
Qwen3.5/3.6 HF (``model.language_model.layers.{i}.linear_attn.in_proj_qkv``,
``...mlp.experts.{e}.gate_proj``, the drafter at ``mtp.fc`` / ``mtp.layers.{j}``).
Only the modules that matter for routing and loading are written: linears,
experts, the router, norms, embedding and head (no attention sinks, hyper-connection
or compressor/indexer tensors).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from specguard.layouts.roles import DRAFT, DSPARK, EMBEDDING, HEAD, MAIN

# Module kinds the scenario recipes choose a storage for.
ATTN = "attn"  # attention projections
EXPERT = "expert"  # routed expert w1/w2/w3 (gate/up/down)
SHARED = "shared"  # shared expert
DENSE = "dense"  # dense MLP (DeepSeek-V3 first_k_dense_replace layers)
PROJ = "proj"  # draft input projections: e_proj/h_proj/eh_proj/main_proj
GATE = "gate"  # MoE router (BF16 weight + F32 bias)
NORM = "norm"
EMBED = "embed"
LM_HEAD = "head"

DSV4 = "deepseek_v4"
DSV3 = "deepseek_v3"


@dataclass(frozen=True)
class Sizes:
    """Model dimensions, the factory's and the reference decoder's (refdecoder/model.py names
    them as DeepSeek's ModelArgs in its weights' metadata). Every quantized dim is a multiple
    of 32 (MXFP4 groups), hence of 16 (NVFP4); FP8 128x128 blocks may be partial at the edge (DeepSeek-V3's
    ``kv_a_proj_with_mqa``: kv_lora_rank + qk_rope_head_dim = 576) and a whole
    weight may fit in one block (the ``one-block`` and ``odd`` presets)."""

    hidden: int = 256
    vocab: int = 512
    layers: int = 2
    experts: int = 4
    experts_per_token: int = 2
    moe_inter: int = 128
    shared_inter: int = 128
    dense_inter: int = 256
    heads: int = 2
    head_dim: int = 128  # V4
    q_lora: int = 128
    o_lora: int = 128
    o_groups: int = 2
    kv_lora: int = 128  # V3
    qk_nope: int = 64
    qk_rope: int = 64
    v_head: int = 64
    shard_bytes: int = 512 * 1024
    # What the reference decoder (refdecoder/model.py) also reads: V4's RoPE channels per head,
    # MTP blocks, positions, and its numerics.
    rope_dim: int = 64
    mtp_layers: int = 1
    max_seq_len: int = 2048
    rope_theta: float = 10000.0
    norm_eps: float = 1e-6

    def __post_init__(self) -> None:
        # 32 keeps every MXFP4/NVFP4 group whole; FP8 blocks may end in a partial edge block
        # (DeepSeek-V3's kv_a_proj_with_mqa), and a weight may fit in one block.
        for name in ("hidden", "moe_inter", "shared_inter", "dense_inter", "q_lora", "o_lora",
                     "kv_lora", "head_dim"):
            if getattr(self, name) % 32:
                raise ValueError(f"Sizes.{name}={getattr(self, name)} must be a multiple of 32")


SIZES: dict[str, Sizes] = {
    "tiny": Sizes(),
    "small": Sizes(hidden=512, vocab=1024, layers=3, experts=8, moe_inter=256, shared_inter=256,
                   dense_inter=512, heads=4, q_lora=256, o_lora=256, kv_lora=256,
                   shard_bytes=4 * 1024 * 1024),
    # Every linear no larger than one 128x128 FP8 block: one scale element per weight, a
    # shape that fits per-tensor and block-wise FP8 alike (issue 12 item 1).
    "one-block": Sizes(hidden=128, vocab=256, moe_inter=128, shared_inter=128, dense_inter=128, heads=1,
                       o_groups=1, q_lora=128, o_lora=128, kv_lora=64, qk_nope=32, qk_rope=32, v_head=64),
    # Dims that are not multiples of the 128 block: partial edge blocks everywhere.
    # vLLM needs 128-multiples only where it fuses or shards: every fused shard but the last
    # (validate_fp8_block_shape) and block-FP8 MoE intermediates (validate_fp8_block_shape_moe).
    "odd": Sizes(hidden=320, vocab=640, moe_inter=128, shared_inter=256, dense_inter=384, heads=3,
                 head_dim=160, q_lora=128, o_lora=224, o_groups=3, kv_lora=160, qk_nope=32, qk_rope=32, v_head=96),
}


@dataclass(frozen=True)
class ModuleSpec:
    """One module the factory writes: its checkpoint name, weight shape, kind, role."""

    name: str
    shape: tuple[int, ...]
    kind: str
    role: str
    draft_index: int | None = None
    extras: tuple[tuple[str, tuple[int, ...], str], ...] = field(default=())  # (suffix, shape, dtype)


def _lin(name: str, out: int, inp: int, kind: str, role: str, j: int | None) -> ModuleSpec:
    return ModuleSpec(name, (out, inp), kind, role, j)


def _norm(name: str, dim: int, role: str, j: int | None) -> ModuleSpec:
    return ModuleSpec(name, (dim,), NORM, role, j)


# ------------------------------------------------------------------ V4 native

def _v4_block(p: str, s: Sizes, role: str, j: int | None) -> Iterator[ModuleSpec]:
    """One DeepSeek-V4 decoder block under prefix ``p`` (``layers.3`` or ``mtp.0``)."""
    h = s.hidden
    yield _norm(f"{p}.attn_norm", h, role, j)
    yield _lin(f"{p}.attn.wq_a", s.q_lora, h, ATTN, role, j)
    yield _norm(f"{p}.attn.q_norm", s.q_lora, role, j)
    yield _lin(f"{p}.attn.wq_b", s.heads * s.head_dim, s.q_lora, ATTN, role, j)
    yield _lin(f"{p}.attn.wkv", s.head_dim, h, ATTN, role, j)
    yield _norm(f"{p}.attn.kv_norm", s.head_dim, role, j)
    yield _lin(f"{p}.attn.wo_a", s.o_groups * s.o_lora, s.heads * s.head_dim // s.o_groups,
               ATTN, role, j)
    yield _lin(f"{p}.attn.wo_b", h, s.o_groups * s.o_lora, ATTN, role, j)
    yield _norm(f"{p}.ffn_norm", h, role, j)
    yield ModuleSpec(f"{p}.ffn.gate", (s.experts, h), GATE, role, j,
                     (("bias", (s.experts,), "F32"),))
    for e in range(s.experts):
        yield _lin(f"{p}.ffn.experts.{e}.w1", s.moe_inter, h, EXPERT, role, j)
        yield _lin(f"{p}.ffn.experts.{e}.w2", h, s.moe_inter, EXPERT, role, j)
        yield _lin(f"{p}.ffn.experts.{e}.w3", s.moe_inter, h, EXPERT, role, j)
    yield _lin(f"{p}.ffn.shared_experts.w1", s.shared_inter, h, SHARED, role, j)
    yield _lin(f"{p}.ffn.shared_experts.w2", h, s.shared_inter, SHARED, role, j)
    yield _lin(f"{p}.ffn.shared_experts.w3", s.shared_inter, h, SHARED, role, j)


def dsv4_main(s: Sizes) -> list[ModuleSpec]:
    mods = [ModuleSpec("embed", (s.vocab, s.hidden), EMBED, EMBEDDING)]
    for i in range(s.layers):
        mods += _v4_block(f"layers.{i}", s, MAIN, None)
    mods += [_norm("norm", s.hidden, MAIN, None),
             ModuleSpec("head", (s.vocab, s.hidden), LM_HEAD, HEAD)]
    return mods


def dsv4_mtp(s: Sizes, n: int) -> list[ModuleSpec]:
    """``num_nextn_predict_layers`` MTP blocks: e_proj/h_proj in, shared head norm out."""
    mods: list[ModuleSpec] = []
    for j in range(n):
        p = f"mtp.{j}"
        mods += [_norm(f"{p}.enorm", s.hidden, DRAFT, j), _norm(f"{p}.hnorm", s.hidden, DRAFT, j),
                 _lin(f"{p}.e_proj", s.hidden, s.hidden, PROJ, DRAFT, j),
                 _lin(f"{p}.h_proj", s.hidden, s.hidden, PROJ, DRAFT, j)]
        mods += _v4_block(p, s, DRAFT, j)
        mods.append(_norm(f"{p}.norm", s.hidden, DRAFT, j))
    return mods


def dspark_target_layers(s: Sizes) -> list[int]:
    return [0, s.layers - 1]


def dsv4_dspark(s: Sizes, n: int) -> list[ModuleSpec]:
    """DSpark drafter stages ``mtp.{0..n-1}``: ``mtp.0.main_proj`` combines the
    target's hidden states; the last stage carries the final norm."""
    k = len(dspark_target_layers(s))
    mods = [_lin("mtp.0.main_proj", s.hidden, s.hidden * k, PROJ, DRAFT, 0),
            _norm("mtp.0.main_norm", s.hidden, DRAFT, 0)]
    for j in range(n):
        mods += _v4_block(f"mtp.{j}", s, DRAFT, j)
    mods.append(_norm(f"mtp.{n - 1}.norm", s.hidden, DRAFT, n - 1))
    return mods


# ------------------------------------------------------------------ V3 HF

def _v3_block(i: int, s: Sizes, role: str, j: int | None, dense: bool) -> Iterator[ModuleSpec]:
    p, h = f"model.layers.{i}", s.hidden
    qk = s.qk_nope + s.qk_rope
    yield _norm(f"{p}.input_layernorm", h, role, j)
    yield _lin(f"{p}.self_attn.q_a_proj", s.q_lora, h, ATTN, role, j)
    yield _norm(f"{p}.self_attn.q_a_layernorm", s.q_lora, role, j)
    yield _lin(f"{p}.self_attn.q_b_proj", s.heads * qk, s.q_lora, ATTN, role, j)
    yield _lin(f"{p}.self_attn.kv_a_proj_with_mqa", s.kv_lora + s.qk_rope, h, ATTN, role, j)
    yield _norm(f"{p}.self_attn.kv_a_layernorm", s.kv_lora, role, j)
    yield _lin(f"{p}.self_attn.kv_b_proj", s.heads * (s.qk_nope + s.v_head), s.kv_lora, ATTN,
               role, j)
    yield _lin(f"{p}.self_attn.o_proj", h, s.heads * s.v_head, ATTN, role, j)
    yield _norm(f"{p}.post_attention_layernorm", h, role, j)
    if dense:
        yield _lin(f"{p}.mlp.gate_proj", s.dense_inter, h, DENSE, role, j)
        yield _lin(f"{p}.mlp.up_proj", s.dense_inter, h, DENSE, role, j)
        yield _lin(f"{p}.mlp.down_proj", h, s.dense_inter, DENSE, role, j)
        return
    yield ModuleSpec(f"{p}.mlp.gate", (s.experts, h), GATE, role, j,
                     (("e_score_correction_bias", (s.experts,), "F32"),))
    for e in range(s.experts):
        yield _lin(f"{p}.mlp.experts.{e}.gate_proj", s.moe_inter, h, EXPERT, role, j)
        yield _lin(f"{p}.mlp.experts.{e}.up_proj", s.moe_inter, h, EXPERT, role, j)
        yield _lin(f"{p}.mlp.experts.{e}.down_proj", h, s.moe_inter, EXPERT, role, j)
    yield _lin(f"{p}.mlp.shared_experts.gate_proj", s.shared_inter, h, SHARED, role, j)
    yield _lin(f"{p}.mlp.shared_experts.up_proj", s.shared_inter, h, SHARED, role, j)
    yield _lin(f"{p}.mlp.shared_experts.down_proj", h, s.shared_inter, SHARED, role, j)


def dsv3_main(s: Sizes) -> list[ModuleSpec]:
    """``first_k_dense_replace = 1``: layer 0 has a dense MLP, the others are MoE."""
    mods = [ModuleSpec("model.embed_tokens", (s.vocab, s.hidden), EMBED, EMBEDDING)]
    for i in range(s.layers):
        mods += _v3_block(i, s, MAIN, None, dense=i == 0)
    mods += [_norm("model.norm", s.hidden, MAIN, None),
             ModuleSpec("lm_head", (s.vocab, s.hidden), LM_HEAD, HEAD)]
    return mods


def dsv3_mtp(s: Sizes, n: int) -> list[ModuleSpec]:
    """MTP layers at ``model.layers.{N+j}``, as DeepSeek-V3 ships them."""
    mods: list[ModuleSpec] = []
    for j in range(n):
        i = s.layers + j
        p = f"model.layers.{i}"
        mods += [ModuleSpec(f"{p}.embed_tokens", (s.vocab, s.hidden), EMBED, DRAFT, j),
                 _norm(f"{p}.enorm", s.hidden, DRAFT, j), _norm(f"{p}.hnorm", s.hidden, DRAFT, j),
                 _lin(f"{p}.eh_proj", s.hidden, 2 * s.hidden, PROJ, DRAFT, j)]
        mods += _v3_block(i, s, DRAFT, j, dense=False)
        mods += [_norm(f"{p}.shared_head.norm", s.hidden, DRAFT, j),
                 ModuleSpec(f"{p}.shared_head.head", (s.vocab, s.hidden), LM_HEAD, DRAFT, j)]
    return mods


# ------------------------------------------------------------------ Qwen3.5 / 3.6 HF

QWEN35 = "qwen3_5"  # dense (Qwen3_5ForConditionalGeneration)
QWEN35_MOE = "qwen3_5_moe"  # MoE (Qwen3_5MoeForConditionalGeneration)
LINEAR_ATTN = "linear_attn"  # Gated DeltaNet projections (BF16 in every published quantization)

# Gated DeltaNet dims at tiny size: key heads x key dim, value heads x value dim
# (transformers Qwen3_5TextConfig linear_num_key_heads / linear_key_head_dim ...).
_GDN_KH, _GDN_KD, _GDN_VH, _GDN_VD = 1, 128, 2, 128


def qwen3_5_layer_types(s: Sizes) -> list[str]:
    """Every other layer full attention at tiny size (the real models: every 4th)."""
    return ["full_attention" if i % 2 else "linear_attention" for i in range(s.layers)]


def _qwen_block(p: str, s: Sizes, role: str, j: int | None, full: bool, moe: bool,
                per_expert: str = "expert-first") -> Iterator[ModuleSpec]:
    """One Qwen3.5 decoder layer under ``p`` (``model.language_model.layers.3`` or
    ``mtp.layers.0``), tensors in the order transformers' state dict lists them."""
    h = s.hidden
    yield _norm(f"{p}.input_layernorm", h, role, j)
    if full:
        # attn_output_gate: q_proj holds the query and its gate (2 x heads x head_dim)
        yield _lin(f"{p}.self_attn.q_proj", 2 * s.heads * s.head_dim, h, ATTN, role, j)
        yield _lin(f"{p}.self_attn.k_proj", s.head_dim, h, ATTN, role, j)
        yield _lin(f"{p}.self_attn.v_proj", s.head_dim, h, ATTN, role, j)
        yield _lin(f"{p}.self_attn.o_proj", h, s.heads * s.head_dim, ATTN, role, j)
        yield _norm(f"{p}.self_attn.q_norm", s.head_dim, role, j)
        yield _norm(f"{p}.self_attn.k_norm", s.head_dim, role, j)
    else:
        qkv = 2 * _GDN_KH * _GDN_KD + _GDN_VH * _GDN_VD
        a = f"{p}.linear_attn"
        yield _lin(f"{a}.in_proj_qkv", qkv, h, LINEAR_ATTN, role, j)
        yield _lin(f"{a}.in_proj_z", _GDN_VH * _GDN_VD, h, LINEAR_ATTN, role, j)
        yield _lin(f"{a}.in_proj_b", _GDN_VH, h, LINEAR_ATTN, role, j)
        yield _lin(f"{a}.in_proj_a", _GDN_VH, h, LINEAR_ATTN, role, j)
        yield ModuleSpec(f"{a}.conv1d", (qkv, 1, 4), NORM, role, j)
        yield _norm(f"{a}.norm", _GDN_VD, role, j)
        yield _lin(f"{a}.out_proj", h, _GDN_VH * _GDN_VD, LINEAR_ATTN, role, j)
        yield ModuleSpec(f"{a}.A_log", (_GDN_VH,), NORM, role, j)
        yield ModuleSpec(f"{a}.dt_bias", (_GDN_VH,), NORM, role, j)
    yield _norm(f"{p}.post_attention_layernorm", h, role, j)
    if not moe:
        yield _lin(f"{p}.mlp.gate_proj", s.dense_inter, h, DENSE, role, j)
        yield _lin(f"{p}.mlp.up_proj", s.dense_inter, h, DENSE, role, j)
        yield _lin(f"{p}.mlp.down_proj", h, s.dense_inter, DENSE, role, j)
        return
    yield ModuleSpec(f"{p}.mlp.gate", (s.experts, h), GATE, role, j)
    for e in range(s.experts):
        for proj, shape in (("gate_proj", (s.moe_inter, h)), ("up_proj", (s.moe_inter, h)),
                            ("down_proj", (h, s.moe_inter))):
            # auto-round's MTP export (issue 19, shape 3) puts the expert index after the projection
            name = f"{p}.mlp.experts.{e}.{proj}" if per_expert == "expert-first" else f"{p}.mlp.experts.{proj}.{e}"
            yield ModuleSpec(name, shape, EXPERT, role, j)
    yield _lin(f"{p}.mlp.shared_expert.gate_proj", s.shared_inter, h, SHARED, role, j)
    yield _lin(f"{p}.mlp.shared_expert.up_proj", s.shared_inter, h, SHARED, role, j)
    yield _lin(f"{p}.mlp.shared_expert.down_proj", h, s.shared_inter, SHARED, role, j)
    yield ModuleSpec(f"{p}.mlp.shared_expert_gate", (1, h), GATE, role, j)


def qwen3_5_main(s: Sizes, moe: bool) -> list[ModuleSpec]:
    mods = [ModuleSpec("model.language_model.embed_tokens", (s.vocab, s.hidden), EMBED, EMBEDDING)]
    for i, kind in enumerate(qwen3_5_layer_types(s)):
        mods += _qwen_block(f"model.language_model.layers.{i}", s, MAIN, None, kind == "full_attention", moe)
    mods += [_norm("model.language_model.norm", s.hidden, MAIN, None),
             ModuleSpec("lm_head", (s.vocab, s.hidden), LM_HEAD, HEAD)]
    return mods


def qwen3_5_mtp(s: Sizes, n: int, moe: bool, per_expert: str = "expert-first") -> list[ModuleSpec]:
    """The drafter as Qwen publishes it (``mtp_num_hidden_layers``): ``mtp.fc`` takes
    [embedding; hidden] (2H -> H), one full-attention layer per step, a final norm."""
    mods = [_lin("mtp.fc", s.hidden, 2 * s.hidden, PROJ, DRAFT, 0),
            _norm("mtp.pre_fc_norm_embedding", s.hidden, DRAFT, 0),
            _norm("mtp.pre_fc_norm_hidden", s.hidden, DRAFT, 0)]
    for j in range(n):
        mods += _qwen_block(f"mtp.layers.{j}", s, DRAFT, j, True, moe, per_expert)
    mods.append(_norm("mtp.norm", s.hidden, DRAFT, 0))
    return mods


def modules(family: str, draft: str | None, s: Sizes, n_draft: int,
            expert_names: str = "expert-first") -> list[ModuleSpec]:
    """Every module of a checkpoint, main stack first, then the draft layers."""
    if family in (QWEN35, QWEN35_MOE):
        moe = family == QWEN35_MOE
        return qwen3_5_main(s, moe) + qwen3_5_mtp(s, n_draft, moe, expert_names)
    if family == DSV4:
        main = dsv4_main(s)
        if draft == DSPARK:
            return main + dsv4_dspark(s, n_draft)
        return main + dsv4_mtp(s, n_draft)
    if family == DSV3:
        return dsv3_main(s) + dsv3_mtp(s, n_draft)
    raise ValueError(f"unknown family {family!r}")
