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

Decoding uses a per-layer :class:`KVCache`; truncating ``length`` rolls the
cache back after rejected draft tokens.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class ModelConfig:
    """Sizes, named as in DeepSeek's ModelArgs. Defaults are the trained model."""

    vocab_size: int = 256  # bytes
    dim: int = 256
    n_layers: int = 4
    n_heads: int = 2
    head_dim: int = 128
    rope_head_dim: int = 64  # RoPE on the last rope_head_dim channels of each head
    q_lora_rank: int = 128
    o_lora_rank: int = 128
    o_groups: int = 2
    n_routed_experts: int = 4
    n_activated_experts: int = 2
    moe_inter_dim: int = 128
    n_shared_experts: int = 1  # shared expert hidden = n_shared_experts * moe_inter_dim
    n_mtp_layers: int = 1
    max_seq_len: int = 2048
    rope_theta: float = 10000.0
    norm_eps: float = 1e-6

    def __post_init__(self) -> None:
        # Quantized linears need 128 (FP8 block), 32 (MXFP4) and 16 (NVFP4) to divide them.
        for name in ("dim", "head_dim", "q_lora_rank", "o_lora_rank", "moe_inter_dim"):
            if getattr(self, name) % 128:
                raise ValueError(f"{name}={getattr(self, name)} must be a multiple of 128")
        if (self.n_heads * self.head_dim) % (128 * self.o_groups):
            raise ValueError("n_heads * head_dim must split into o_groups multiples of 128")
        if self.rope_head_dim % 2 or not 0 < self.rope_head_dim <= self.head_dim:
            raise ValueError("rope_head_dim must be even and at most head_dim")

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> ModelConfig:
        return cls(**json.loads(text))


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return (x32 * self.weight.float()).to(x.dtype)


