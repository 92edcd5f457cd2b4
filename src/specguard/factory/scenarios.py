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
    PROJ,
    SHARED,
    ModuleSpec,
    Sizes,
    dspark_target_layers,
)
from specguard.formats.scheme import (
    COMPRESSED_TENSORS,
    DEEPSEEK,
    FP8_BLOCK,
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
    s7 = Recipe(DSV4, nvfp4_conversion(MXFP4_DS),
                lambda s: v4_config(s, nextn=1, quant=_s1_quant(ignored=False)), draft_layers=0)
    s8 = Recipe(DSV4, all_bf16, lambda s: v4_config(s, nextn=1, expert_dtype=None))
    s8_nvfp4 = Recipe(DSV3, modelopt_nvfp4_mlp,
                      lambda s: v3_config(s, nextn=1, quant=modelopt_quant(s)),
                      hf_quant_config=modelopt_hf_quant_config)
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
        Scenario("s7", "config declares one MTP layer, the checkpoint holds none",
                 s7, facts={"draft_kind": MTP, "draft_layers_declared": 1,
                            "draft_layers_stored": 0}),
        Scenario("s8", "clean reference: all BF16, MTP included", s8, facts=mtp1),
        Scenario("s8-nvfp4", "clean reference: ModelOpt NVFP4 target whose MTP is NVFP4 too",
                 s8_nvfp4, facts=mtp1),
    ]
    return {sc.name: sc for sc in table}


# Other names a scenario is known by (lower case): ``s8-bf16`` is ``s8``.
ALIASES: dict[str, str] = {"s8-bf16": "s8"}


SCENARIO_TABLE: dict[str, Scenario] = _scenarios()
