"""A small DeepSeek-V4-shaped model: attention, MoE FFN, and an MTP draft block.

Reference PyTorch in the spirit of nanoGPT's model.py: one file, no fused
kernels, CPU and CUDA. It keeps the structure that matters for routing
quantized draft modules:

- every block is attention + MoE FFN (routed experts w1/w2/w3 SwiGLU, a top-k
  softmax gate, one shared expert);
- an MTP block as in DeepSeek-V3/V4: it combines the normalized embedding of
  token t+1 (``enorm`` -> ``e_proj``) with the target's hidden state at t
  (``hnorm`` -> ``h_proj``), runs one decoder block, and predicts token t+2
  through the target's own head (shared embedding and head).

Parameter names are DeepSeek-V4 native checkpoint names (``embed.weight``,
``layers.{i}.attn.wq_a.weight``, ``layers.{i}.ffn.experts.{e}.w1.weight``,
``layers.{i}.ffn.shared_experts.w1.weight``, ``layers.{i}.ffn.gate.weight``,
``mtp.0.e_proj.weight``, ``mtp.0.ffn.experts.{e}.w1.weight``, ``head.weight``),
so ``state_dict()`` exports without renaming, with the shapes specguard's
factory writes for DeepSeek-V4. Attention keeps V4's projections (low-rank
query, one shared KV head, grouped low-rank output) but not its sparse and
compressed-KV machinery, which is not what is being tested here.

Decoding uses a static per-layer :class:`KVCache` written at explicit
positions: rejected draft tokens are rolled back by writing the next chunk
over their slots, and every shape in a decode step is fixed.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import cast

import torch
import torch.nn.functional as F
from torch import nn

from specguard.factory.models import Sizes

# The trained model's sizes (factory.Sizes: one dataclass of model dimensions for the factory and
# this decoder). Its weights' metadata names them as DeepSeek's ModelArgs does (``_ARGS``).
TRAINED = Sizes(vocab=256, layers=12)
_ARGS = {"vocab_size": "vocab", "dim": "hidden", "n_layers": "layers", "n_heads": "heads", "head_dim": "head_dim",
         "rope_head_dim": "rope_dim", "q_lora_rank": "q_lora", "o_lora_rank": "o_lora", "o_groups": "o_groups",
         "n_routed_experts": "experts", "n_activated_experts": "experts_per_token", "moe_inter_dim": "moe_inter",
         "n_mtp_layers": "mtp_layers", "max_seq_len": "max_seq_len", "rope_theta": "rope_theta",
         "norm_eps": "norm_eps"}


def check_sizes(cfg: Sizes) -> Sizes:
    """Sizes this decoder builds: quantized linears need 128 (FP8 block), 32 (MXFP4) and 16
    (NVFP4) to divide them; RoPE rotates channel pairs."""
    for name in ("hidden", "head_dim", "q_lora", "o_lora", "moe_inter", "shared_inter"):
        if getattr(cfg, name) % 128:
            raise ValueError(f"{name}={getattr(cfg, name)} must be a multiple of 128")
    if (cfg.heads * cfg.head_dim) % (128 * cfg.o_groups):
        raise ValueError("heads * head_dim must split into o_groups multiples of 128")
    if cfg.rope_dim % 2 or not 0 < cfg.rope_dim <= cfg.head_dim:
        raise ValueError("rope_dim must be even and at most head_dim")
    return cfg


def sizes_json(cfg: Sizes) -> str:
    """The weights' ``config`` metadata: ModelArgs names (the shipped weights carry them)."""
    args = {arg: getattr(cfg, name) for arg, name in _ARGS.items()}
    args["n_shared_experts"] = cfg.shared_inter // cfg.moe_inter
    return json.dumps(args, sort_keys=True)


def sizes_from_json(text: str) -> Sizes:
    args = json.loads(text)
    shared = args.pop("n_shared_experts", 1) * args.get("moe_inter_dim", TRAINED.moe_inter)
    return check_sizes(replace(TRAINED, shared_inter=shared, **{_ARGS[k]: v for k, v in args.items()}))