def rope_tables(cfg: ModelConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """cos/sin tables [max_seq_len, rope_head_dim/2] for rotary embeddings."""
    half = cfg.rope_head_dim // 2
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


class KVCache:
    """Keys and values of one attention layer for one sequence (batch 1, one KV head).

    ``length`` is how many positions are valid; setting it lower discards the
    tail (rejected draft tokens), whose slots are simply overwritten later.
    """

    def __init__(self, cfg: ModelConfig, device: torch.device, dtype: torch.dtype) -> None:
        shape = (1, 1, cfg.max_seq_len, cfg.head_dim)
        self.k = torch.zeros(shape, device=device, dtype=dtype)
        self.v = torch.zeros(shape, device=device, dtype=dtype)
        self.length = 0

    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        start, end = self.length, self.length + k.shape[2]
        if end > self.k.shape[2]:
            raise ValueError(f"sequence longer than max_seq_len={self.k.shape[2]}")
        self.k[:, :, start:end] = k
        self.v[:, :, start:end] = v
        self.length = end
        return self.k[:, :, :end], self.v[:, :, :end]


class Attention(nn.Module):
    """DeepSeek-V4-style attention without its sparse/compressed parts.

    Low-rank queries (``wq_a`` -> ``q_norm`` -> ``wq_b``), one shared key/value
    head (``wkv`` -> ``kv_norm``; keys get RoPE on their last channels, values
    do not), and a grouped low-rank output (``wo_a`` per head group, ``wo_b``).
    """

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.n_heads, self.head_dim, self.o_groups = cfg.n_heads, cfg.head_dim, cfg.o_groups
        self.wq_a = nn.Linear(cfg.dim, cfg.q_lora_rank, bias=False)
        self.q_norm = RMSNorm(cfg.q_lora_rank, cfg.norm_eps)
        self.wq_b = nn.Linear(cfg.q_lora_rank, cfg.n_heads * cfg.head_dim, bias=False)
        self.wkv = nn.Linear(cfg.dim, cfg.head_dim, bias=False)
        self.kv_norm = RMSNorm(cfg.head_dim, cfg.norm_eps)
        group_in = cfg.n_heads * cfg.head_dim // cfg.o_groups
        self.wo_a = nn.Linear(group_in, cfg.o_groups * cfg.o_lora_rank, bias=False)
        self.wo_b = nn.Linear(cfg.o_groups * cfg.o_lora_rank, cfg.dim, bias=False)

    def forward(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        cache: KVCache | None = None,
    ) -> torch.Tensor:
        b, t, _ = x.shape
        q = self.wq_b(self.q_norm(self.wq_a(x))).view(b, t, self.n_heads, self.head_dim)
        q = apply_rope(q.transpose(1, 2), cos, sin)  # [B, H, T, D]
        kv = self.kv_norm(self.wkv(x)).unsqueeze(1)  # [B, 1, T, D]
        k, v = apply_rope(kv, cos, sin), kv
        if cache is None:  # training / full recompute: plain causal attention
            y = F.scaled_dot_product_attention(q, k.expand_as(q), v.expand_as(q), is_causal=True)
        else:
            start = cache.length
            k, v = cache.append(k, v)
            # query i sits at absolute position start+i and sees keys 0..start+i
            mask = torch.arange(k.shape[2], device=x.device)[None, :] <= (
                start + torch.arange(t, device=x.device)[:, None]
            )
            shape = (b, self.n_heads, *k.shape[2:])
            y = F.scaled_dot_product_attention(q, k.expand(shape), v.expand(shape), attn_mask=mask)
        # grouped output projection: each group of heads has its own slice of wo_a
        y = y.transpose(1, 2).reshape(b, t, self.o_groups, -1)
        wo_a = self.wo_a.weight.view(self.o_groups, -1, y.shape[-1])
        return self.wo_b(torch.einsum("btgd,grd->btgr", y, wo_a).flatten(2))


class Expert(nn.Module):
    """SwiGLU MLP: w2(silu(w1 x) * w3 x). Used for routed and shared experts."""

    def __init__(self, dim: int, inter_dim: int) -> None:
        super().__init__()
        self.w1 = nn.Linear(dim, inter_dim, bias=False)
        self.w2 = nn.Linear(inter_dim, dim, bias=False)
        self.w3 = nn.Linear(dim, inter_dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Gate(nn.Module):
    """Top-k softmax router; weights renormalized over the chosen experts.

    ``bias`` is DeepSeek-V3/V4's auxiliary-loss-free balancing bias: it shifts
    which experts are chosen, not their weights, and is updated by a rule
    (:meth:`MoE.update_bias`), not by gradients.
    """

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.topk = cfg.n_activated_experts
        self.weight = nn.Parameter(torch.empty(cfg.n_routed_experts, cfg.dim))
        self.register_buffer("bias", torch.zeros(cfg.n_routed_experts))
        nn.init.normal_(self.weight, std=0.02)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        probs = F.linear(x, self.weight).float().softmax(dim=-1)
        indices = (probs + self.bias.float()).topk(self.topk, dim=-1).indices
        weights = probs.gather(-1, indices)
        weights = weights / weights.sum(dim=-1, keepdim=True)
        return weights.to(x.dtype), indices, probs


class MoE(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.n_experts = cfg.n_routed_experts
        self.gate = Gate(cfg)
        self.experts = nn.ModuleList(
            Expert(cfg.dim, cfg.moe_inter_dim) for _ in range(cfg.n_routed_experts)
        )
        self.shared_experts = Expert(cfg.dim, cfg.n_shared_experts * cfg.moe_inter_dim)
        self.aux_loss: torch.Tensor | None = None  # load-balance loss of the last forward
        self.load: torch.Tensor | None = None  # share of tokens per expert, last forward

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        x = x.reshape(-1, shape[-1])
        weights, indices, probs = self.gate(x)
        y = torch.zeros_like(x)
        for e, expert in enumerate(self.experts):
            rows, slot = (indices == e).nonzero(as_tuple=True)
            if rows.numel():
                y.index_add_(0, rows, expert(x[rows]) * weights[rows, slot, None])
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
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.attn_norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.attn = Attention(cfg)
        self.ffn_norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.ffn = MoE(cfg)

    def forward(
        self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, cache: KVCache | None = None
    ) -> torch.Tensor:
        x = x + self.attn(self.attn_norm(x), cos, sin, cache)
        return x + self.ffn(self.ffn_norm(x))


class MTPBlock(Block):
    """DeepSeek MTP module: input = e_proj(enorm(embed(t+1))) + h_proj(hnorm(h_t))."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__(cfg)
        self.enorm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.hnorm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.e_proj = nn.Linear(cfg.dim, cfg.dim, bias=False)
        self.h_proj = nn.Linear(cfg.dim, cfg.dim, bias=False)
        self.norm = RMSNorm(cfg.dim, cfg.norm_eps)  # before the shared head

    def combine(self, emb_next: torch.Tensor, hidden: torch.Tensor) -> torch.Tensor:
        return self.e_proj(self.enorm(emb_next)) + self.h_proj(self.hnorm(hidden))


class Transformer(nn.Module):
    """Target model plus its MTP draft block(s); weights named as DeepSeek-V4 ships them."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.dim)
        self.layers = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.head = nn.Linear(cfg.dim, cfg.vocab_size, bias=False)
        self.mtp = nn.ModuleList(MTPBlock(cfg) for _ in range(cfg.n_mtp_layers))
        cos, sin = rope_tables(cfg)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)
        self.apply(self._init_weights)

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, nn.Linear | nn.Embedding):
            nn.init.normal_(module.weight, std=0.02)

    def _rope(self, start: int, length: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.rope_cos[start : start + length], self.rope_sin[start : start + length]

    def forward(
        self,
        tokens: torch.Tensor,
        caches: list[KVCache] | None = None,
        capture: tuple[int, ...] | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """tokens [B, T] -> (logits [B, T, V], hidden features for a drafter).

        The features are the outputs of the layers in ``capture`` (before the
        final norm), concatenated: by default the last layer's [B, T, dim],
        which MTP consumes; DSpark captures several layers. With ``caches``
        (one per layer, batch 1) the tokens continue the cached sequence.
        """
        capture = capture or (self.cfg.n_layers - 1,)
        start = caches[0].length if caches else 0
        cos, sin = self._rope(start, tokens.shape[1])
        x = self.embed(tokens)
        captured = []
        for i, layer in enumerate(self.layers):
            x = layer(x, cos, sin, caches[i] if caches else None)
            if i in capture:
                captured.append(x)
        return self.head(self.norm(x)), torch.cat(captured, dim=-1)

    def mtp_forward(
        self,
        hidden: torch.Tensor,
        next_tokens: torch.Tensor,
        cache: KVCache | None = None,
        depth: int = 0,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """MTP block ``depth``: hidden at t [B, T, dim] + token t+1 [B, T] -> logits for t+2.

        Returns (logits, the block's own hidden state), the latter feeding the
        next recurrent draft step as vLLM does for k > 1.
        """
        block = self.mtp[depth]
        start = cache.length if cache else 0
        cos, sin = self._rope(start, next_tokens.shape[1])
        x = block(block.combine(self.embed(next_tokens), hidden), cos, sin, cache)
        return self.head(block.norm(x)), x

    def rope(self, start: int, length: int) -> tuple[torch.Tensor, torch.Tensor]:
        """cos/sin rows for positions start .. start+length-1 (shared with drafters)."""
        return self._rope(start, length)

    def new_caches(self, n: int | None = None) -> list[KVCache]:
        """Empty caches: one per target layer (or ``n`` of them)."""
        ref = self.head.weight
        return [KVCache(self.cfg, ref.device, ref.dtype) for _ in range(n or self.cfg.n_layers)]

    @staticmethod
    def update_router_bias(blocks: nn.ModuleList, rate: float) -> None:
        for block in blocks:
            block.ffn.update_bias(rate)

    def moe_aux_loss(self, blocks: nn.ModuleList) -> torch.Tensor:
        losses = [b.ffn.aux_loss for b in blocks if b.ffn.aux_loss is not None]
        return torch.stack(losses).mean() if losses else self.head.weight.new_zeros(())


class DSparkDrafter(nn.Module):
    """A DSpark-style multi-layer drafter, stored as its own checkpoint.

    Input at position t: ``main_norm(main_proj(features_t)) + embed(token t+1)``,
    where the features are the target's hidden states of ``target_layers``
    concatenated (``dspark_target_layer_ids``); then ``n_stages`` stacked
    decoder blocks ``mtp.0 .. mtp.{n-1}`` and the last stage's ``norm`` before
    the target's head predict token t+2. For further drafts the drafter's own
    output hidden state replaces the target features (skipping ``main_proj``),
    as EAGLE-style drafters recur. The embedding and head are the target's.
    Names match DeepSeek-V4 DSpark checkpoints: ``mtp.0.main_proj.weight``,
    ``mtp.0.main_norm.weight``, ``mtp.{j}.ffn.experts.{e}.w1.weight``,
    ``mtp.{n-1}.norm.weight``.
    """

    def __init__(self, cfg: ModelConfig, n_stages: int = 3, target_layers: tuple[int, ...] | None = None) -> None:
        super().__init__()
        self.cfg = cfg
        self.target_layers = target_layers or (0, cfg.n_layers - 1)
        self.mtp = nn.ModuleList(Block(cfg) for _ in range(n_stages))
        first, last = self.mtp[0], self.mtp[-1]
        # registered on the stage blocks so the names are mtp.0.main_proj / mtp.{n-1}.norm
        first.main_proj = nn.Linear(cfg.dim * len(self.target_layers), cfg.dim, bias=False)
        first.main_norm = RMSNorm(cfg.dim, cfg.norm_eps)
        last.norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.apply(Transformer._init_weights)

    def forward(
        self,
        target: Transformer,
        features: torch.Tensor,
        next_tokens: torch.Tensor,
        caches: list[KVCache] | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """features [B, T, k*dim] (target) or [B, T, dim] (own hidden) + token t+1 -> (logits for t+2, hidden)."""
        first = self.mtp[0]
        if features.shape[-1] != self.cfg.dim:
            features = first.main_proj(features)
        x = first.main_norm(features) + target.embed(next_tokens)
        cos, sin = target.rope(caches[0].length if caches else 0, next_tokens.shape[1])
        for i, block in enumerate(self.mtp):
            x = block(x, cos, sin, caches[i] if caches else None)
        return target.head(self.mtp[-1].norm(x)), x
