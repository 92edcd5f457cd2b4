"""The scenarios of docs/scenarios.md as data: family, draft, storage per module, configs.

Each storage function answers "how does this publisher store this module";
the configs are what that publisher writes into config.json (and
hf_quant_config.json for ModelOpt exports).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from specguard.factory.build import PLAIN_BF16, Storage
from specguard.factory.models import (
    ATTN,
    DENSE,
    DSV3,
    DSV4,
    EXPERT,
    LINEAR_ATTN,
    PROJ,
    QWEN35,
    QWEN35_MOE,
    SHARED,
    ModuleSpec,
    Sizes,
    dspark_target_layers,
    qwen3_5_layer_types,
)
from specguard.formats.scheme import (
    COMPRESSED_TENSORS,
    DEEPSEEK,
    FP8_BLOCK,
    GPTQ,
    INT4_GROUP,
    MODELOPT,
    MXFP4,
    NVFP4,
)
from specguard.layouts.roles import DRAFT, DSPARK, MTP

# Storages as each publisher writes them.
FP8_V4_E8M0 = Storage(FP8_BLOCK, DEEPSEEK, {"scale_name": "scale", "scale_dtype": "F8_E8M0"})
FP8_V4_F32 = Storage(FP8_BLOCK, DEEPSEEK, {"scale_name": "scale", "scale_dtype": "F32"})
FP8_V3 = Storage(FP8_BLOCK, DEEPSEEK)  # weight_scale_inv, F32
FP8_CT = Storage(FP8_BLOCK, COMPRESSED_TENSORS, {"scale_dtype": "BF16"})  # model dtype
NVFP4_MO = Storage(NVFP4, MODELOPT)
NVFP4_MO_NO_GLOBALS = Storage(NVFP4, MODELOPT, drop=("weight_scale_2", "input_scale"))
NVFP4_CT = Storage(NVFP4, COMPRESSED_TENSORS)
MXFP4_DS = Storage(MXFP4, DEEPSEEK)  # I8 packed weight, F8_E8M0 `.scale`
MXFP4_DS_U8 = Storage(MXFP4, DEEPSEEK, {"weight_dtype": "U8", "scale_dtype": "U8"})
FP8_LINEAR_KINDS = (ATTN, SHARED, PROJ, DENSE)

MODELOPT_PRODUCER = {"name": "modelopt", "version": "0.47.0"}


@dataclass(frozen=True)
class Recipe:
    """One checkpoint directory of a scenario."""

    family: str
    storage: Callable[[ModuleSpec], Storage]
    config: Callable[[Sizes], dict[str, Any]]
    draft: str | None = MTP
    draft_layers: int = 1  # written
    main: bool = True  # False: a drafter-only checkpoint (S4's drafter)
    hf_quant_config: Callable[[Sizes], dict[str, Any]] | None = None
    draft_shard: str | None = None
    draft_shard_indexed: bool = True  # False: the index never names the draft shard
    expert_names: str = "expert-first"  # "proj-first": experts.{proj}.{e} (auto-round's MTP export)


@dataclass(frozen=True)
class Scenario:
    name: str
    title: str
    target: Recipe
    drafter: Recipe | None = None
    facts: dict[str, Any] = field(default_factory=dict)


# ------------------------------------------------------------------ storages

def v4_native(expert_dtype: str = "fp4") -> Callable[[ModuleSpec], Storage]:
    """DeepSeek-V4 as DeepSeek ships it: FP8 block linears with a bare `.scale`
    (E8M0 for fp4-expert checkpoints, F32 for fp8-expert ones); MXFP4 experts."""
    def storage(m: ModuleSpec) -> Storage:
        if m.kind == EXPERT:
            return MXFP4_DS if expert_dtype == "fp4" else FP8_V4_F32
        if m.kind in FP8_LINEAR_KINDS:
            return FP8_V4_E8M0 if expert_dtype == "fp4" else FP8_V4_F32
        return PLAIN_BF16
    return storage


def nvfp4_conversion(draft_experts: Storage) -> Callable[[ModuleSpec], Storage]:
    """NVIDIA's MXFP4 -> NVFP4 conversion: main experts NVFP4 (ModelOpt names),
    draft experts as ``draft_experts``, linears kept FP8 block with E8M0 `.scale`."""
    def storage(m: ModuleSpec) -> Storage:
        if m.kind == EXPERT:
            return draft_experts if m.role == DRAFT else NVFP4_MO
        if m.kind in FP8_LINEAR_KINDS:
            return FP8_V4_E8M0
        return PLAIN_BF16
    return storage


def llm_compressor_bf16_mtp(m: ModuleSpec) -> Storage:
    """S2: NVFP4 experts and every other ``Linear`` FP8 block; the MTP block left
    BF16 (ignored with ``re:.*mtp\\..*``). The router and the head are not
    ``nn.Linear`` in the model llm-compressor walks (DeepSeek's ``Gate`` and
    ``ParallelHead``), so ``Linear`` does not reach them: BF16."""
    if m.role == DRAFT:
        return PLAIN_BF16
    if m.kind == EXPERT:
        return NVFP4_CT
    if m.kind in FP8_LINEAR_KINDS:
        return FP8_CT
    return PLAIN_BF16


def v3_fp8(m: ModuleSpec) -> Storage:
    """DeepSeek-V3 as DeepSeek ships it: FP8 block linears and experts; the MTP
    layer's ``eh_proj`` and ``shared_head.head`` BF16 (vLLM's deepseek_mtp.py
    builds ``eh_proj`` as a plain ``nn.Linear``, which has no place for FP8 bytes)."""
    if m.kind == PROJ:
        return PLAIN_BF16
    return FP8_V3 if m.kind in (*FP8_LINEAR_KINDS, EXPERT) else PLAIN_BF16


def v3_fp8_bf16_mtp(m: ModuleSpec) -> Storage:
    """DeepSeek-V3 FP8 as a quantizer that converts the main stack only writes it: the MTP
    layer stays BF16 while ``quant_method: fp8`` names no exclusion for it (the shape of
    published GLM-4.x / Qwen3-Next FP8 exports whose draft was left out)."""
    return PLAIN_BF16 if m.role == DRAFT else v3_fp8(m)


def modelopt_nvfp4_mlp(m: ModuleSpec) -> Storage:
    """ModelOpt NVFP4 of every MLP/expert linear, main and MTP alike; attention,
    eh_proj and heads excluded (BF16)."""
    return NVFP4_MO if m.kind in (EXPERT, SHARED, DENSE) else PLAIN_BF16


def all_bf16(m: ModuleSpec) -> Storage:
    return PLAIN_BF16


# ------------------------------------------------------------------- configs

FP8_V4_QUANT = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                "scale_fmt": "ue8m0", "weight_block_size": [128, 128]}


def v4_config(s: Sizes, *, nextn: int, expert_dtype: str | None = "fp4",
              quant: dict[str, Any] | None = None, dspark: int = 0) -> dict[str, Any]:
    cfg: dict[str, Any] = {
        "architectures": ["DeepseekV4ForCausalLM"],
        "model_type": "deepseek_v4",
        "vocab_size": s.vocab,
        "hidden_size": s.hidden,
        "num_hidden_layers": s.layers,
        "num_attention_heads": s.heads,
        "head_dim": s.head_dim,
        "q_lora_rank": s.q_lora,
        "o_lora_rank": s.o_lora,
        "o_groups": s.o_groups,
        "n_routed_experts": s.experts,
        "n_shared_experts": 1,
        "num_experts_per_tok": s.experts_per_token,
        "moe_intermediate_size": s.moe_inter,
        "norm_topk_prob": True,
        # every layer stores ``ffn.gate.bias``; vLLM creates that parameter only for
        # noaux_tc routing (DeepSeek's own configs say so)
        "topk_method": "noaux_tc",
        "num_nextn_predict_layers": nextn,
        "rms_norm_eps": 1e-6,
        "max_position_embeddings": 4096,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    }
    if expert_dtype is not None:
        cfg["expert_dtype"] = expert_dtype
    if quant is not None:
        cfg["quantization_config"] = quant
    if dspark:
        cfg.update({"dspark_target_layer_ids": dspark_target_layers(s), "n_mtp_layers": dspark,
                    "num_nextn_predict_layers": dspark, "dspark_block_size": dspark + 1})
    return cfg


def v3_config(s: Sizes, *, nextn: int, quant: dict[str, Any] | None) -> dict[str, Any]:
    cfg: dict[str, Any] = {
        "architectures": ["DeepseekV3ForCausalLM"],
        "model_type": "deepseek_v3",
        "vocab_size": s.vocab,
        "hidden_size": s.hidden,
        "intermediate_size": s.dense_inter,
        "moe_intermediate_size": s.moe_inter,
        "num_hidden_layers": s.layers,
        "num_nextn_predict_layers": nextn,
        "num_attention_heads": s.heads,
        "num_key_value_heads": s.heads,
        "q_lora_rank": s.q_lora,
        "kv_lora_rank": s.kv_lora,
        "qk_nope_head_dim": s.qk_nope,
        "qk_rope_head_dim": s.qk_rope,
        "v_head_dim": s.v_head,
        "n_routed_experts": s.experts,
        "n_shared_experts": 1,
        "num_experts_per_tok": s.experts_per_token,
        "first_k_dense_replace": 1,
        "moe_layer_freq": 1,
        "n_group": 1,
        "topk_group": 1,
        "topk_method": "noaux_tc",
        "scoring_func": "sigmoid",
        "routed_scaling_factor": 2.5,
        "norm_topk_prob": True,
        "rms_norm_eps": 1e-6,
        "max_position_embeddings": 4096,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    }
    if quant is not None:
        cfg["quantization_config"] = quant
    return cfg


def ct_nvfp4_fp8_block(ignore: list[str]) -> dict[str, Any]:
    """compressed-tensors' config.json block as ModelCompressor.update_config writes it
    (QuantizationConfig.model_dump() for an NVFP4 group and an FP8_BLOCK group)."""
    nvfp4_args = {"num_bits": 4, "type": "float", "symmetric": True, "group_size": 16,
                  "strategy": "tensor_group", "block_structure": None, "actorder": None,
                  "scale_dtype": "torch.float8_e4m3fn", "zp_dtype": None,
                  "observer_kwargs": {}}
    fp8_in = {"num_bits": 8, "type": "float", "symmetric": True, "group_size": 128,
              "strategy": "group", "block_structure": None, "dynamic": True, "actorder": None,
              "scale_dtype": None, "zp_dtype": None, "observer": None, "observer_kwargs": {}}
    return {
        "version": "0.17.0",
        "quant_method": "compressed-tensors",
        "sparsity_config": {},
        "transform_config": {},
        "config_groups": {
            "group_0": {
                "targets": [r"re:.*ffn\.experts\.\d+\.w[123]$"],
                "weights": {**nvfp4_args, "dynamic": False, "observer": "memoryless_minmax"},
                "input_activations": {**nvfp4_args, "dynamic": "local",
                                      "observer": "static_minmax"},
                "output_activations": None,
                "format": "nvfp4-pack-quantized",
            },
            "group_1": {
                # every other Linear; exact and re: targets win over class targets in
                # compressed-tensors' match_targets and in vLLM's find_matched_target
                "targets": ["Linear"],
                "weights": {"num_bits": 8, "type": "float", "symmetric": True,
                            "group_size": None, "strategy": "block", "block_structure": [128, 128],
                            "dynamic": False, "actorder": None, "scale_dtype": None,
                            "zp_dtype": None, "observer": "memoryless_minmax",
                            "observer_kwargs": {}},
                "input_activations": fp8_in,
                "output_activations": None,
                "format": "float-quantized",
            },
        },
        "kv_cache_scheme": None,
        "format": "mixed-precision",
        "quantization_status": "compressed",
        "global_compression_ratio": None,
        "ignore": ignore,
    }


def modelopt_exclude(s: Sizes, nextn: int) -> list[str]:
    """What ModelOpt's export lists as not quantized: BF16 attention (per layer, as
    the ``*self_attn*`` recipe pattern), the MTP eh_proj and shared head, embedding, head.

    The MTP head is listed as ``model.layers.{N}.*head``, a wildcard a careful
    publisher writes: the checkpoint calls it ``model.layers.{N}.shared_head.head``
    but vLLM builds it at ``model.layers.{N}.head`` (deepseek_mtp.py SharedHead gets
    the layer's prefix), which the literal name matches neither exactly, nor as a
    substring, nor by fnmatch (modelopt.py ``is_layer_excluded``)."""
    layers = range(s.layers + nextn)
    draft = [s.layers + j for j in range(nextn)]
    return (["lm_head", "model.embed_tokens"] + [f"model.layers.{i}.self_attn*" for i in layers]
            + [f"model.layers.{i}.{m}" for i in draft for m in ("eh_proj", "*head")])


def modelopt_quant(s: Sizes, nextn: int = 1) -> dict[str, Any]:
    """config.json ``quantization_config`` as ModelOpt 0.47's HF export writes it."""
    nvfp4 = {"dynamic": False, "num_bits": 4, "type": "float", "group_size": 16}
    return {"config_groups": {"group_0": {"input_activations": nvfp4, "weights": dict(nvfp4),
                                          "targets": ["Linear"]}},
            "ignore": modelopt_exclude(s, nextn), "quant_algo": "NVFP4",
            "producer": MODELOPT_PRODUCER, "quant_method": "modelopt"}


def modelopt_hf_quant_config(s: Sizes, nextn: int = 1) -> dict[str, Any]:
    """hf_quant_config.json as ModelOpt's unified HF export writes it."""
    return {"producer": MODELOPT_PRODUCER,
            "quantization": {"quant_algo": "NVFP4", "kv_cache_quant_algo": None,
                             "group_size": 16, "exclude_modules": modelopt_exclude(s, nextn)}}


def _s1_quant(ignored: bool = True) -> dict[str, Any]:
    q = {**FP8_V4_QUANT, "moe_quant_algo": "NVFP4"}
    if ignored:
        q["ignored_layers"] = ["mtp.*"]
    return q


# ------------------------------------------------------------------ Qwen3.5 / 3.6 (issue 19)

INT4_GPTQ_G128 = Storage(INT4_GROUP, GPTQ, {"group_size": 128})
INT4_GPTQ_G64 = Storage(INT4_GROUP, GPTQ, {"group_size": 64})
INT4_CT_G128 = Storage(INT4_GROUP, COMPRESSED_TENSORS, {"group_size": 128})
QWEN_GPTQ_EXCLUDED = (ATTN, LINEAR_ATTN, SHARED, PROJ)


def qwen_gptq(draft: Callable[[ModuleSpec], Storage]) -> Callable[[ModuleSpec], Storage]:
    """Qwen3.5 MoE GPTQ INT4 as auto-round / Qwen's GPTQ-Int4 releases store it:
    routed experts INT4 g128; attention, Gated DeltaNet, shared experts, routers BF16
    (their ``dynamic`` excludes ``.*attn.*`` and ``.*shared_expert.*``); the drafter
    as ``draft`` says."""
    def storage(m: ModuleSpec) -> Storage:
        if m.role == DRAFT:
            return draft(m)
        return INT4_GPTQ_G128 if m.kind in (EXPERT, DENSE) else PLAIN_BF16
    return storage


def draft_bf16(m: ModuleSpec) -> Storage:
    return PLAIN_BF16


def draft_rtn_experts(m: ModuleSpec) -> Storage:
    """auto-round's ``copy_missing_tensors_from_source``: 2-D ``.weight``s RTN-packed
    into ``qweight/qzeros/scales``; ``mtp.fc`` and norms kept BF16."""
    return INT4_GPTQ_G128 if m.kind == EXPERT else PLAIN_BF16


def draft_fp8_release(m: ModuleSpec) -> Storage:
    """The drafter copied from Qwen's FP8 release: every linear FP8 block 128x128 with
    F32 ``weight_scale_inv`` (experts included); ``mtp.fc``, routers and norms BF16."""
    return FP8_V3 if m.kind in (ATTN, EXPERT, SHARED) else PLAIN_BF16


def ct_w4a16_dense(m: ModuleSpec) -> Storage:
    """llm-compressor W4A16 of a dense Qwen3.6: attention and MLP linears INT4 g128,
    main and drafter; Gated DeltaNet, ``lm_head`` and ``mtp.fc`` BF16, as in
    tests/data/published/qwen3_5_dense_ct_mtpfile (which quantizes the drafter's
    projections at g32 and part of the Gated DeltaNet too)."""
    return INT4_CT_G128 if m.kind in (ATTN, DENSE) else PLAIN_BF16


def qwen_text_config(s: Sizes, moe: bool) -> dict[str, Any]:
    text: dict[str, Any] = {
        "model_type": "qwen3_5_moe_text" if moe else "qwen3_5_text",
        "vocab_size": s.vocab, "hidden_size": s.hidden, "num_hidden_layers": s.layers,
        "layer_types": qwen3_5_layer_types(s), "full_attention_interval": 2,
        "num_attention_heads": s.heads, "num_key_value_heads": 1, "head_dim": s.head_dim,
        "attn_output_gate": True, "linear_num_key_heads": 1, "linear_key_head_dim": 128,
        "linear_num_value_heads": 2, "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4,
        "mtp_num_hidden_layers": 1, "mtp_use_dedicated_embeddings": False,
        "rms_norm_eps": 1e-6, "max_position_embeddings": 4096, "tie_word_embeddings": False,
        "partial_rotary_factor": 0.25, "dtype": "bfloat16",
    }
    if moe:
        text.update({"num_experts": s.experts, "num_experts_per_tok": s.experts_per_token,
                     "moe_intermediate_size": s.moe_inter,
                     "shared_expert_intermediate_size": s.shared_inter})
    else:
        text["intermediate_size"] = s.dense_inter
    return text


def qwen_config(s: Sizes, *, moe: bool, quant: dict[str, Any] | None) -> dict[str, Any]:
    arch = "Qwen3_5MoeForConditionalGeneration" if moe else "Qwen3_5ForConditionalGeneration"
    cfg: dict[str, Any] = {"architectures": [arch], "model_type": "qwen3_5_moe" if moe else "qwen3_5",
                           "text_config": qwen_text_config(s, moe), "tie_word_embeddings": False}
    if quant is not None:
        cfg["quantization_config"] = quant
    return cfg


def autoround_gptq(dynamic: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """config.json ``quantization_config`` of an auto-round export in GPTQ format."""
    return {"quant_method": "gptq", "bits": 4, "group_size": 128, "sym": True, "desc_act": False,
            "true_sequential": False, "damp_percent": 0.01, "checkpoint_format": "gptq",
            "lm_head": False, "provider": "auto-round", "autoround_version": "0.9.1",
            "block_name_to_quantize": "model.language_model.layers", "dynamic": dynamic}


def ct_w4a16(ignore: list[str]) -> dict[str, Any]:
    """compressed-tensors W4A16 (``pack-quantized``, symmetric INT4 g128 on ``Linear``)."""
    weights = {"num_bits": 4, "type": "int", "symmetric": True, "group_size": 128, "strategy": "group",
               "block_structure": None, "dynamic": False, "actorder": None, "scale_dtype": None,
               "zp_dtype": None, "observer": "mse", "observer_kwargs": {}}
    return {"version": "0.17.1", "quant_method": "compressed-tensors", "format": "pack-quantized",
            "quantization_status": "compressed", "sparsity_config": {}, "transform_config": {},
            "kv_cache_scheme": None, "global_compression_ratio": None,
            "config_groups": {"group_0": {"targets": ["Linear"], "weights": weights, "format": "pack-quantized",
                                          "input_activations": None, "output_activations": None}},
            "ignore": ignore}


# Qwen's GPTQ-Int4 rules (the vision tower's ``-:.*visual.*`` left out: no vision tensors here)
QWEN_RULES: dict[str, dict[str, Any]] = {"-:.*attn.*": {}, "-:.*shared_expert.*": {}}
DENSE_RULES: dict[str, dict[str, Any]] = {"-:.*attn.*": {}}
POSITIVE_MTP = {"+:.*mtp.*": {"bits": 4, "group_size": 64}, "+:.*mtp\\.fc.*": {"bits": 4, "group_size": 64}}
NEGATIVE_MTP: dict[str, dict[str, Any]] = {"-:.*mtp.*": {}}


# ----------------------------------------------------------------- scenarios

def _scenarios() -> dict[str, Scenario]:
    s1 = Recipe(DSV4, nvfp4_conversion(MXFP4_DS),
                lambda s: v4_config(s, nextn=1, quant=_s1_quant()))
    s1_dspark = Recipe(DSV4, nvfp4_conversion(MXFP4_DS),
                       lambda s: v4_config(s, nextn=3, quant=_s1_quant(), dspark=3),
                       draft=DSPARK, draft_layers=3)
    s1_u8 = Recipe(DSV4, nvfp4_conversion(MXFP4_DS_U8),
                   lambda s: v4_config(s, nextn=1, quant=_s1_quant()))
    s2 = Recipe(DSV4, llm_compressor_bf16_mtp,
                lambda s: v4_config(s, nextn=1, expert_dtype=None,
                                    quant=ct_nvfp4_fp8_block(["lm_head", r"re:.*mtp\..*"])),
                draft_shard="model_mtp.safetensors")
    s3 = Recipe(DSV4, v4_native("fp4"), lambda s: v4_config(s, nextn=1, quant=FP8_V4_QUANT))
    s3_fp8 = Recipe(DSV4, v4_native("fp8"),
                    lambda s: v4_config(s, nextn=1, expert_dtype="fp8",
                                        quant={k: v for k, v in FP8_V4_QUANT.items()
                                               if k != "scale_fmt"}))
    s4_target = Recipe(DSV4, nvfp4_conversion(NVFP4_MO),
                       lambda s: v4_config(s, nextn=0, quant=_s1_quant(ignored=False)),
                       draft_layers=0)
    s4_drafter = Recipe(DSV4, v4_native("fp4"),
                        lambda s: v4_config(s, nextn=3, quant=FP8_V4_QUANT, dspark=3),
                        draft=DSPARK, draft_layers=3, main=False)
    s5 = Recipe(DSV4, nvfp4_conversion(NVFP4_MO_NO_GLOBALS),
                lambda s: v4_config(s, nextn=1, quant=_s1_quant()))
    s6 = Recipe(DSV3, v3_fp8, lambda s: v3_config(s, nextn=1, quant={
        "quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
        "weight_block_size": [128, 128]}))
    s6_bf16 = Recipe(DSV3, v3_fp8_bf16_mtp, lambda s: v3_config(s, nextn=1, quant={
        "quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
        "weight_block_size": [128, 128]}))
    s7 = Recipe(DSV4, nvfp4_conversion(MXFP4_DS),
                lambda s: v4_config(s, nextn=1, quant=_s1_quant(ignored=False)), draft_layers=0)
    s8 = Recipe(DSV4, all_bf16, lambda s: v4_config(s, nextn=1, expert_dtype=None))
    s8_nvfp4 = Recipe(DSV3, modelopt_nvfp4_mlp,
                      lambda s: v3_config(s, nextn=1, quant=modelopt_quant(s)),
                      hf_quant_config=modelopt_hf_quant_config)
    extra = "model_extra_tensors.safetensors"
    moe_gptq = lambda dynamic: (lambda s: qwen_config(s, moe=True, quant=autoround_gptq(dynamic)))  # noqa: E731
    q0 = Recipe(QWEN35_MOE, qwen_gptq(draft_bf16), moe_gptq({**QWEN_RULES, **NEGATIVE_MTP}), draft_shard=extra)
    q1 = Recipe(QWEN35_MOE, qwen_gptq(draft_bf16), moe_gptq({**QWEN_RULES, **POSITIVE_MTP}), draft_shard=extra)
    q1_dense = Recipe(QWEN35, qwen_gptq(draft_bf16),
                      lambda s: qwen_config(s, moe=False, quant=autoround_gptq({**DENSE_RULES, **POSITIVE_MTP})),
                      draft_shard=extra)
    q1_listed = Recipe(QWEN35, qwen_gptq(draft_bf16), lambda s: qwen_config(s, moe=False, quant={
        **autoround_gptq({**DENSE_RULES, **POSITIVE_MTP}),
        "modules_in_block_to_quantize": [["mlp.gate_proj", "mlp.up_proj"], ["mlp.down_proj"]]}),
        draft_shard=extra)
    q2 = Recipe(QWEN35_MOE, qwen_gptq(draft_bf16), moe_gptq({**QWEN_RULES, **NEGATIVE_MTP}), draft_shard=extra,
                draft_shard_indexed=False)
    q3 = Recipe(QWEN35_MOE, qwen_gptq(draft_rtn_experts), moe_gptq(dict(QWEN_RULES)), draft_shard=extra,
                expert_names="proj-first")
    q4 = Recipe(QWEN35_MOE, qwen_gptq(draft_fp8_release), moe_gptq({**QWEN_RULES, **NEGATIVE_MTP}))
    q4_fc = Recipe(QWEN35, ct_w4a16_dense,
                   lambda s: qwen_config(s, moe=False, quant=ct_w4a16(["re:.*linear_attn.*", "lm_head"])),
                   draft_shard="model-mtp.safetensors")
    q0_ct = Recipe(QWEN35, ct_w4a16_dense,
                   lambda s: qwen_config(s, moe=False, quant=ct_w4a16(["re:.*linear_attn.*", "lm_head", "mtp.fc"])),
                   draft_shard="model-mtp.safetensors")
    mtp1 = {"draft_kind": MTP, "draft_layers_declared": 1, "draft_layers_stored": 1}
    table = [
        Scenario("s1", "NVFP4 conversion, draft experts left MXFP4, ignored_layers ['mtp.*']",
                 s1, facts=mtp1),
        Scenario("s1-dspark", "S1 with a 3-stage DSpark drafter (mtp.0-2) instead of MTP",
                 s1_dspark, facts={"draft_kind": DSPARK, "draft_layers_declared": 3,
                                   "draft_layers_stored": 3}),
        Scenario("s1-u8", "S1 with the draft experts' FP4 bytes and E8M0 scales stored as U8",
                 s1_u8, facts=mtp1),
        Scenario("s2", "compressed-tensors NVFP4 + FP8 block target, BF16 MTP block",
                 s2, facts=mtp1),
        Scenario("s3", "native DeepSeek-V4: FP8 block with bare E8M0 .scale, MXFP4 experts",
                 s3, facts=mtp1),
        Scenario("s3-fp8", "native DeepSeek-V4 with expert_dtype fp8: F32 .scale everywhere",
                 s3_fp8, facts=mtp1),
        Scenario("s4", "NVFP4 target with a separate native-FP4 DSpark drafter checkpoint",
                 s4_target, s4_drafter, facts={"draft_kind": DSPARK, "draft_layers_declared": 3,
                                               "draft_layers_stored": 3, "separate_drafter": True}),
        Scenario("s5", "S1 whose draft experts are NVFP4 without weight_scale_2/input_scale",
                 s5, facts=mtp1),
        Scenario("s6", "DeepSeek-V3 FP8 block (weight_scale_inv) with MTP at layer N",
                 s6, facts=mtp1),
        Scenario("s6-bf16", "S6 whose MTP layer was left BF16, quant_method fp8 excluding nothing",
                 s6_bf16, facts=mtp1),
        Scenario("s7", "config declares one MTP layer, the checkpoint holds none",
                 s7, facts={"draft_kind": MTP, "draft_layers_declared": 1,
                            "draft_layers_stored": 0}),
        Scenario("s8", "clean reference: all BF16, MTP included", s8, facts=mtp1),
        Scenario("s8-nvfp4", "ModelOpt NVFP4 target whose MTP is NVFP4 too (clean for vLLM; "
                 "SGLang drops the NextN draft's quant config)",
                 s8_nvfp4, facts=mtp1),
    ]

    table += [
        Scenario("q0", "Qwen3.5 MoE GPTQ INT4 (auto-round), BF16 drafter in model_extra_tensors, dynamic "
                 "'-:.*mtp.*'", q0, facts=mtp1),
        Scenario("q1", "Qwen3.5 MoE GPTQ INT4, BF16 drafter, dynamic '+:.*mtp.*' claims it 4-bit g64",
                 q1, facts=mtp1),
        Scenario("q1-dense", "Qwen3.5 dense GPTQ INT4, BF16 drafter, dynamic '+:.*mtp.*' (no "
                 "modules_in_block_to_quantize)", q1_dense, facts=mtp1),
        Scenario("q1-listed", "q1-dense whose modules_in_block_to_quantize names the MLP projections",
                 q1_listed, facts=mtp1),
        Scenario("q2", "Qwen3.5 MoE GPTQ INT4, BF16 drafter in a file the index never names", q2, facts=mtp1),
        Scenario("q3", "Qwen3.5 MoE GPTQ INT4, drafter experts RTN INT4 named experts.{proj}.{e}",
                 q3, facts=mtp1),
        Scenario("q4", "Qwen3.5 MoE GPTQ INT4 target with the FP8 release's drafter (weight_scale_inv)",
                 q4, facts=mtp1),
        Scenario("q4-fc", "Qwen3.6 dense compressed-tensors W4A16, BF16 mtp.fc missing from ignore",
                 q4_fc, facts=mtp1),
        Scenario("q0-ct", "Qwen3.6 dense compressed-tensors W4A16, drafter in model-mtp.safetensors, "
                 "mtp.fc ignored", q0_ct, facts=mtp1),
    ]
    return {sc.name: sc for sc in table}


# Other names a scenario is known by (lower case): ``s8-bf16`` is ``s8``.
ALIASES: dict[str, str] = {"s8-bf16": "s8"}


SCENARIO_TABLE: dict[str, Scenario] = _scenarios()