class Linear(nn.Linear):
    """``nn.Linear`` that computes a few rows on CUDA as a batch of vector products.

    For the 2-8 rows of a verification or drafting step, cuBLAS picks a
    split-K matrix kernel that costs twice its single-row matrix-vector kernel
    (measured on an H200: 6.5 vs 3.2 us for 256 -> 128); a batched product of
    one row each keeps the fast kernel, so verifying k+1 positions costs little
    more than decoding one. Same sum, same weights, same checkpoint names.
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.numel() // self.in_features
        if not x.is_cuda or rows == 1 or rows > 16 or self.bias is not None:
            return F.linear(x, self.weight, self.bias)
        flat = x.reshape(rows, 1, self.in_features)
        out = torch.bmm(flat, self.weight.t().unsqueeze(0).expand(rows, -1, -1))
        return out.view(*x.shape[:-1], self.out_features)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return (x32 * self.weight.float()).to(x.dtype)


def rope_tables(cfg: Sizes) -> tuple[torch.Tensor, torch.Tensor]:
    """cos/sin tables [max_seq_len, rope_head_dim/2] for rotary embeddings."""
    half = cfg.rope_dim // 2
    inv_freq = 1.0 / (cfg.rope_theta ** (torch.arange(half, dtype=torch.float32) / half))
    angles = torch.outer(torch.arange(cfg.max_seq_len, dtype=torch.float32), inv_freq)
    return angles.cos(), angles.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate the last 2 * cos.shape[-1] channels of x [B, H, T, D] (pairs: first/second half)."""
    rope = 2 * cos.shape[-1]
    keep, rot = x[..., :-rope], x[..., -rope:].float()
    x1, x2 = rot.chunk(2, dim=-1)
    rot = torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)
    return torch.cat((keep, rot.to(x.dtype)), dim=-1)


@dataclass
class Where:
    """Where a forward's positions sit: absolute positions, their RoPE rows, the attention mask.

    ``mask`` [T, S] says which of the S keys (cache slots, or prefix + own keys)
    each query sees; ``None`` means plain causal attention over the sequence itself.
    """

    positions: torch.Tensor  # [T] long
    cos: torch.Tensor
    sin: torch.Tensor
    mask: torch.Tensor | None = None


