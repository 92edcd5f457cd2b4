"""Sparse copies of published checkpoints: real tensor names, shapes and dtypes
derived from each publisher's config.json (tests/data/published/<name>/;
tests/data/published/SOURCES.md says where every file came from), shards grouped
as save_pretrained groups them (model order, 5 GB each), data sections left as holes so a 700 GB model
costs a few MB of disk, and plausible scale bytes (written with specguard's
codecs) where the content rules read.

    python scripts/published_sparse.py NAME OUTDIR [--layers N]
    python scripts/published_sparse.py --list

``--layers N`` keeps the first N main layers (and every draft layer, renumbered
after them) so a test can lint a published layout in a second; the config's
layer count is rewritten to match. Without it the whole model is written.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import struct
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cache, partial
from pathlib import Path

import numpy as np

from specguard import codecs
from specguard.formats import scheme as s

DATA = Path(__file__).resolve().parent.parent / "tests" / "data" / "published"
BITS = {"U8": 8, "I8": 8, "F8_E4M3": 8, "F8_E8M0": 8, "BF16": 16, "F16": 16, "F32": 32, "I64": 64}
SHARD_BYTES = 5_000_000_000  # huggingface_hub's default max_shard_size ("5GB")


@dataclass(frozen=True)
class Tensor:
    name: str
    dtype: str
    shape: tuple[int, ...]
    scale_of: str | None = None  # how to fill its first bytes: a key of ``_SAMPLERS``

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * BITS[self.dtype] // 8


# ------------------------------------------------------------------ tensor families

def bf16(name: str, *shape: int, dtype: str = "BF16") -> Iterator[Tensor]:
    yield Tensor(name, dtype, tuple(shape))


def fp8_block(module: str, out: int, inp: int, *, scale: str = "weight_scale_inv",
              scale_dtype: str = "F32") -> Iterator[Tensor]:
    """DeepSeek FP8 block 128x128: E4M3 weight + one scale per block (edge blocks partial)."""
    yield Tensor(f"{module}.weight", "F8_E4M3", (out, inp))
    kind = "fp8_e8m0" if scale_dtype == "F8_E8M0" else "fp8_f32"
    yield Tensor(f"{module}.{scale}", scale_dtype, (-(-out // 128), -(-inp // 128)), f"{kind}:{inp}")


def nvfp4_modelopt(module: str, out: int, inp: int) -> Iterator[Tensor]:
    yield Tensor(f"{module}.weight", "U8", (out, inp // 2))
    yield Tensor(f"{module}.weight_scale", "F8_E4M3", (out, inp // 16), f"nvfp4:{inp}")
    yield Tensor(f"{module}.weight_scale_2", "F32", (), "nvfp4_scale_2")
    yield Tensor(f"{module}.input_scale", "F32", (), "input_scale")


def mxfp4_deepseek(module: str, out: int, inp: int) -> Iterator[Tensor]:
    """DeepSeek-V4 FP4 experts: packed E2M1 as I8, E8M0 scale per 32 along the input."""
    yield Tensor(f"{module}.weight", "I8", (out, inp // 2))
    yield Tensor(f"{module}.scale", "F8_E8M0", (out, inp // 32), f"mxfp4:{inp}")


# ------------------------------------------------------------------ DeepSeek-V3 / R1

def _v3_attention(p: str, c: dict, lin: Callable[..., Iterator[Tensor]]) -> Iterator[Tensor]:
    h, heads = c["hidden_size"], c["num_attention_heads"]
    qk = c["qk_nope_head_dim"] + c["qk_rope_head_dim"]
    yield from bf16(f"{p}.input_layernorm.weight", h)
    yield from lin(f"{p}.self_attn.q_a_proj", c["q_lora_rank"], h)
    yield from bf16(f"{p}.self_attn.q_a_layernorm.weight", c["q_lora_rank"])
    yield from lin(f"{p}.self_attn.q_b_proj", heads * qk, c["q_lora_rank"])
    yield from lin(f"{p}.self_attn.kv_a_proj_with_mqa", c["kv_lora_rank"] + c["qk_rope_head_dim"], h)
    yield from bf16(f"{p}.self_attn.kv_a_layernorm.weight", c["kv_lora_rank"])
    yield from lin(f"{p}.self_attn.kv_b_proj", heads * (c["qk_nope_head_dim"] + c["v_head_dim"]),
                   c["kv_lora_rank"])
    yield from lin(f"{p}.self_attn.o_proj", h, heads * c["v_head_dim"])
    yield from bf16(f"{p}.post_attention_layernorm.weight", h)


def _v3_mlp(p: str, c: dict, i: int, lin: Callable[..., Iterator[Tensor]]) -> Iterator[Tensor]:
    h = c["hidden_size"]
    if i < c["first_k_dense_replace"]:
        for proj, (o, n) in (("gate_proj", (c["intermediate_size"], h)), ("up_proj", (c["intermediate_size"], h)),
                             ("down_proj", (h, c["intermediate_size"]))):
            yield from lin(f"{p}.mlp.{proj}", o, n)
        return
    m, e = c["moe_intermediate_size"], c["n_routed_experts"]
    yield from bf16(f"{p}.mlp.gate.weight", e, h)
    yield from bf16(f"{p}.mlp.gate.e_score_correction_bias", e, dtype="F32")
    for x in range(e):
        for proj, (o, n) in (("gate_proj", (m, h)), ("up_proj", (m, h)), ("down_proj", (h, m))):
            yield from lin(f"{p}.mlp.experts.{x}.{proj}", o, n)
    sh = m * c["n_shared_experts"]
    for proj, (o, n) in (("gate_proj", (sh, h)), ("up_proj", (sh, h)), ("down_proj", (h, sh))):
        yield from lin(f"{p}.mlp.shared_experts.{proj}", o, n)


def deepseek_v3(c: dict, hq: dict | None, layers: int) -> Iterator[Tensor]:
    """DeepSeek-V3/R1 as deepseek-ai publishes it (DeepSeek's weights README): FP8 block
    linears with F32 ``weight_scale_inv``; MTP at ``model.layers.{N}`` with
    ``embed_tokens``, ``enorm``, ``hnorm``, BF16 ``eh_proj`` and ``shared_head``.
    A ModelOpt NVFP4 export of it (``hq`` given): every linear NVFP4 except the
    ``exclude_modules`` entries, which stay BF16; no MTP layer."""
    h, v = c["hidden_size"], c["vocab_size"]
    if hq is None:
        lin = fp8_block
        drafts = c.get("num_nextn_predict_layers", 0)
    else:
        excluded = set(hq["quantization"]["exclude_modules"])

        def lin(module: str, out: int, inp: int) -> Iterator[Tensor]:
            if module in excluded:
                return bf16(f"{module}.weight", out, inp)
            return nvfp4_modelopt(module, out, inp)
        drafts = 0
    yield from bf16("model.embed_tokens.weight", v, h)
    for i in range(layers):
        yield from _v3_attention(f"model.layers.{i}", c, lin)
        yield from _v3_mlp(f"model.layers.{i}", c, i, lin)
    yield from bf16("model.norm.weight", h)
    yield from bf16("lm_head.weight", v, h)
    for j in range(drafts):
        p = f"model.layers.{layers + j}"
        yield from bf16(f"{p}.embed_tokens.weight", v, h)
        yield from bf16(f"{p}.enorm.weight", h)
        yield from bf16(f"{p}.hnorm.weight", h)
        yield from bf16(f"{p}.eh_proj.weight", h, 2 * h)
        yield from _v3_attention(p, c, lin)
        yield from _v3_mlp(p, c, c["first_k_dense_replace"], lin)  # MTP layers are MoE
        yield from bf16(f"{p}.shared_head.norm.weight", h)
        yield from bf16(f"{p}.shared_head.head.weight", v, h)


# ------------------------------------------------------------------ DeepSeek-V4

def _v4_lin(module: str, out: int, inp: int) -> Iterator[Tensor]:
    return fp8_block(module, out, inp, scale="scale", scale_dtype="F8_E8M0")


def _v4_block(p: str, c: dict, hash_layer: bool) -> Iterator[Tensor]:
    """One V4 decoder block as the native checkpoint names it (attention, MoE,
    hyper-connection mixers); compressor/indexer tensors are left out."""
    h, hd, heads = c["hidden_size"], c["head_dim"], c["num_attention_heads"]
    hc = c["hc_mult"]
    for mix in ("attn", "ffn"):
        yield from bf16(f"{p}.hc_{mix}_fn", (2 + hc) * hc, hc * h, dtype="F32")
        yield from bf16(f"{p}.hc_{mix}_base", (2 + hc) * hc, dtype="F32")
        yield from bf16(f"{p}.hc_{mix}_scale", 3, dtype="F32")
    yield from bf16(f"{p}.attn_norm.weight", h)
    yield from _v4_lin(f"{p}.attn.wq_a", c["q_lora_rank"], h)
    yield from bf16(f"{p}.attn.q_norm.weight", c["q_lora_rank"])
    yield from _v4_lin(f"{p}.attn.wq_b", heads * hd, c["q_lora_rank"])
    yield from _v4_lin(f"{p}.attn.wkv", hd, h)
    yield from bf16(f"{p}.attn.kv_norm.weight", hd)
    yield from _v4_lin(f"{p}.attn.wo_a", c["o_groups"] * c["o_lora_rank"], heads * hd // c["o_groups"])
    yield from _v4_lin(f"{p}.attn.wo_b", h, c["o_groups"] * c["o_lora_rank"])
    yield from bf16(f"{p}.attn.attn_sink", heads, dtype="F32")
    yield from bf16(f"{p}.ffn_norm.weight", h)
    e, m = c["n_routed_experts"], c["moe_intermediate_size"]
    yield from bf16(f"{p}.ffn.gate.weight", e, h)
    if hash_layer:
        yield from bf16(f"{p}.ffn.gate.tid2eid", c["vocab_size"], c["num_experts_per_tok"], dtype="I64")
    else:
        yield from bf16(f"{p}.ffn.gate.bias", e, dtype="F32")
    for x in range(e):
        for w, (o, n) in (("w1", (m, h)), ("w2", (h, m)), ("w3", (m, h))):
            yield from mxfp4_deepseek(f"{p}.ffn.experts.{x}.{w}", o, n)
    for w, (o, n) in (("w1", (m, h)), ("w2", (h, m)), ("w3", (m, h))):
        yield from _v4_lin(f"{p}.ffn.shared_experts.{w}", o, n)


def _v4_head(p: str, c: dict) -> Iterator[Tensor]:
    h, hc = c["hidden_size"], c["hc_mult"]
    yield from bf16(f"{p}norm.weight", h)
    yield from bf16(f"{p}hc_head_fn", hc, hc * h, dtype="F32")
    yield from bf16(f"{p}hc_head_base", hc, dtype="F32")
    yield from bf16(f"{p}hc_head_scale", 1, dtype="F32")


def deepseek_v4(c: dict, hq: dict | None, layers: int) -> Iterator[Tensor]:
    """DeepSeek-V4-Flash native: FP8 block linears with E8M0 ``.scale``, MXFP4
    experts; MTP blocks ``mtp.{j}`` (``e_proj``/``h_proj``/``enorm``/``hnorm``),
    or, with ``dspark_target_layer_ids``, three DSpark stages ``mtp.{0,1,2}``
    (``main_proj`` on stage 0, the Markov and confidence heads on the last)."""
    h, v = c["hidden_size"], c["vocab_size"]
    yield from bf16("embed.weight", v, h)
    for i in range(layers):
        yield from _v4_block(f"layers.{i}", c, i < c.get("num_hash_layers", 0))
    yield from _v4_head("", c)
    yield from bf16("head.weight", v, h)
    if "dspark_target_layer_ids" in c:
        stages = 3  # DSparkDeepseekV4Model: getattr(config, "n_mtp_layers", None) or 3
        k = len(c["dspark_target_layer_ids"])
        yield from _v4_lin("mtp.0.main_proj", h, h * k)
        yield from bf16("mtp.0.main_norm.weight", h)
        for j in range(stages):
            yield from _v4_block(f"mtp.{j}", c, False)
        last = f"mtp.{stages - 1}."
        yield from _v4_head(last, c)
        r = c["dspark_markov_rank"]
        yield from bf16(f"{last}markov_head.markov_w1.weight", v, r)
        yield from bf16(f"{last}markov_head.markov_w2.weight", v, r)
        yield from bf16(f"{last}confidence_head.proj.weight", 1, h + r, dtype="F32")
        return
    for j in range(c.get("num_nextn_predict_layers", 0)):
        p = f"mtp.{j}"
        yield from bf16(f"{p}.enorm.weight", h)
        yield from bf16(f"{p}.hnorm.weight", h)
        yield from _v4_lin(f"{p}.e_proj", h, h)
        yield from _v4_lin(f"{p}.h_proj", h, h)
        yield from _v4_block(p, c, False)
        yield from _v4_head(f"{p}.", c)


# ------------------------------------------------------------------ others

def _trunk(c: dict, layers: int, layer: Callable[[str, int], Iterator[Tensor]]) -> Iterator[Tensor]:
    """``model.embed_tokens``, ``layers`` decoder layers, ``model.norm`` and (untied) ``lm_head``."""
    h, v = c["hidden_size"], c["vocab_size"]
    yield from bf16("model.embed_tokens.weight", v, h)
    for i in range(layers):
        yield from layer(f"model.layers.{i}", i)
    yield from bf16("model.norm.weight", h)
    if not c.get("tie_word_embeddings"):
        yield from bf16("lm_head.weight", v, h)


def plain(module: str, out: int, inp: int) -> Iterator[Tensor]:
    return bf16(f"{module}.weight", out, inp)


def _fp8_channel(module: str, out: int, inp: int) -> Iterator[Tensor]:
    """compressed-tensors FP8 ``strategy: channel``: E4M3 weight, one F32 scale per output row."""
    yield Tensor(f"{module}.weight", "F8_E4M3", (out, inp))
    yield Tensor(f"{module}.weight_scale", "F32", (out, 1), f"fp8_f32:{inp}")


def _fp8_tensor(module: str, out: int, inp: int) -> Iterator[Tensor]:
    """compressed-tensors FP8 ``strategy: tensor`` with static input scale (RedHatAI/neuralmagic
    ``*-FP8``): E4M3 weight, F32 ``weight_scale`` and ``input_scale`` of one element."""
    yield Tensor(f"{module}.weight", "F8_E4M3", (out, inp))
    yield Tensor(f"{module}.weight_scale", "F32", (1,), "input_scale")
    yield Tensor(f"{module}.input_scale", "F32", (1,), "input_scale")


def _ignored(module: str, entries: list[str]) -> bool:
    """compressed-tensors ``ignore`` / FP8 ``modules_to_not_convert`` as the exporter applied
    them to its own module names: exact names, ``re:`` patterns, and (ModelOpt) globs."""
    from fnmatch import fnmatch

    for e in entries:
        if e.startswith("re:"):
            if re.match(e[3:], module):
                return True
        elif e == module or module.startswith(e + ".") or ("*" in e and fnmatch(module, e)) or e in module:
            return True
    return False


def _linear_writer(c: dict, hq: dict | None) -> Callable[[str, int, int], Iterator[Tensor]]:
    """How the config's quantizer stored a linear: ModelOpt NVFP4 (``hq``), FP8 block 128x128
    (``quant_method: fp8``, F32 ``weight_scale_inv``), compressed-tensors FP8 channel or block
    (F32 ``weight_scale``), else BF16; entries of the exclusion list stay BF16."""
    qc = c.get("quantization_config") or {}
    if hq is not None:
        entries, quantized = hq["quantization"]["exclude_modules"], nvfp4_modelopt
    elif qc.get("quant_method") == "fp8":
        entries, quantized = qc.get("modules_to_not_convert") or qc.get("ignored_layers") or [], fp8_block
    elif qc.get("quant_method") == "compressed-tensors":
        weights = next(iter(qc["config_groups"].values()))["weights"]
        entries = qc.get("ignore") or []
        quantized = {"channel": _fp8_channel, "tensor": _fp8_tensor}.get(
            weights["strategy"], partial(fp8_block, scale="weight_scale"))
    else:
        return plain

    def lin(module: str, out: int, inp: int) -> Iterator[Tensor]:
        return plain(module, out, inp) if _ignored(module, entries) else quantized(module, out, inp)
    return lin


def _qwen3_next_layer(p: str, c: dict, i: int, lin: Callable[..., Iterator[Tensor]]) -> Iterator[Tensor]:
    """One Qwen3-Next decoder layer as Qwen's checkpoints name it (vLLM 0.33 qwen3_next.py):
    gated DeltaNet (``linear_attn``) or gated full attention (``layer_types``), then the MoE
    block (router ``mlp.gate``, experts, ``shared_expert`` and its ``shared_expert_gate``)."""
    h, hd = c["hidden_size"], c["head_dim"]
    yield from bf16(f"{p}.input_layernorm.weight", h)
    if i < len(c["layer_types"]) and c["layer_types"][i] == "linear_attention":
        kh, vh = c["linear_num_key_heads"], c["linear_num_value_heads"]
        kd, vd = c["linear_key_head_dim"], c["linear_value_head_dim"]
        a = f"{p}.linear_attn"
        yield from lin(f"{a}.in_proj_qkvz", 2 * kh * kd + 2 * vh * vd, h)
        yield from lin(f"{a}.in_proj_ba", 2 * vh, h)
        yield from bf16(f"{a}.conv1d.weight", 2 * kh * kd + vh * vd, 1, c["linear_conv_kernel_dim"])
        yield from bf16(f"{a}.A_log", vh, dtype="F32")
        yield from bf16(f"{a}.dt_bias", vh)
        yield from bf16(f"{a}.norm.weight", vd)
        yield from lin(f"{a}.out_proj", h, vh * vd)
    else:
        heads, kv = c["num_attention_heads"], c["num_key_value_heads"]
        a = f"{p}.self_attn"
        yield from lin(f"{a}.q_proj", 2 * heads * hd, h)  # query and its output gate
        yield from lin(f"{a}.k_proj", kv * hd, h)
        yield from lin(f"{a}.v_proj", kv * hd, h)
        yield from lin(f"{a}.o_proj", h, heads * hd)
        yield from bf16(f"{a}.q_norm.weight", hd)
        yield from bf16(f"{a}.k_norm.weight", hd)
    yield from bf16(f"{p}.post_attention_layernorm.weight", h)
    m, sh = c["moe_intermediate_size"], c["shared_expert_intermediate_size"]
    yield from lin(f"{p}.mlp.gate", c["num_experts"], h)
    for x in range(c["num_experts"]):
        for proj, (o, n) in (("gate_proj", (m, h)), ("up_proj", (m, h)), ("down_proj", (h, m))):
            yield from lin(f"{p}.mlp.experts.{x}.{proj}", o, n)
    for proj, (o, n) in (("gate_proj", (sh, h)), ("up_proj", (sh, h)), ("down_proj", (h, sh))):
        yield from lin(f"{p}.mlp.shared_expert.{proj}", o, n)
    yield from lin(f"{p}.mlp.shared_expert_gate", 1, h)


def qwen3_next(c: dict, hq: dict | None, layers: int, draft_bf16: bool = False) -> Iterator[Tensor]:
    """Qwen3-Next (``Qwen3NextForCausalLM``) FP8 as Qwen publishes it: FP8 block linears
    but ``modules_to_not_convert``; its MTP at ``mtp.*`` (``fc``, ``pre_fc_norm_{embedding,hidden}``,
    one full-attention MoE layer ``mtp.layers.0``, ``norm``), the names vLLM 0.33's
    qwen3_next_mtp.py loads; with ``draft_bf16`` the MTP is a BF16 release's, grafted."""
    h = c["hidden_size"]
    lin = _linear_writer(c, hq)
    yield from _trunk(c, layers, lambda p, i: _qwen3_next_layer(p, c, i, lin))
    yield from _qwen_mtp(c, h, _qwen3_next_layer, plain if draft_bf16 else lin)


def _qwen3_5_layer(p: str, c: dict, i: int, lin: Callable[..., Iterator[Tensor]]) -> Iterator[Tensor]:
    """One Qwen3.5 MoE decoder layer: Qwen3-Next's, but the gated DeltaNet's input projections
    are stored unfused (``in_proj_qkv``, ``in_proj_z``, ``in_proj_b``, ``in_proj_a``: the shards of
    SGLang 0.5.23 / vLLM 0.33 qwen3_5.py ``packed_modules_mapping``)."""
    if i < len(c["layer_types"]) and c["layer_types"][i] == "linear_attention":
        kh, vh = c["linear_num_key_heads"], c["linear_num_value_heads"]
        kd, vd, h = c["linear_key_head_dim"], c["linear_value_head_dim"], c["hidden_size"]
        a = f"{p}.linear_attn"
        for t in _qwen3_next_layer(p, c, i, lin):
            if t.name.startswith((f"{a}.in_proj_qkvz", f"{a}.in_proj_ba")):
                continue
            yield t
            if t.name == f"{p}.input_layernorm.weight":
                yield from lin(f"{a}.in_proj_qkv", 2 * kh * kd + vh * vd, h)
                yield from lin(f"{a}.in_proj_z", vh * vd, h)
                yield from lin(f"{a}.in_proj_b", vh, h)
                yield from lin(f"{a}.in_proj_a", vh, h)
        return
    yield from _qwen3_next_layer(p, c, i, lin)


def qwen3_5_moe(c: dict, hq: dict | None, layers: int, draft_bf16: bool = False) -> Iterator[Tensor]:
    """Qwen3.5 MoE text (``Qwen3_5MoeForCausalLM``, Qwen3.8's release) FP8 as Qwen publishes it:
    FP8 block linears but ``modules_to_not_convert``; its MTP at ``mtp.*`` (``fc``,
    ``pre_fc_norm_{embedding,hidden}``, one full-attention MoE layer ``mtp.layers.0``, ``norm``),
    the names SGLang 0.5.23's and vLLM 0.33's qwen3_5_mtp.py load; with ``draft_bf16`` a BF16
    release's MTP, grafted."""
    h = c["hidden_size"]
    lin = _linear_writer(c, hq)
    yield from _trunk(c, layers, lambda p, i: _qwen3_5_layer(p, c, i, lin))
    yield from _qwen_mtp(c, h, _qwen3_5_layer, plain if draft_bf16 else lin)


def _qwen_mtp(c: dict, h: int, layer: Callable[..., Iterator[Tensor]],
              lin: Callable[..., Iterator[Tensor]]) -> Iterator[Tensor]:
    """The MTP block Qwen3-Next and Qwen3.5 store at ``mtp.*``: ``fc``, the two pre-fc norms, one
    full-attention decoder layer ``mtp.layers.0`` (``layer``, its linears written by ``lin``), ``norm``."""
    full = {**c, "layer_types": ["full_attention"]}
    yield from lin("mtp.fc", h, 2 * h)
    yield from bf16("mtp.pre_fc_norm_embedding.weight", h)
    yield from bf16("mtp.pre_fc_norm_hidden.weight", h)
    yield from layer("mtp.layers.0", full, 0, lin)
    yield from bf16("mtp.norm.weight", h)


def ernie45_moe(c: dict, hq: dict | None, layers: int) -> Iterator[Tensor]:
    """ERNIE-4.5 MoE (``Ernie4_5_MoeForCausalLM``) as baidu's PyTorch releases name it (vLLM
    0.33 ernie45_moe.py): dense MLP before ``moe_layer_start_index``, then router ``mlp.gate``,
    ``mlp.moe_statics.e_score_correction_bias`` (F32), experts and shared experts; tied
    embeddings. Its MTP (ernie_mtp.py): ``model.mtp_{emb,hidden}_norm.0``,
    ``model.mtp_linear_proj.0`` and one dense decoder layer ``model.mtp_block.0``, stored BF16
    (the BF16 release's; an FP8 trunk keeps them so)."""
    h, heads, kv, hd = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
    e, m, i_dense = c["moe_num_experts"], c["moe_intermediate_size"], c["intermediate_size"]
    lin = _linear_writer(c, hq)

    def layer(p: str, i: int, lin: Callable[..., Iterator[Tensor]], moe: bool) -> Iterator[Tensor]:
        yield from bf16(f"{p}.input_layernorm.weight", h)
        for proj, out in (("q_proj", heads * hd), ("k_proj", kv * hd), ("v_proj", kv * hd)):
            yield from lin(f"{p}.self_attn.{proj}", out, h)
        yield from lin(f"{p}.self_attn.o_proj", h, heads * hd)
        yield from bf16(f"{p}.post_attention_layernorm.weight", h)
        if not moe:
            for proj, (o, n) in (("gate_proj", (i_dense, h)), ("up_proj", (i_dense, h)), ("down_proj", (h, i_dense))):
                yield from lin(f"{p}.mlp.{proj}", o, n)
            return
        yield from lin(f"{p}.mlp.gate", e, h)
        yield from bf16(f"{p}.mlp.moe_statics.e_score_correction_bias", 1, e, dtype="F32")
        sh = m * c["moe_num_shared_experts"]
        for x in range(e):
            for proj, (o, n) in (("gate_proj", (m, h)), ("up_proj", (m, h)), ("down_proj", (h, m))):
                yield from lin(f"{p}.mlp.experts.{x}.{proj}", o, n)
        for proj, (o, n) in (("gate_proj", (sh, h)), ("up_proj", (sh, h)), ("down_proj", (h, sh))):
            yield from lin(f"{p}.mlp.shared_experts.{proj}", o, n)

    yield from _trunk(c, layers, lambda p, i: layer(p, i, lin, i >= c["moe_layer_start_index"]))
    for j in range(c.get("num_nextn_predict_layers", 0)):
        yield from bf16(f"model.mtp_emb_norm.{j}.weight", h)
        yield from bf16(f"model.mtp_hidden_norm.{j}.weight", h)
        yield from bf16(f"model.mtp_linear_proj.{j}.weight", h, 2 * h)
        yield from layer(f"model.mtp_block.{j}", 0, plain, False)



def _llama_layer(p: str, c: dict, bias: bool, lin: Callable[..., Iterator[Tensor]] = plain) -> Iterator[Tensor]:
    h, heads, kv = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"]
    hd = c.get("head_dim", h // heads)
    yield from bf16(f"{p}.input_layernorm.weight", h)
    for proj, out in (("q_proj", heads * hd), ("k_proj", kv * hd), ("v_proj", kv * hd)):
        yield from lin(f"{p}.self_attn.{proj}", out, h)
        if bias:
            yield from bf16(f"{p}.self_attn.{proj}.bias", out)
    yield from lin(f"{p}.self_attn.o_proj", h, heads * hd)
    yield from bf16(f"{p}.post_attention_layernorm.weight", h)
    i = c["intermediate_size"]
    for proj, (o, n) in (("gate_proj", (i, h)), ("up_proj", (i, h)), ("down_proj", (h, i))):
        yield from lin(f"{p}.mlp.{proj}", o, n)


def mimo(c: dict, hq: dict | None, layers: int) -> Iterator[Tensor]:
    """XiaomiMiMo MiMo-7B: BF16 Qwen2-style trunk (q/k/v bias) and MTP layers
    ``model.mtp_layers.{j}`` (token/hidden layernorms, ``input_proj``, one decoder
    layer, ``final_layernorm``), the names vLLM 0.33's mimo_mtp.py loads."""
    h = c["hidden_size"]
    yield from _trunk(c, layers, lambda p, i: _llama_layer(p, c, bias=True))
    for j in range(c.get("num_nextn_predict_layers", 0)):
        p = f"model.mtp_layers.{j}"
        yield from bf16(f"{p}.token_layernorm.weight", h)
        yield from bf16(f"{p}.hidden_layernorm.weight", h)
        yield from bf16(f"{p}.input_proj.weight", h, 2 * h)
        yield from _llama_layer(p, c, bias=True)
        yield from bf16(f"{p}.final_layernorm.weight", h)


def gpt_oss(c: dict, hq: dict | None, layers: int) -> Iterator[Tensor]:
    """openai/gpt-oss: BF16 attention (with sinks) and router, MXFP4 experts as
    ``*_blocks`` U8 [E, N, K/32, 16] + ``*_scales`` U8 [E, N, K/32] + BF16 bias."""
    h, v, e = c["hidden_size"], c["vocab_size"], c["num_local_experts"]
    heads, kv, hd, i = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"], c["intermediate_size"]
    yield from bf16("model.embed_tokens.weight", v, h)
    for n in range(layers):
        p = f"model.layers.{n}"
        yield from bf16(f"{p}.input_layernorm.weight", h)
        for proj, out in (("q_proj", heads * hd), ("k_proj", kv * hd), ("v_proj", kv * hd)):
            yield from bf16(f"{p}.self_attn.{proj}.weight", out, h)
            yield from bf16(f"{p}.self_attn.{proj}.bias", out)
        yield from bf16(f"{p}.self_attn.o_proj.weight", h, heads * hd)
        yield from bf16(f"{p}.self_attn.o_proj.bias", h)
        yield from bf16(f"{p}.self_attn.sinks", heads)
        yield from bf16(f"{p}.post_attention_layernorm.weight", h)
        yield from bf16(f"{p}.mlp.router.weight", e, h)
        yield from bf16(f"{p}.mlp.router.bias", e)
        for proj, (out, inp) in (("gate_up_proj", (2 * i, h)), ("down_proj", (h, i))):
            yield Tensor(f"{p}.mlp.experts.{proj}_blocks", "U8", (e, out, inp // 32, 16))
            yield Tensor(f"{p}.mlp.experts.{proj}_scales", "U8", (e, out, inp // 32), f"mxfp4:{inp}")
            yield from bf16(f"{p}.mlp.experts.{proj}_bias", e, out)
    yield from bf16("model.norm.weight", h)
    yield from bf16("lm_head.weight", v, h)


def llama(c: dict, hq: dict | None, layers: int) -> Iterator[Tensor]:
    """A Llama-3.1 target as its quantizer stored it (``_linear_writer``; vLLM 0.33 llama.py names)."""
    lin = _linear_writer(c, hq)
    yield from _trunk(c, layers, lambda p, i: _llama_layer(p, c, bias=False, lin=lin))


def eagle3(c: dict, hq: dict | None, layers: int) -> Iterator[Tensor]:
    """An EAGLE-3 head (yuhuili/EAGLE3-LLaMA3.1-Instruct-8B layout): one
    ``midlayer`` decoder layer taking 2h input, ``fc`` fusing three target hidden
    states, ``norm``, a draft-vocab ``lm_head`` and the ``d2t``/``t2d`` maps."""
    h, v, dv = c["hidden_size"], c["vocab_size"], c["draft_vocab_size"]
    heads, kv = c["num_attention_heads"], c["num_key_value_heads"]
    hd, i, p = h // heads, c["intermediate_size"], "midlayer"
    yield from bf16("fc.weight", h, 3 * h, dtype="F16")
    yield from bf16(f"{p}.hidden_norm.weight", h, dtype="F16")
    yield from bf16(f"{p}.input_layernorm.weight", h, dtype="F16")
    for proj, out in (("q_proj", heads * hd), ("k_proj", kv * hd), ("v_proj", kv * hd)):
        yield from bf16(f"{p}.self_attn.{proj}.weight", out, 2 * h, dtype="F16")
    yield from bf16(f"{p}.self_attn.o_proj.weight", h, heads * hd, dtype="F16")
    yield from bf16(f"{p}.post_attention_layernorm.weight", h, dtype="F16")
    yield from bf16(f"{p}.mlp.gate_proj.weight", i, h, dtype="F16")
    yield from bf16(f"{p}.mlp.up_proj.weight", i, h, dtype="F16")
    yield from bf16(f"{p}.mlp.down_proj.weight", h, i, dtype="F16")
    yield from bf16("norm.weight", h, dtype="F16")
    yield from bf16("lm_head.weight", dv, h, dtype="F16")
    yield from bf16("d2t", dv, dtype="I64")
    yield Tensor("t2d", "BOOL", (v,))


def _glm_layer(p: str, c: dict, i: int, lin: Callable[..., Iterator[Tensor]]) -> Iterator[Tensor]:
    """One Glm4MoeDecoderLayer as zai-org's checkpoints name it (vLLM 0.33 glm4_moe.py):
    q/k/v with bias, o_proj, q_norm/k_norm (``use_qk_norm``), a dense MLP below
    ``first_k_dense_replace``, else router (+ F32 ``e_score_correction_bias``), routed
    and shared experts. ``lin`` writes the linears (the NVFP4 export's exclusions keep attention BF16)."""
    h, heads, kv, hd = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
    yield from bf16(f"{p}.input_layernorm.weight", h)
    for proj, out in (("q_proj", heads * hd), ("k_proj", kv * hd), ("v_proj", kv * hd)):
        yield from lin(f"{p}.self_attn.{proj}", out, h)
        yield from bf16(f"{p}.self_attn.{proj}.bias", out)
    yield from lin(f"{p}.self_attn.o_proj", h, heads * hd)
    if c.get("use_qk_norm"):
        yield from bf16(f"{p}.self_attn.q_norm.weight", hd)
        yield from bf16(f"{p}.self_attn.k_norm.weight", hd)
    yield from bf16(f"{p}.post_attention_layernorm.weight", h)
    yield from _v3_mlp(p, c, i, lin)


def glm4_moe(c: dict, hq: dict | None, layers: int, draft_bf16: bool = False) -> Iterator[Tensor]:
    """GLM-4.5/4.6/4.7 (``Glm4MoeForCausalLM``): BF16 attention; MLP and experts NVFP4
    (ModelOpt, ``hq`` given) except ``exclude_modules``, else BF16; the nextn layer at
    ``model.layers.{N}`` stored BF16 whole (``mtp.safetensors`` of the release, grafted
    into NVIDIA's export): ``enorm``, ``hnorm``, ``eh_proj``, ``shared_head.{norm,head}``,
    ``embed_tokens`` and one MoE decoder layer (vLLM 0.33 glm4_moe_mtp.py). GLM-4.5-Air-FP8
    (compressed-tensors channel FP8 in config.json): every linear FP8 but the ``ignore``
    entries, the nextn layer too unless ``draft_bf16`` (grafted from the BF16 release)."""
    h, v = c["hidden_size"], c["vocab_size"]
    lin = _linear_writer(c, hq)
    yield from _trunk(c, layers, lambda p, i: _glm_layer(p, c, i, lin))
    # the grafted BF16 nextn layer (NVFP4 export, *-mtp-bf16-*), else as the config's quantizer wrote it
    draft = plain if hq is not None or draft_bf16 else lin
    for j in range(c.get("num_nextn_predict_layers", 0)):
        p = f"model.layers.{layers + j}"
        yield from bf16(f"{p}.enorm.weight", h)
        yield from bf16(f"{p}.hnorm.weight", h)
        yield from draft(f"{p}.eh_proj", h, 2 * h)
        yield from bf16(f"{p}.shared_head.norm.weight", h)
        yield from bf16(f"{p}.shared_head.head.weight", v, h)  # an LM head: never quantized by these exports
        yield from bf16(f"{p}.embed_tokens.weight", v, h)
        yield from _glm_layer(p, c, c["first_k_dense_replace"], draft)  # the nextn layer is MoE


BITS["BOOL"] = 8
MODELS: dict[str, Callable[[dict, dict | None, int], Iterator[Tensor]]] = {
    "deepseek-v3-fp8": deepseek_v3,
    "deepseek-r1-nvfp4": deepseek_v3,
    "deepseek-v4-flash": deepseek_v4,
    "deepseek-v4-flash-dspark": deepseek_v4,
    "mimo-7b": mimo,
    "gpt-oss-20b": gpt_oss,
    "eagle3-llama3.1-8b": eagle3,
    "eagle3-llama3.1-8b-with-target-quant-config": eagle3,
    "llama-3.1-8b-fp8": llama,
    "glm-4.7-nvfp4": glm4_moe,
    "glm-4.7-nvfp4-mtp-not-excluded": glm4_moe,
    "glm-4.7-nvfp4-mtp-excluded-by-checkpoint-names": glm4_moe,
    "glm-4.5-air-fp8": glm4_moe,
    "glm-4.5-air-fp8-mtp-bf16-not-excluded": partial(glm4_moe, draft_bf16=True),
    "glm-4.5-air-fp8-mtp-bf16-excluded": partial(glm4_moe, draft_bf16=True),
    "qwen3-next-fp8": qwen3_next,
    "qwen3-next-fp8-mtp-bf16-not-excluded": partial(qwen3_next, draft_bf16=True),
    "qwen3.8-2.4t-a95b-fp8": qwen3_5_moe,
    "qwen3.8-2.4t-a95b-fp8-mtp-bf16-not-excluded": partial(qwen3_5_moe, draft_bf16=True),
    "qwen3.8-2.4t-a95b-nvfp4-export-mtp-bf16": partial(qwen3_5_moe, draft_bf16=True),
    "ernie-4.5-21b-a3b": ernie45_moe,
    "ernie-4.5-21b-a3b-fp8": ernie45_moe,
    "ernie-4.5-21b-a3b-fp8-mtp-excluded-by-checkpoint-names": ernie45_moe,
}


# ------------------------------------------------------------------ plausible scale bytes

SAMPLE_BYTES = 4096  # what the content rules and the U8 sniff read at most


@cache
def _sample(kind: str, cols: int) -> bytes:
    """The first scale bytes of a weight with ``cols`` inputs, made by quantizing
    enough rows of a Gaussian weight (sigma 0.02, a trained LLM's) with specguard's
    codecs, so their spread is a real quantizer's."""
    rng = np.random.default_rng(cols)
    if kind in ("fp8_f32", "fp8_e8m0"):
        w = rng.normal(0, 0.02, (512, cols)).astype(np.float32)  # four block rows
        dt, name = ("F32", "weight_scale_inv") if kind == "fp8_f32" else ("F8_E8M0", "scale")
        raw = codecs.quantize(s.FP8_BLOCK, w, convention=s.DEEPSEEK, scale_dtype=dt, scale_name=name)[name]
    else:
        group = 16 if kind == "nvfp4" else 32
        w = rng.normal(0, 0.02, (max(1, -(-SAMPLE_BYTES // (cols // group))), cols)).astype(np.float32)
        if kind == "nvfp4":
            raw = codecs.quantize(s.NVFP4, w, convention=s.MODELOPT)["weight_scale"]
        else:
            raw = codecs.quantize(s.MXFP4, w, convention=s.DEEPSEEK)["scale"]
    data = raw.tobytes()
    return (data * -(-SAMPLE_BYTES // len(data)))[:SAMPLE_BYTES]  # repeat the rows to the sample size


def _scale_bytes(t: Tensor) -> bytes:
    kind, _, cols = (t.scale_of or "").partition(":")
    if t.dtype == "F32" and kind == "fp8_f32":
        return _sample(kind, int(cols))[: min(t.nbytes, SAMPLE_BYTES) // 4 * 4]
    if kind == "nvfp4_scale_2":
        return struct.pack("<f", 0.02 * 4 / (6 * 448))  # amax / (6 * 448), amax ~ 4 sigma
    if kind == "input_scale":
        return struct.pack("<f", 2.0 / 448)
    return _sample(kind, int(cols))[: t.nbytes]


# ------------------------------------------------------------------ writing

def shards(tensors: list[Tensor], budget: int = SHARD_BYTES) -> list[list[Tensor]]:
    """Group in model order, a new shard when the next tensor would pass the
    budget: what ``save_pretrained`` / ``split_torch_state_dict_into_shards`` do."""
    out: list[list[Tensor]] = [[]]
    size = 0
    for t in tensors:
        if out[-1] and size + t.nbytes > budget:
            out.append([])
            size = 0
        out[-1].append(t)
        size += t.nbytes
    return out


def write_shard(path: Path, tensors: list[Tensor]) -> None:
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for t in tensors:
        header[t.name] = {"dtype": t.dtype, "shape": list(t.shape), "data_offsets": [offset, offset + t.nbytes]}
        offset += t.nbytes
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    start = 8 + len(raw)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw)
        f.truncate(start + offset)  # a hole: no disk for the data
        for t in tensors:
            if t.scale_of:
                f.seek(start + header[t.name]["data_offsets"][0])
                f.write(_scale_bytes(t))


def _layer_of(pattern: str) -> int | None:
    m = re.search(r"\.layers\.(\d+)(?:\.|\*|$)", pattern)
    return int(m.group(1)) if m else None


def _keep_exclude(entries: list[str], n_full: int, n: int) -> list[str]:
    """The exclude list of the kept layers: entries of a dropped main layer go, entries
    naming a draft layer (index >= the published layer count) follow it to its new index."""
    out = []
    for e in entries:
        layer = _layer_of(e)
        if layer is None or layer < n:
            out.append(e)
        elif layer >= n_full:
            out.append(re.sub(rf"\.layers\.{layer}(?=\.|\*|$)", f".layers.{n + layer - n_full}", e))
    return out


def load_config(name: str) -> tuple[dict, dict | None]:
    root = DATA / name
    cfg = json.loads((root / "config.json").read_text())
    hq_path = root / "hf_quant_config.json"
    return cfg, (json.loads(hq_path.read_text()) if hq_path.exists() else None)


def build(name: str, out: Path, layers: int | None = None) -> Path:
    """Write the sparse copy of published model ``name`` into ``out``."""
    cfg, hq = load_config(name)
    n = cfg["num_hidden_layers"] if layers is None else min(layers, cfg["num_hidden_layers"])
    if name.startswith("eagle3"):
        n = 1
    cfg = {**cfg, "num_hidden_layers": n} if not name.startswith("eagle3") else cfg
    full = json.loads((DATA / name / "config.json").read_text())["num_hidden_layers"]
    if hq is not None and layers is not None:  # the exclude list follows the kept layers
        q = hq["quantization"]
        hq = {**hq, "quantization": {**q, "exclude_modules": _keep_exclude(q["exclude_modules"], full, n)}}
    qc = cfg.get("quantization_config")
    if qc and layers is not None:
        key = next((k for k in ("ignore", "modules_to_not_convert", "ignored_layers") if qc.get(k)), None)
        if key:
            cfg = {**cfg, "quantization_config": {**qc, key: _keep_exclude(qc[key], full, n)}}
    if isinstance(cfg.get("layer_types"), list):
        cfg = {**cfg, "layer_types": cfg["layer_types"][:n]}
    tensors = list(MODELS[name](cfg, hq, n))
    out.mkdir(parents=True, exist_ok=True)
    groups = shards(tensors)
    width = 6 if len(groups) > 99_999 else 5
    weight_map: dict[str, str] = {}
    for k, group in enumerate(groups):
        fname = f"model-{k + 1:0{width}d}-of-{len(groups):0{width}d}.safetensors"
        write_shard(out / fname, group)
        weight_map.update({t.name: fname for t in group})
    index = {"metadata": {"total_size": sum(t.nbytes for t in tensors)}, "weight_map": weight_map}
    (out / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")
    (out / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    if hq is not None:
        (out / "hf_quant_config.json").write_text(json.dumps(hq, indent=2) + "\n")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("name", nargs="?", choices=sorted(MODELS))
    ap.add_argument("out", nargs="?", type=Path)
    ap.add_argument("--layers", type=int, default=None)
    ap.add_argument("--list", action="store_true")
    args = ap.parse_args(argv)
    if args.list or args.name is None:
        print("\n".join(sorted(MODELS)))
        return 0
    if args.out is None:
        ap.error("OUTDIR is required")
    root = build(args.name, args.out, args.layers)
    index = json.loads((root / "model.safetensors.index.json").read_text())
    shard_count = len(set(index["weight_map"].values()))
    print(f"{root}: {len(index['weight_map']):,} tensors in {shard_count} shard(s), "
          f"{index['metadata']['total_size'] / 1e9:,.1f} GB (sparse)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
