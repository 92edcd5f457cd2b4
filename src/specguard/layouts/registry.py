"""Pick the layout for a config.json dict."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from specguard import plans
from specguard.errors import LayoutError
from specguard.layouts import roles as r
from specguard.layouts.base import SGLANG, VLLM, Layout
from specguard.layouts.deepseek import DeepseekV3Layout, DeepseekV4Layout
from specguard.layouts.generic import EagleLayout, GenericLayout
from specguard.layouts.qwen3_5 import QWEN3_5_TYPES, Qwen3_5Layout
from specguard.layouts.sglang import (
    EAGLE3_ARCHS,
    SglangDeepseekV3Layout,
    SglangDeepseekV4Layout,
    SglangEagle3Layout,
    SglangGlm4MoeLayout,
    SglangGptOssLayout,
    SglangQwen3_5Layout,
)

DEEPSEEK_V4_TYPES = frozenset({"deepseek_v4", "deepseek_v4_text", "deepseek_v41", "deepseek_v41_text"})
DEEPSEEK_V3_TYPES = frozenset({"deepseek", "deepseek_v2", "deepseek_v3", "deepseek_v32", "kimi_k2"})
GLM4_MOE_TYPES = frozenset({"glm4_moe"})  # GLM-4.5/4.6/4.7 (Glm4MoeForCausalLM)
# Qwen3.5/3.6/3.8 dense and MoE (SGLang 0.5.23 qwen3_5.py / qwen3_5_text.py; not Qwen3-Next)
SGLANG_QWEN3_5_TYPES = frozenset({"qwen3_5", "qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text"})


def text_config(config: Mapping[str, Any]) -> Mapping[str, Any]:
    """The language-model part of a (possibly multimodal) config.json."""
    if "num_hidden_layers" not in config and isinstance(config.get("text_config"), Mapping):
        return config["text_config"]
    return config


def model_type_of(config: Mapping[str, Any]) -> str:
    """``model_type`` of the language model (a multimodal wrapper's text_config first)."""
    return str(text_config(config).get("model_type") or config.get("model_type") or "")


def is_deepseek_v41(config: Mapping[str, Any]) -> bool:
    """DeepSeek-V4.1 (the one place that decides): model_type ``deepseek_v41``/``_text``,
    or a ``DeepseekV41*`` class in ``architectures``. vLLM registers the V4.1 classes
    under both (models/registry.py), so either makes vLLM build V4.1's."""
    archs = " ".join(str(a) for a in config.get("architectures") or ())
    return model_type_of(config).startswith("deepseek_v41") or "DeepseekV41" in archs


def draft_kind_for(method: str | None) -> r.DraftKind | None:
    """Map a ``speculative_config.method`` to a draft kind (``deepseek_mtp`` -> mtp)."""
    if method is None:
        return None
    m = method.lower()
    if "dspark" in m:
        return r.DSPARK
    if "eagle" in m:
        return r.EAGLE
    if "mtp" in m or "nextn" in m:
        return r.MTP
    raise LayoutError(f"unknown speculative method {method!r}; expected mtp, dspark or eagle")


def is_eagle_drafter(config: Mapping[str, Any]) -> bool:
    """An EAGLE/EAGLE-3 head's own config: its class says so (``LlamaForCausalLMEagle3``,
    ``EagleLlamaForCausalLM``), or it maps a draft vocabulary (``draft_vocab_size``)."""
    archs = " ".join(str(a) for a in config.get("architectures") or ()).lower()
    return "eagle" in archs or "draft_vocab_size" in text_config(config)


def _int(config: Mapping[str, Any], *keys: str) -> int | None:
    for key in keys:
        value = config.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def layout_for(
    config: Mapping[str, Any],
    *,
    draft_method: str | None = None,
    engine: str = VLLM,
    target_config: Mapping[str, Any] | None = None,
) -> Layout:
    """The layout of the model described by ``config`` (config.json as a dict).

    ``draft_method`` (``mtp``/``dspark``/``eagle``) says how the draft is
    served; without it DeepSeek-V4 configs with ``dspark_target_layer_ids`` are
    DSpark, other configs with draft layers MTP. An EAGLE drafter is a separate
    checkpoint: pass its config and the target's as ``target_config``.
    """
    cfg = text_config(config)
    kind = draft_kind_for(draft_method)
    model_type = model_type_of(config)
    if kind == r.EAGLE or (kind is None and is_eagle_drafter(config)):
        if target_config is None and not is_eagle_drafter(config):
            raise LayoutError("an EAGLE drafter is a separate checkpoint routed beside its target: "
                              "pass the target's config (on the command line: --draft SRC)")
        # An EAGLE head inspected alone: the target's layer count is unknown, draft layers count from 0.
        n_target = _int(text_config(target_config), "num_hidden_layers") if target_config is not None else 0
        if n_target is None:
            raise LayoutError("target config has no integer num_hidden_layers")
        archs = [str(a) for a in config.get("architectures") or ()]
        if engine == SGLANG and archs[:1] and archs[0] in EAGLE3_ARCHS:  # SGLang's own names for it
            return SglangEagle3Layout(n_target, _int(cfg, "num_hidden_layers") or 1)
        plan = (plans.plan_for_config(target_config, drafter=config)
                if target_config is not None and engine == VLLM else None)
        return EagleLayout(n_target, _int(cfg, "num_hidden_layers") or 1, engine=engine, plan=plan)
    n = _int(cfg, "num_hidden_layers")
    if n is None:
        raise LayoutError("config has no integer num_hidden_layers")
    if model_type in DEEPSEEK_V4_TYPES:
        return _deepseek_v4(cfg, config, n, kind, engine)
    nextn = _int(cfg, "num_nextn_predict_layers", "mtp_num_hidden_layers", "num_mtp_layers")
    # vLLM's recorded plan places the draft's checkpoint names; under an engine with no layout of
    # its own for the family (SGLang's ERNIE, Qwen3-Next, ...) it still says which names are draft
    # and how many draft layers the config means (every SGLang verdict there is unknown, SG205)
    plan = plans.plan_for_config(config)
    if nextn is None and plan is not None:
        # the count as the engine reads it where the config has no key (Qwen3-Next:
        # ``getattr(config, "num_nextn_predict_layers", 1)``), recorded in its plan
        nextn = plan.draft_layers(cfg)
    nextn = nextn or 0
    if model_type in DEEPSEEK_V3_TYPES:
        mha = model_type == "deepseek" or not (cfg.get("qk_nope_head_dim") or cfg.get("qk_rope_head_dim"))
        if engine == SGLANG:
            return SglangDeepseekV3Layout(n, nextn, fuse_qkv_a=cfg.get("q_lora_rank") is not None, mha=mha)
        return DeepseekV3Layout(
            n, nextn, r.MTP, engine=engine, fuse_qkv_a=cfg.get("q_lora_rank") is not None, mha=mha
        )
    if model_type in GLM4_MOE_TYPES and engine == SGLANG:
        return SglangGlm4MoeLayout(n, nextn)
    if model_type == "gpt_oss" and engine == SGLANG:
        return SglangGptOssLayout(n, nextn, kind or r.MTP, engine=engine, plan=plan)
    if model_type in SGLANG_QWEN3_5_TYPES and engine == SGLANG:
        return SglangQwen3_5Layout(n, nextn)
    if model_type in QWEN3_5_TYPES:
        return Qwen3_5Layout(n, nextn, kind or r.MTP, engine=engine, plan=plan)
    return GenericLayout(n, nextn, kind or r.MTP, engine=engine, plan=plan)


def _deepseek_v4(
    cfg: Mapping[str, Any], config: Mapping[str, Any], n: int, kind: str | None, engine: str
) -> DeepseekV4Layout:
    archs = " ".join(str(a) for a in config.get("architectures") or ())
    v41 = is_deepseek_v41(config)
    if engine == SGLANG:  # SGLang's own names (layouts/sglang.py) and its own draft choice
        return _sglang_deepseek_v4(cfg, n, kind, v41)
    if kind == r.MTP and v41:
        # vllm/config/speculative.py: "DeepSeek V4.1 has no classic-MTP draft"
        raise LayoutError("DeepSeek-V4.1 has no classic-MTP draft (its mtp.* tensors are DSpark stages); "
                          "use draft method 'dspark'")
    if kind is None:
        dspark = v41 or "dspark_target_layer_ids" in cfg or "DSpark" in archs
        kind = r.DSPARK if dspark else r.MTP
    if kind == r.DSPARK:
        # The stage count as the DSpark model reads it: deepseek_v4/nvidia/dspark.py
        # ``getattr(config, "n_mtp_layers", None) or 3`` (num_nextn_predict_layers is not
        # read); deepseek_v41/nvidia/dspark.py ``n_mtp_layers or num_nextn_predict_layers or 3``.
        k = _int(cfg, "n_mtp_layers", *(("num_nextn_predict_layers",) if v41 else ())) or 3
    else:
        k = _int(cfg, "num_nextn_predict_layers") or 0
    return DeepseekV4Layout(
        n, k, kind, engine=engine, context_wkv=not v41, root="language_model.model" if v41 else "model"
    )


# sglang/srt/speculative/dspark_components/dspark_config.py ``checkpoint_bundles_dspark_draft``
_SGLANG_DSPARK_KEYS = ("dspark_block_size", "dspark_markov_rank", "dspark_noise_token_id", "dspark_target_layer_ids")


def _sglang_deepseek_v4(cfg: Mapping[str, Any], n: int, kind: str | None, v41: bool) -> DeepseekV4Layout:
    """DeepSeek-V4 and V4.1 (configs/deepseek_v41.py maps ``DeepseekV41ForCausalLM`` to
    ``DeepseekV4ForCausalLM``; recorded) as SGLang 0.5.23 drafts them: configs/model_config.py
    ``_config_draft_model`` builds the DSpark draft when the config carries a ``dspark_*`` key and
    the algorithm is DSPARK or unset, else the NextN draft (V4.1 too: no refusal). The DSpark stage
    count is read as for vLLM (deepseek_v4_dspark.py counts ``dspark_target_layer_ids``; docs/engines.md)."""
    if kind is None:
        kind = r.DSPARK if any(cfg.get(key) is not None for key in _SGLANG_DSPARK_KEYS) else r.MTP
    if kind == r.DSPARK:
        k = _int(cfg, "n_mtp_layers", *(("num_nextn_predict_layers",) if v41 else ())) or 3
    else:
        k = _int(cfg, "num_nextn_predict_layers") or 0
    return SglangDeepseekV4Layout(n, k, kind)