class KVCache:
    """Static keys and values of one attention layer for one sequence (batch 1, one KV head).

    Slots are written at the positions fed (``index_copy_``), so a decode step has
    fixed shapes and fixed buffers (what CUDA graph capture needs); a query sees
    the slots at or before its position, so slots past it (rejected drafts) are
    never read and are simply overwritten later. ``length`` is bookkeeping for
    callers that feed positions in order without naming them.
    """

    def __init__(self, cfg: Sizes, device: torch.device, dtype: torch.dtype, size: int | None = None) -> None:
        shape = (1, 1, size or cfg.max_seq_len, cfg.head_dim)
        self.k = torch.zeros(shape, device=device, dtype=dtype)
        self.v = torch.zeros(shape, device=device, dtype=dtype)
        self.length = 0

    @property
    def size(self) -> int:
        return self.k.shape[2]

    def write(self, k: torch.Tensor, v: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        self.k.index_copy_(2, positions, k.to(self.k.dtype))
        self.v.index_copy_(2, positions, v.to(self.v.dtype))
        return self.k, self.v


class Attention(nn.Module):
    """DeepSeek-V4-style attention without its sparse/compressed parts.

    Low-rank queries (``wq_a`` -> ``q_norm`` -> ``wq_b``), one shared key/value
    head (``wkv`` -> ``kv_norm``; keys get RoPE on their last channels, values
    do not), and a grouped low-rank output (``wo_a`` per head group, ``wo_b``).
    """

    def __init__(self, cfg: Sizes) -> None:
        super().__init__()
        self.n_heads, self.head_dim, self.o_groups = cfg.heads, cfg.head_dim, cfg.o_groups
        self.wq_a = Linear(cfg.hidden, cfg.q_lora, bias=False)
        self.q_norm = RMSNorm(cfg.q_lora, cfg.norm_eps)
        self.wq_b = Linear(cfg.q_lora, cfg.heads * cfg.head_dim, bias=False)
        self.wkv = Linear(cfg.hidden, cfg.head_dim, bias=False)
        self.kv_norm = RMSNorm(cfg.head_dim, cfg.norm_eps)
        group_in = cfg.heads * cfg.head_dim // cfg.o_groups
        self.wo_a = Linear(group_in, cfg.o_groups * cfg.o_lora, bias=False)
        self.wo_b = Linear(cfg.o_groups * cfg.o_lora, cfg.hidden, bias=False)

    def context_kv(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Key and value [B, 1, T, D] of x: ``kv_norm(wkv(x))``, RoPE on the key only."""
        kv = self.kv_norm(self.wkv(x)).unsqueeze(1)
        return apply_rope(kv, cos, sin), kv

    def forward(
        self,
        x: torch.Tensor,
        at: Where,
        cache: KVCache | None = None,
        prefix: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> torch.Tensor:
        """``cache``: write this chunk's keys at ``at.positions`` and attend over the
        cache; ``prefix``: keys/values placed before this chunk's own (DSpark training)."""
        b, t, _ = x.shape
        q = self.wq_b(self.q_norm(self.wq_a(x))).view(b, t, self.n_heads, self.head_dim)
        q = apply_rope(q.transpose(1, 2), at.cos, at.sin)  # [B, H, T, D]
        k, v = self.context_kv(x, at.cos, at.sin)  # [B, 1, T, D]
        if cache is not None:
            k, v = cache.write(k, v, at.positions)
        elif prefix is not None:
            k, v = torch.cat((prefix[0], k), dim=2), torch.cat((prefix[1], v), dim=2)
        shape = (b, self.n_heads, k.shape[2], self.head_dim)
        if at.mask is None:  # training / full recompute: plain causal attention
            y = F.scaled_dot_product_attention(q, k.expand(shape), v.expand(shape), is_causal=True)
        else:
            y = F.scaled_dot_product_attention(q, k.expand(shape), v.expand(shape), attn_mask=at.mask)
        # grouped output projection: each group of heads has its own slice of wo_a
        y = y.transpose(1, 2).reshape(b, t, self.o_groups, -1)
        wo_a = self.wo_a.weight.view(self.o_groups, -1, y.shape[-1])
        return self.wo_b(torch.einsum("btgd,grd->btgr", y, wo_a).flatten(2))


class Expert(nn.Module):
    """SwiGLU MLP: w2(silu(w1 x) * w3 x). Used for routed and shared experts."""

    def __init__(self, dim: int, inter_dim: int) -> None:
        super().__init__()
        self.w1 = Linear(dim, inter_dim, bias=False)
        self.w2 = Linear(inter_dim, dim, bias=False)
        self.w3 = Linear(dim, inter_dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Gate(nn.Module):
    """Top-k softmax router; weights renormalized over the chosen experts.

    ``bias`` is DeepSeek-V3/V4's auxiliary-loss-free balancing bias: it shifts
    which experts are chosen, not their weights, and is updated by a rule
    (:meth:`MoE.update_bias`), not by gradients.
    """

    bias: torch.Tensor  # a buffer (register_buffer): typed for mypy, set in __init__

    def __init__(self, cfg: Sizes) -> None:
        super().__init__()
        self.topk = cfg.experts_per_token
        self.weight = nn.Parameter(torch.empty(cfg.experts, cfg.hidden))
        self.register_buffer("bias", torch.zeros(cfg.experts))
        nn.init.normal_(self.weight, std=0.02)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        probs = F.linear(x, self.weight).float().softmax(dim=-1)
        indices = (probs + self.bias.float()).topk(self.topk, dim=-1).indices
        weights = probs.gather(-1, indices)
        weights = weights / weights.sum(dim=-1, keepdim=True)
        return weights.to(x.dtype), indices, probs


class MoE(nn.Module):
    def __init__(self, cfg: Sizes) -> None:
        super().__init__()
        self.n_experts = cfg.experts
        self.gate = Gate(cfg)
        self.experts = nn.ModuleList(
            Expert(cfg.hidden, cfg.moe_inter) for _ in range(cfg.experts)
        )
        self.shared_experts = Expert(cfg.hidden, cfg.shared_inter)
        self.aux_loss: torch.Tensor | None = None  # load-balance loss of the last forward
        self.load: torch.Tensor | None = None  # share of tokens per expert, last forward

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        x = x.reshape(-1, shape[-1])
        weights, indices, probs = self.gate(x)
        # Every expert runs on every token as one batched matmul, and only the chosen
        # ones are kept: the same sum as dispatching tokens to experts, with no
        # data-dependent shapes (no host sync, so a decode step can be a CUDA graph).
        # With 4 experts that costs less than gathering rows.
        chosen = torch.zeros(x.shape[0], self.n_experts, dtype=torch.bool, device=x.device)
        chosen = chosen.scatter(1, indices, True).t().unsqueeze(-1)  # [E, N, 1]
        gain = torch.zeros(x.shape[0], self.n_experts, dtype=weights.dtype, device=x.device)
        gain = gain.scatter(1, indices, weights).t().unsqueeze(-1)
        w1, w2, w3 = (torch.stack([getattr(e, w).weight for e in self.experts]) for w in ("w1", "w2", "w3"))
        xe = x.unsqueeze(0).expand(self.n_experts, -1, -1)
        h = F.silu(torch.bmm(xe, w1.transpose(1, 2))) * torch.bmm(xe, w3.transpose(1, 2))
        # unchosen experts contribute exactly nothing, even NaN from a broken expert
        y = torch.where(chosen, torch.bmm(h, w2.transpose(1, 2)) * gain, 0).sum(0).to(x.dtype)
        if self.training:  # Switch-style balance loss: E * sum_e(token share_e * mean prob_e)
            self.load = F.one_hot(indices, self.n_experts).float().sum(1).mean(0) / indices.shape[1]
            self.aux_loss = self.n_experts * (self.load * probs.mean(0)).sum()
        return (y + self.shared_experts(x)).view(shape)

    @torch.no_grad()
    def update_bias(self, rate: float) -> None:
        """Aux-loss-free balancing: raise the bias of under-loaded experts, lower over-loaded ones."""
        if self.load is not None:
            self.gate.bias += rate * torch.sign(self.load.mean() - self.load)


class Block(nn.Module):
    # Set only on a DSpark drafter's first stage (main_proj, main_norm) and last
    # stage or an MTP block (norm): declared so the type checker knows them.
    main_proj: Linear
    main_norm: RMSNorm
    norm: RMSNorm

    def __init__(self, cfg: Sizes) -> None:
        super().__init__()
        self.attn_norm = RMSNorm(cfg.hidden, cfg.norm_eps)
        self.attn = Attention(cfg)
        self.ffn_norm = RMSNorm(cfg.hidden, cfg.norm_eps)
        self.ffn = MoE(cfg)

    def forward(
        self,
        x: torch.Tensor,
        at: Where,
        cache: KVCache | None = None,
        prefix: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> torch.Tensor:
        x = x + self.attn(self.attn_norm(x), at, cache, prefix)
        return x + self.ffn(self.ffn_norm(x))


class MTPBlock(Block):
    """DeepSeek MTP module: input = e_proj(enorm(embed(t+1))) + h_proj(hnorm(h_t))."""

    def __init__(self, cfg: Sizes) -> None:
        super().__init__(cfg)
        self.enorm = RMSNorm(cfg.hidden, cfg.norm_eps)
        self.hnorm = RMSNorm(cfg.hidden, cfg.norm_eps)
        self.e_proj = Linear(cfg.hidden, cfg.hidden, bias=False)
        self.h_proj = Linear(cfg.hidden, cfg.hidden, bias=False)
        self.norm = RMSNorm(cfg.hidden, cfg.norm_eps)  # before the shared head

    def combine(self, emb_next: torch.Tensor, hidden: torch.Tensor) -> torch.Tensor:
        return self.e_proj(self.enorm(emb_next)) + self.h_proj(self.hnorm(hidden))


class Transformer(nn.Module):
    """Target model plus its MTP draft block(s); weights named as DeepSeek-V4 ships them."""

    rope_cos: torch.Tensor  # buffers (register_buffer), set in __init__
    rope_sin: torch.Tensor

    def __init__(self, cfg: Sizes) -> None:
        super().__init__()
        self.cfg = check_sizes(cfg)
        self.embed = nn.Embedding(cfg.vocab, cfg.hidden)
        self.layers = nn.ModuleList(Block(cfg) for _ in range(cfg.layers))
        self.norm = RMSNorm(cfg.hidden, cfg.norm_eps)
        self.head = Linear(cfg.hidden, cfg.vocab, bias=False)
        self.mtp = nn.ModuleList(MTPBlock(cfg) for _ in range(cfg.mtp_layers))
        cos, sin = rope_tables(cfg)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)
        self.apply(self._init_weights)

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, nn.Linear | nn.Embedding):
            nn.init.normal_(module.weight, std=0.02)

    def where(self, positions: torch.Tensor, keys: int | None = None, block: bool = False) -> Where:
        """RoPE rows and mask for queries at ``positions`` [T].

        ``keys``: the queries attend over a cache of that many slots, each seeing
        the slots up to its own position, or with ``block`` up to the last
        position of the chunk (a DSpark query block sees itself whole).
        ``None``: causal attention within the chunk (no cache).
        """
        mask = None
        if keys is not None:
            limit = positions[-1:] if block else positions
            mask = torch.arange(keys, device=positions.device)[None, :] <= limit[:, None]
        return Where(positions, self.rope_cos[positions], self.rope_sin[positions], mask)

    def _positions(self, t: int, caches: list[KVCache] | None, positions: torch.Tensor | None,
                   start: int) -> torch.Tensor:
        if positions is not None:
            return positions
        if caches:  # continue the cached sequence
            start = caches[0].length
            for cache in caches:
                cache.length = start + t
        return torch.arange(start, start + t, device=self.rope_cos.device)

    def forward(
        self,
        tokens: torch.Tensor,
        caches: list[KVCache] | None = None,
        capture: tuple[int, ...] | None = None,
        positions: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """tokens [B, T] -> (logits [B, T, V], hidden features for a drafter).

        The features are the outputs of the layers in ``capture`` (before the
        final norm), concatenated: by default the last layer's [B, T, dim],
        which MTP consumes; DSpark captures several layers. With ``caches``
        (one per layer, batch 1) the tokens sit at ``positions`` (default: right
        after the cached ones) and see every cached position before them.
        """
        capture = capture or (self.cfg.layers - 1,)
        pos = self._positions(tokens.shape[1], caches, positions, 0)
        at = self.where(pos, caches[0].size if caches else None)
        x = self.embed(tokens)
        captured = []
        for i, layer in enumerate(self.layers):
            x = layer(x, at, caches[i] if caches else None)
            if i in capture:
                captured.append(x)
        return self.head(self.norm(x)), torch.cat(captured, dim=-1)

    def mtp_forward(
        self,
        hidden: torch.Tensor,
        next_tokens: torch.Tensor,
        cache: KVCache | None = None,
        depth: int = 0,
        positions: torch.Tensor | None = None,
        start: int = 0,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """MTP block ``depth``: hidden at t [B, T, dim] + token t+1 [B, T] -> logits for t+2.

        Returns (logits, the block's own hidden state), the latter feeding the
        next recurrent draft step as vLLM does for k > 1. Without a cache the
        chunk starts at position ``start``.
        """
        block = cast(MTPBlock, self.mtp[depth])
        caches = [cache] if cache is not None else None
        at = self.where(self._positions(next_tokens.shape[1], caches, positions, start),
                        cache.size if cache is not None else None)
        x = block(block.combine(self.embed(next_tokens), hidden), at, cache)
        return self.head(block.norm(x)), x

    def new_caches(self, n: int | None = None, size: int | None = None) -> list[KVCache]:
        """Empty caches of ``size`` slots (default max_seq_len): one per target layer (or ``n``)."""
        ref = self.head.weight
        return [KVCache(self.cfg, ref.device, ref.dtype, size) for _ in range(n or self.cfg.layers)]

    @staticmethod
    def update_router_bias(blocks: nn.ModuleList, rate: float) -> None:
        for block in cast(Iterable[Block], blocks):
            block.ffn.update_bias(rate)

    def moe_aux_loss(self, blocks: nn.ModuleList) -> torch.Tensor:
        losses = [b.ffn.aux_loss for b in cast(Iterable[Block], blocks) if b.ffn.aux_loss is not None]
        return torch.stack(losses).mean() if losses else self.head.weight.new_zeros(())


MASK_TOKEN = 0  # byte 0 (NUL) never occurs in the corpus: DSpark's mask_token_id


class DSparkDrafter(nn.Module):
    """A DSpark drafter, stored as its own checkpoint, drafting a block in one pass.

    As vLLM 0.33 runs DeepSeek-V4 DSpark (models/deepseek_v4/nvidia/dspark.py
    ``DSparkDeepseekV4Model``; v1/worker/gpu/spec_decode/dspark/speculator.py):

    - context: the target's hidden states of ``target_layers``, concatenated, give
      ``main_x = main_norm(main_proj(features))``; every stage derives its own
      context keys/values from that same ``main_x`` with its ``wkv``, ``kv_norm``
      and RoPE (``precompute_and_store_context_kv``) -- the context does not run
      through the blocks;
    - query block: the anchor (the last token, the target's bonus) then
      ``block - 1`` mask tokens (``mask_token_id``), at consecutive positions,
      run once through the ``n_stages`` blocks, each query seeing the context
      before the anchor and the whole block (non-causal within the block);
      position i predicts the token i + 1 after the anchor
      (``sample_from_anchor``) through the last stage's ``norm`` and the
      target's head.

    vLLM's DSpark adds a low-rank Markov head (``markov_head``) that biases each
    position's logits by the previously drafted token; the factory's DSpark
    layout has no such tensors, so it is left out: drafts are the argmax of the
    base logits, all k from the one pass. Names match DeepSeek-V4 DSpark
    checkpoints: ``mtp.0.main_proj.weight``, ``mtp.0.main_norm.weight``,
    ``mtp.{j}.ffn.experts.{e}.w1.weight``, ``mtp.{n-1}.norm.weight``.
    """

    def __init__(self, cfg: Sizes, n_stages: int = 3, target_layers: tuple[int, ...] | None = None) -> None:
        super().__init__()
        self.cfg = check_sizes(cfg)
        self.target_layers = target_layers or (0, cfg.layers - 1)
        self.mtp = nn.ModuleList(Block(cfg) for _ in range(n_stages))
        first, last = self.mtp[0], self.mtp[-1]
        # registered on the stage blocks so the names are mtp.0.main_proj / mtp.{n-1}.norm
        first.main_proj = Linear(cfg.hidden * len(self.target_layers), cfg.hidden, bias=False)
        first.main_norm = RMSNorm(cfg.hidden, cfg.norm_eps)
        last.norm = RMSNorm(cfg.hidden, cfg.norm_eps)
        self.apply(Transformer._init_weights)

    @property
    def stages(self) -> list[Block]:
        """The stage blocks (``mtp``), typed."""
        return cast(list[Block], list(self.mtp))

    def combine(self, features: torch.Tensor) -> torch.Tensor:
        """``main_x`` [B, T, dim] from the target features [B, T, k*dim]."""
        first = self.stages[0]
        return first.main_norm(first.main_proj(features))

    def write_context(self, target: Transformer, features: torch.Tensor, positions: torch.Tensor,
                      caches: list[KVCache]) -> None:
        """Store every stage's context keys/values for the target positions ``positions``."""
        main_x = self.combine(features)
        at = target.where(positions)
        for block, cache in zip(self.stages, caches, strict=True):
            k, v = block.attn.context_kv(main_x, at.cos, at.sin)
            cache.write(k, v, positions)

    def block_tokens(self, anchor: torch.Tensor, block: int) -> torch.Tensor:
        """[..., block]: the anchor token then mask tokens."""
        masks = torch.full((*anchor.shape, block - 1), MASK_TOKEN, dtype=anchor.dtype, device=anchor.device)
        return torch.cat((anchor.unsqueeze(-1), masks), dim=-1)

    def draft(self, target: Transformer, anchor: torch.Tensor, positions: torch.Tensor,
              caches: list[KVCache]) -> torch.Tensor:
        """Logits [B, len(positions), V] for the tokens after the anchor [B], in one pass."""
        x = target.embed(self.block_tokens(anchor, positions.shape[0]))
        at = target.where(positions, caches[0].size, block=True)
        for block, cache in zip(self.stages, caches, strict=True):
            x = block(x, at, cache)
        return target.head(self.stages[-1].norm(x))

    def forward(self, target: Transformer, features: torch.Tensor, tokens: torch.Tensor,
                anchors: torch.Tensor, block: int) -> torch.Tensor:
        """Training and evaluation, no cache: logits [B, M, block, V] of the blocks anchored
        at ``anchors`` [M] of ``tokens`` [B, T], the context being every earlier position."""
        b, t = tokens.shape
        main_x = self.combine(features)
        ctx = target.where(torch.arange(t, device=tokens.device))
        qpos = (anchors[:, None] + torch.arange(block, device=tokens.device)).flatten()
        which = torch.arange(anchors.shape[0], device=tokens.device).repeat_interleave(block)
        mask = torch.cat((ctx.positions[None, :] < anchors[which][:, None],  # context before the anchor
                          which[:, None] == which[None, :]), dim=1)  # its own block, whole
        at = Where(qpos, target.rope_cos[qpos], target.rope_sin[qpos], mask)
        x = target.embed(self.block_tokens(tokens[:, anchors], block).view(b, -1))
        for stage in self.stages:
            x = stage(x, at, prefix=stage.attn.context_kv(main_x, ctx.cos, ctx.sin))
        return target.head(self.stages[-1].norm(x)).view(b, anchors.shape[0], block, -1)
