"""Record vLLM 0.33's build plans from its own model construction (scripts/record_plans.py).

Run only by the recorder script and its CI test, never by specguard at run time
(it imports vLLM and torch; specguard.plans reads the plans without either).

Per target architecture (``TARGETS``) this writes a tiny config.json with the
architecture's real layer structure, lets vLLM's ``EngineArgs`` build the
VllmConfig (with the speculative config the proposer would get, so
``SpeculativeConfig.hf_config_override`` picks the draft architecture), and
constructs the target and its draft with ``initialize_model`` on the meta
device under a *recording* quant config: its ``get_quant_method`` notes
(prefix, layer class) for every layer that asks and returns the unquantized
method. A layer with a ``quant_method`` that never asked was built with
``quant_config=None``. The loader's name mapping is recorded from the built
models: ``hf_to_vllm_mapper``, ``packed_modules_mapping``, ``get_expert_mapping()``
and the ``stacked_params_mapping`` literal of each ``load_weights`` in the
model's classes.

What is bent: vLLM's registry inspects model classes in a subprocess (to keep
CUDA out of the parent); here it runs in-process (no CUDA exists). A drafter
checkpoint's own quant config (``get_draft_quant_config``) is a second recording
config. Remote-code config classes (MiMo, openPangu) are registered as the
transformers class they extend. Nothing that decides a prefix or a class is touched.
"""

from __future__ import annotations

import ast
import atexit
import inspect
import json
import os
import re
import shutil
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from specguard.engines.torchvision_ops import define_torchvision_ops


def _installed_engine() -> str:
    """``vllm-MAJOR.MINOR`` of the vLLM first on sys.path: ``.venv``'s 0.33, or an overlay's
    (``PYTHONPATH=.engines/vllm-0.32``, docs/engines.md) when recording another version."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return "vllm-" + ".".join(version("vllm").split(".")[:2])
    except PackageNotFoundError:
        return "vllm-0.33"


ENGINE = _installed_engine()
SCHEMA = 1
PLANS_DIR = Path(__file__).resolve().parents[2] / "plans" / ENGINE
# Recording sizes: N target layers (the first dense where the family has both),
# K draft layers where vLLM builds several; distinct so templating can tell them apart.
N, K = 4, 2
# vLLM 0.32 refuses the V2 model runner without an active GPU triton driver
# (config/vllm.py _validate_v2_model_runner, triton_utils/importing.py HAS_TRITON) and
# itself falls back to V1 on CPU; the models it constructs are the same classes.
CPU_ENV = {"VLLM_TARGET_DEVICE": "cpu", "VLLM_PLUGINS": "",
           "VLLM_USE_V2_MODEL_RUNNER": "0" if ENGINE == "vllm-0.32" else "1"}

# Sizes are the config class's own defaults (the meta device allocates nothing); only
# the structure is set: N layers (dense first where the family mixes), K draft layers.
_DS = {"num_nextn_predict_layers": K, "first_k_dense_replace": 1}
_DSPARK = {"n_mtp_layers": K, "dspark_target_layer_ids": [1, 2, 3], "dspark_block_size": 4,
           "dspark_markov_rank": 16}
# DeepSeek-V3.2's indexer (deepseek-ai/DeepSeek-V3.2-Exp config.json); index_topk is what makes
# models/config.py DeepseekV32ForCausalLM.verify_and_update_config accept the config
_DSA = {"index_topk": 2048, "index_n_heads": 64, "index_head_dim": 128}
# Ring/Ling-2.5 (BailingMoeV2_5): keys the checkpoint's remote config class holds
# (inclusionAI/Ring-V2.5 models/configuration_bailing_moe_v2_5.py) and transformers'
# bailing_hybrid class lacks; layer_group_size 2: layers 1 and 3 full (MLA) attention, 0 and 2 linear
_BAILING25 = {"num_nextn_predict_layers": 1, "first_k_dense_replace": 1, "layer_group_size": 2,
              "use_qkv_bias": False, "use_bias": False, "use_qk_norm": True, "group_norm_size": 4,
              "linear_silu": False, "q_lora_rank": None, "num_experts_per_tok": 8, "n_group": 8,
              "moe_router_enable_expert_bias": True, "score_function": "sigmoid", "rope_interleave": True,
              "partial_rotary_factor": 0.5, "router_dtype": "fp32"}
# DeepSeek-V4.1 (deepseek_v41): vLLM's DeepseekV41Config flattens ``text_config`` and has no
# defaults of its own, and DeepseekV4Config's (mlp_layer_types 'hash_moe') fail transformers'
# validate_layer_type. So the text config is written by hand: the keys the published
# DeepSeek-V4.1-Flash text config has (docs/engines.md), structure shrunk to N layers: two layers
# one without a compressor, one at ratio 2, then ratio 1 from the last KV source on (nvidia/model.py
# asserts it), an engram layer, K DSpark stages.
_V41_TEXT = {
    "model_type": "deepseek_v41_text", "vocab_size": 129280, "hidden_size": 5120, "moe_intermediate_size": 2304,
    "num_attention_heads": 64, "num_key_value_heads": 1, "head_dim": 512, "qk_rope_head_dim": 64,
    "q_lora_rank": 1280, "o_lora_rank": 1024, "o_groups": 8, "hidden_act": "silu", "swiglu_limit": 10.0,
    "rms_norm_eps": 1e-20, "attention_bias": False, "max_position_embeddings": 1048576, "rope_theta": 10000,
    "rope_scaling": {"rope_type": "yarn", "factor": 16, "beta_fast": 32, "beta_slow": 1,
                     "original_max_position_embeddings": 65536},
    "n_routed_experts": 384, "n_shared_experts": 1, "num_experts_per_tok": 6, "scoring_func": "sqrtsoftplus",
    "topk_method": "noaux_tc", "norm_topk_prob": True, "routed_scaling_factor": 1.5, "sliding_window": 128,
    "compress_ratios": [0, 2, 1, 1], "compress_rope_theta": 160000, "kv_source_layer_ids": [1, 2],
    "index_source_layer_ids": [1, 2], "index_n_heads": 32, "index_head_dim": 128, "index_topk": 512,
    "candidate_source_layer_id": 2, "candidate_topk_blocks": 2048, "candidate_block_size": 8,
    "hc_mult": 4, "hc_sinkhorn_iters": 20, "hc_eps": 1e-06,
    "engram_layer_ids": [1], "engram_num_embeddings": [384006168], "engram_max_ngram_size": 4,
    "engram_vocab_size": 16000000, "engram_n_heads": 8, "engram_head_dim": 256, "engram_pad_token_id": 2,
    "engram_compressed_vocab_size": 99092,
    "num_nextn_predict_layers": K, "dspark_block_size": 5, "dspark_noise_token_id": 128799,
    "dspark_target_layer_ids": [1, 2, 3], "dspark_markov_rank": 256, "dspark_n_routed_experts": 128,
    "dspark_num_experts_per_tok": 3,
}
# Qwen3.5/3.6: transformers' Qwen3_5(Moe)TextConfig defaults (full attention every 4th layer:
# layers 0-2 linear attention, 3 full), K MTP layers; a 2-block vision tower (rows are per block)
_QWEN3_5_VISION = {"vision_config": {"depth": 2}}
_QWEN3_5_TEXT = {"model_type": "qwen3_5_text", "mtp_num_hidden_layers": K}
_QWEN3_5_MOE_TEXT = {"model_type": "qwen3_5_moe_text", "mtp_num_hidden_layers": K}
_EAGLE_LLAMA = {"architectures": ["EagleLlamaForCausalLM"], "model_type": "llama", "num_hidden_layers": 1}
_EAGLE3_LLAMA = {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "num_hidden_layers": 1,
                 "draft_vocab_size": 1024}
_EAGLE3_QWEN = {"architectures": ["Eagle3Qwen3ForCausalLM"], "model_type": "qwen3", "num_hidden_layers": 1,
                "draft_vocab_size": 1024}


class Target:
    """One recorded architecture: its model_type, structural overrides, and how its draft is served
    (``method``; ``draft``: a separate drafter checkpoint's config, for EAGLE). ``cuda``: the model
    builds CUDA-only objects at construction; record it as a CUDA server builds it (``_cuda_build``)."""

    def __init__(self, model_type: str, config: dict[str, Any] | None = None, method: str | None = None,
                 draft: dict[str, Any] | None = None, engine_args: dict[str, Any] | None = None,
                 *, cuda: bool = False, text: dict[str, Any] | None = None, since: str | None = None,
                 inert: tuple[str, ...] = ()) -> None:
        self.model_type, self.config, self.method, self.draft = model_type, config or {}, method, draft
        self.engine_args = engine_args or {}
        self.cuda = cuda
        # a wrapper config (DeepSeek-V4.1's) whose class reads the text model from ``text_config``
        # and has no defaults of its own: the text config written out (N layers)
        self.text = text
        self.since = since  # the first engine version it is recorded for (None: every version)
        # "module:Class" of run-time helpers that hold no parameter and ask no quant config but
        # need what a recording lacks (a tokenizer): built as an empty nn.Module (``_inert``)
        self.inert = inert
        if cuda:  # JIT kernel warm-up registration (tilelang/cutedsl) is a CUDA start-up step, not a build
            self.engine_args = {"kernel_config": {"enable_jit_warmup": False}, **self.engine_args}


# plan name -> Target. The plan's file is ``{name}.json``; the target architecture is the
# name up to ``+`` (an EAGLE drafter over it adds ``+{drafter}``).
TARGETS: dict[str, Target] = {
    "DeepseekV3ForCausalLM": Target("deepseek_v3", _DS, "mtp"),
    "Glm4MoeForCausalLM": Target("glm4_moe", {**_DS, "head_dim": 128}, "mtp"),
    "Glm4MoeLiteForCausalLM": Target("glm4_moe_lite", _DS, "mtp"),
    "Qwen3NextForCausalLM": Target("qwen3_next", {"full_attention_interval": 2, "num_nextn_predict_layers": K},
                                   "mtp"),
    "Ernie4_5_MoeForCausalLM": Target("ernie4_5_moe", {"num_nextn_predict_layers": K, "moe_layer_start_index": 1},
                                      "mtp"),
    "MiMoForCausalLM": Target("mimo", {"num_nextn_predict_layers": K}, "mtp"),
    "LongcatFlashForCausalLM": Target("longcat_flash", {"num_layers": 2, "num_nextn_predict_layers": 1,
                                                        "mla_scale_q_lora": True, "mla_scale_kv_lora": True,
                                                        "zero_expert_type": "identity"}, "mtp"),
    "PanguUltraMoEForCausalLM": Target("pangu_ultra_moe", _DS, "mtp"),
    "GptOssForCausalLM": Target("gpt_oss"),
    "LlamaForCausalLM": Target("llama"),
    "Qwen3ForCausalLM": Target("qwen3"),
    "Qwen3MoeForCausalLM": Target("qwen3_moe", {"mlp_only_layers": [0]}),  # a dense layer adds gate_up_proj
    "LlamaForCausalLM+EagleLlamaForCausalLM": Target("llama", {}, "eagle", _EAGLE_LLAMA),
    "LlamaForCausalLM+LlamaForCausalLMEagle3": Target("llama", {}, "eagle3", _EAGLE3_LLAMA),
    "Qwen3ForCausalLM+Eagle3Qwen3ForCausalLM": Target("qwen3", {}, "eagle3", _EAGLE3_QWEN),
    "GptOssForCausalLM+LlamaForCausalLMEagle3": Target("gpt_oss", {}, "eagle3", _EAGLE3_LLAMA),
    # DeepSeek-V4/V4.1 build CUDA-only objects: recorded as a CUDA server builds them (_cuda_build).
    # A DSpark draft ships inside the target checkpoint (speculative.py: model = the target's).
    # vLLM 0.32 has them too (not recorded there: docs/engines.md): its V1 model runner refuses dspark
    # ("Model Runner V1 does not support: dspark") and its V2 runner needs a GPU triton driver; its
    # transformers (5.19) DeepseekV4Config has no vocab_size default.
    "DeepseekV4ForCausalLM": Target("deepseek_v4", {"num_nextn_predict_layers": K}, "mtp", cuda=True,
                                    since="vllm-0.33"),
    "DeepseekV4ForCausalLM+DSparkDraftModel": Target("deepseek_v4", _DSPARK, "dspark", cuda=True,
                                                     since="vllm-0.33"),
    # DeepSeek-V3.2 sparse attention (DSA): a CUDA server builds models/deepseek_v32/nvidia/ (CPU and
    # XPU the generic deepseek_v2.py classes, without the indexer).
    "DeepseekV32ForCausalLM": Target("deepseek_v32", {**_DS, **_DSA}, "mtp", cuda=True),
    # models/config.py HybridAttentionMambaModelConfig sets mamba_block_size = block_size under prefix
    # caching, then platforms/cpu.py turns prefix caching off for MLA models and VllmConfig's
    # validate_mamba_block_size refuses the pair: a CPU server needs --no-enable-prefix-caching.
    # The layers do not read it (bailing_moe_linear.py passes cache_config to attention/state only).
    # vLLM 0.32 pins transformers<5.20, which has no bailing_hybrid config class: a real checkpoint
    # loads there through its remote code (trust_remote_code), which the recorder does not run.
    "BailingMoeV2_5ForCausalLM": Target("bailing_hybrid", _BAILING25, "mtp",
                                        engine_args={"enable_prefix_caching": False}, since="vllm-0.33"),
    # Qwen3.5/3.6 (text_config; the vision tower is built too: its linears ask the quant config)
    "Qwen3_5ForConditionalGeneration": Target("qwen3_5", _QWEN3_5_VISION, "mtp", text=_QWEN3_5_TEXT),
    "Qwen3_5MoeForConditionalGeneration": Target("qwen3_5_moe", _QWEN3_5_VISION, "mtp", text=_QWEN3_5_MOE_TEXT),
    # engram's n-gram hash state reads the tokenizer (common/engram.py NgramHashState: buffers only)
    "DeepseekV41ForCausalLM+DSparkV41DraftModel": Target(
        "deepseek_v41", {}, "dspark", cuda=True, text=_V41_TEXT, since="vllm-0.33",
        inert=("vllm.models.deepseek_v41.nvidia.model:NgramHashState",)),
}


# Architectures with a draft form tried and not recorded, and why (an architecture with neither
# a plan nor a hand-written family model routes ``unknown``: engines/vllm/v0_33.py no_plan).
NOT_RECORDED = {
    "MiMoV2FlashForCausalLM": "MiMoV2FlashConfig lacks hybrid_layer_pattern (a remote-code key): needs the "
                              "published config's keys",
    "HYV3ForCausalLM": "hy_v3.py: 'first_k_dense_replace not exist': needs the published config's keys",
    "NemotronHForCausalLM": "its MLP (is_act_and_mul=False) is refused on CPU (CUDA, XPU, ROCm only): needs a "
                            "CUDA build of the layer",
    "Step3p5ForCausalLM": "Step3p7TextConfig lacks use_moe_router_bias: needs the published config's keys",
    "ExaoneMoeForCausalLM": "records (Target('exaone_moe', {'num_nextn_predict_layers': K}, 'mtp')); left out "
                            "until a published-config copy tests it",
    "DeepseekV3ForCausalLM+Eagle3DeepseekV3ForCausalLM": "SpeculativeConfig refuses the hand-made drafter config: "
                                                         "needs a published drafter config",
    "MiniMaxM2ForCausalLM+Eagle3MiniMaxM2ForCausalLM": "MiniMaxM2Config lacks rotary_dim: needs the published "
                                                       "config's keys",
    "GlmMoeDsaForCausalLM": "records (Target('glm_moe_dsa', {**_DS, **_DSA}, 'mtp', cuda=True): the DeepSeek-V3.2 "
                            "class); left out: layouts/ routes glm_moe_dsa generically (not as DeepSeek-V3 "
                            "names) and no published copy tests it",
    "Qwen3ForCausalLM+DFlashDraftModel": "records; left out: specguard routes no dflash draft (layouts: "
                                         "mtp/dspark/eagle) and no published copy tests it",
}

def _templated(name: str, n: int, draft: bool) -> str:
    """``layers.{i}`` -> ``layers.{L}`` (target layer), ``layers.{D}`` (draft runtime
    index N+d) or, in a draft model, ``layers.{d}`` (the draft's own 0-based index)."""
    def sub(m: re.Match[str]) -> str:
        i = int(m.group(2))
        word = "D" if i >= n else ("d" if draft else "L")
        return f"{m.group(1)}{{{word}}}"
    return re.sub(r"((?:^|\.)layers\.)(\d+)(?=\.|$)", sub, name)


def _mapper(obj: Any, n: int, draft: bool) -> dict[str, Any] | None:
    m = getattr(obj, "hf_to_vllm_mapper", None)
    if m is None:
        return None
    out: dict[str, Any] = {}
    for field in ("orig_to_new_prefix", "orig_to_new_substr", "orig_to_new_suffix"):
        d = getattr(m, field, None) or {}
        if d:
            out[field.removeprefix("orig_to_new_")] = {
                _templated(k, n, draft): (None if v is None else _templated(v, n, draft)) for k, v in d.items()}
    regex = getattr(m, "orig_to_new_regex", None) or {}
    if regex:
        out["regex"] = {p.pattern: v for p, v in regex.items()}
    stacked = getattr(m, "orig_to_new_stacked", None) or {}
    if stacked:
        out["stacked"] = {k: [v[0], v[1]] for k, v in stacked.items()}
    return out


def _stacked_params(model: Any) -> list[list[Any]]:
    """The ``stacked_params_mapping`` list literal of every ``load_weights`` the built model's
    classes define (vLLM keeps it a local variable: read from the source it runs)."""
    seen: dict[tuple, None] = {}
    classes = {type(m) for m in model.modules()}
    for cls in sorted(classes, key=lambda c: c.__qualname__):
        fn = cls.__dict__.get("load_weights")
        if fn is None:
            continue
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
        except (OSError, TypeError, SyntaxError):
            continue
        for node in ast.walk(tree):
            if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                    and node.targets[0].id == "stacked_params_mapping" and isinstance(node.value, ast.List)):
                for elt in node.value.elts:
                    try:
                        seen[tuple(ast.literal_eval(elt))] = None
                    except ValueError:
                        continue
    return [list(x) for x in seen]


def _expert_mapping(model: Any) -> list[list[Any]]:
    get = getattr(model, "get_expert_mapping", None)
    if get is None:
        return []
    try:
        rows = get()
    except Exception:
        return []
    out: dict[tuple, None] = {}
    for param, weight, expert, shard in rows:
        out[(param, re.sub(rf"\.{expert}\.", ".{e}.", weight), shard)] = None
    return [list(x) for x in out]


def _modules(model: Any, asked: dict[int, tuple[str, str]], n: int, draft: bool) -> list[list[Any]]:
    """[module path, class, quant prefix or None] for every module holding parameters
    or a quant method; templated by layer, one row per template."""
    rows: dict[str, list[Any]] = {}
    for path, mod in model.named_modules(remove_duplicate=True):
        own = any(True for _ in mod.parameters(recurse=False))
        if not own and id(mod) not in asked and not hasattr(mod, "quant_method"):
            continue
        if not path:
            continue
        asked_as = asked.get(id(mod))
        key = _templated(path, n, draft)
        rows.setdefault(key, [key, type(mod).__name__,
                              None if asked_as is None else _templated(asked_as[0], n, draft)])
    return list(rows.values())


# model_types whose config class ships as remote code with the checkpoint (auto_map); the
# recorder registers the transformers class the remote one extends (MiMo: Qwen2; openPangu
# Ultra MoE: DeepSeek-V3), so vLLM reads the same attributes without remote code.
_REMOTE_CONFIGS = {"mimo": "Qwen2Config", "pangu_ultra_moe": "DeepseekV3Config"}


def _register_remote_configs() -> None:
    import transformers

    for model_type, base in _REMOTE_CONFIGS.items():
        if model_type in transformers.CONFIG_MAPPING:
            continue
        cls = type(f"Recorded{base}_{model_type}", (getattr(transformers, base),), {"model_type": model_type})
        transformers.AutoConfig.register(model_type, cls)


@contextmanager
def inspect_in_process() -> Iterator[None]:
    """Run vLLM's registry inspection in-process (it forks a fresh interpreter to keep
    CUDA out of the parent; there is no CUDA here). Same model info, written to the same
    cache; a cache miss costs an import of the model's module here instead of a new
    interpreter that imports vLLM (~20 CPU s each)."""
    from vllm.model_executor.models import registry

    saved = registry._run_in_subprocess
    registry._run_in_subprocess = lambda fn: fn()
    try:
        yield
    finally:
        registry._run_in_subprocess = saved


def _recording_config() -> Any:
    import torch
    from vllm.model_executor.layers.linear import LinearBase, UnquantizedLinearMethod
    from vllm.model_executor.layers.quantization.base_config import QuantizationConfig

    class Recording(QuantizationConfig):
        """Notes every (layer, prefix) vLLM asks about; builds everything unquantized."""

        def __init__(self) -> None:
            super().__init__()
            self.asked: dict[int, tuple[str, str]] = {}
            self.packed_snapshot: dict[str, list[str]] = {}  # packed_modules_mapping once built

        def get_name(self) -> Any:
            return "recording"

        def get_supported_act_dtypes(self) -> list[Any]:
            return [torch.bfloat16]

        @classmethod
        def get_min_capability(cls) -> int:
            return 0

        @staticmethod
        def get_config_filenames() -> list[str]:
            return []

        @classmethod
        def from_config(cls, config: dict[str, Any]) -> Any:
            return cls()

        def get_quant_method(self, layer: Any, prefix: str) -> Any:
            self.asked[id(layer)] = (prefix, type(layer).__name__)
            return UnquantizedLinearMethod() if isinstance(layer, LinearBase) else None

    return Recording()


def _build(vllm_config: Any, model_config: Any, rec: Any = None, *, own: bool = False,
           own_in_config: bool = False) -> tuple[Any, Any]:
    """``model_config``'s model built on the meta device under recording quant configs: ``rec``
    as ``vllm_config.quant_config`` (an MTP draft shares the target's object), and with ``own``
    a second one that a drafter checkpoint gets for itself (utils.py get_draft_quant_config ->
    ``VllmConfig.get_quantization_config``). Returns the model and the config its layers asked:
    with ``own`` that one, holding what the target's also saw. ``own_in_config``: the draft's own
    config is handed over as ``vllm_config.quant_config`` (dspark/utils.py load_dspark_model)."""
    import torch
    from vllm.config import VllmConfig
    from vllm.model_executor.model_loader.utils import initialize_model

    rec = rec if rec is not None else _recording_config()
    mine = _recording_config() if own else rec
    vllm_config.quant_config = mine if own_in_config else rec
    vllm_config.compilation_config.static_forward_context.clear()  # layer names must be unique
    saved = VllmConfig.__dict__["get_quantization_config"]
    VllmConfig.get_quantization_config = staticmethod(lambda *args, **kwargs: mine)
    try:
        with torch.device("meta"):
            model = initialize_model(vllm_config, model_config=model_config)
        for r in {id(rec): rec, id(mine): mine}.values():
            r.packed_snapshot = {k: list(v) for k, v in (r.packed_modules_mapping or {}).items()}
    finally:
        VllmConfig.get_quantization_config = saved
    if own:
        mine.asked = {**rec.asked, **mine.asked}
    return model, mine


@contextmanager
def _class_mappings_kept() -> Iterator[None]:
    """Some model classes add to their class-level ``packed_modules_mapping`` in ``__init__``
    (deepseek_v2.py: fused_qkv_a_proj, qwen3_moe.py: gate_up_proj), which a quant config may
    hold by reference: within one recording (target, then the MTP draft sharing its quant
    config) that is vLLM's state; afterwards every class mapping is restored, so no recording
    leaks into the next."""
    import torch.nn as nn

    def mappings() -> list[tuple[dict[str, Any], dict[str, Any]]]:
        out = []
        seen = set()
        stack = [nn.Module]
        while stack:
            cls = stack.pop()
            stack.extend(cls.__subclasses__())
            mapping = cls.__dict__.get("packed_modules_mapping")
            if isinstance(mapping, dict) and id(mapping) not in seen:
                seen.add(id(mapping))
                out.append((mapping, {k: list(v) for k, v in mapping.items()}))
        return out

    before = mappings()
    try:
        yield
    finally:
        for mapping, content in before:
            mapping.clear()
            mapping.update(content)


# Platform-dispatching packages that import their CPU implementation on this host
# (vllm/models/deepseek_v4/__init__.py: ``elif current_platform.is_cpu(): from .cpu...``, whose
# MTP and DSpark classes raise NotImplementedError); a CUDA server resolves these names to nvidia/.
_NVIDIA_CLASSES = {
    "DeepseekV4ForCausalLM": "vllm.models.deepseek_v4.nvidia.model:DeepseekV4ForCausalLM",
    "DeepSeekV4MTPModel": "vllm.models.deepseek_v4.nvidia.mtp:DeepSeekV4MTP",
    "DSparkDraftModel": "vllm.models.deepseek_v4.nvidia.dspark:DSparkDeepseekV4ForCausalLM",
    # vllm/models/deepseek_v32/__init__.py: CPU and XPU build the generic deepseek_v2.py classes
    "DeepseekV32ForCausalLM": "vllm.models.deepseek_v32.nvidia.model:DeepseekV32ForCausalLM",
    "GlmMoeDsaForCausalLM": "vllm.models.deepseek_v32.nvidia.model:DeepseekV32ForCausalLM",
    "DeepseekV32MTPModel": "vllm.models.deepseek_v32.nvidia.mtp:DeepseekV32MTP",
}
# The device a CUDA recording stands for: an H100/H200 (SM 9.0), where the DeepSeek-V4 attention
# class picks FlashMLA (nvidia/model.py _select_dsv4_attn_cls).
CUDA_CAPABILITY = (9, 0)


class _CudaDeviceProperties:
    """What ``torch.cuda.get_device_properties`` reports for the device a CUDA recording stands for."""

    name = "NVIDIA H200"
    major, minor = CUDA_CAPABILITY
    multi_processor_count = 132


class _InertCudaObject:
    """Stands in for ``torch.cuda.Stream`` / ``torch.cuda.Event``, which the CPU build of torch
    cannot instantiate; layers only keep them for overlapping kernels at run time."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass


def _sparse_attn_backend(cpu_choice: Any) -> Any:
    """The CPU platform refuses sparse MLA (DeepSeek-V3.2's indexer attention, platforms/cpu.py);
    an SM 9.0 CUDA server picks a FlashMLA sparse backend (platforms/cuda.py
    ``_get_backend_priorities``). The backend is the attention kernel only: it decides no
    prefix, no layer class that asks the quant config, no loader mapping."""
    def choose(cls: Any, selected_backend: Any, attn_selector_config: Any, num_heads: int | None = None) -> str:
        if getattr(attn_selector_config, "use_sparse", False):
            from vllm.v1.attention.backends.registry import AttentionBackendEnum

            return str(AttentionBackendEnum.FLASHMLA_SPARSE.get_path())
        return str(cpu_choice(cls, selected_backend, attn_selector_config, num_heads))
    return choose


@contextmanager
def _cuda_build(on: bool) -> Iterator[None]:
    """Build as a CUDA server does, for models that construct CUDA-only objects: the NVIDIA
    classes behind platform-dispatching registry names, the device capability the
    attention-class choice reads, inert streams/events. Nothing here decides a prefix, a
    class that asks the quant config, or a loader mapping."""
    if not on:
        yield
        return
    import torch
    from vllm.model_executor.models.registry import ModelRegistry
    from vllm.platforms import current_platform
    from vllm.platforms.interface import DeviceCapability

    platform = type(current_platform)
    saved_models = {k: ModelRegistry.models[k] for k in _NVIDIA_CLASSES if k in ModelRegistry.models}
    saved_cap = platform.__dict__.get("get_device_capability")
    saved_cuda = torch.cuda.Stream, torch.cuda.Event
    for arch, where in _NVIDIA_CLASSES.items():
        ModelRegistry.register_model(arch, where)
    platform.get_device_capability = classmethod(
        lambda cls, device_id=0: DeviceCapability(*CUDA_CAPABILITY))
    torch.cuda.Stream, torch.cuda.Event = _InertCudaObject, _InertCudaObject  # type: ignore[misc,assignment]
    from vllm.v1.worker import workspace

    if workspace._manager is None:  # gpu_worker.py sets it up before building (sparse MLA reserves scratch)
        workspace.init_workspace_manager(torch.device("meta"))
    saved_attn = platform.__dict__["get_attn_backend_cls"]
    platform.get_attn_backend_cls = classmethod(_sparse_attn_backend(saved_attn.__func__))
    # the workspace frees cached blocks before growing; V4.1's engram table sizes its kernel grid
    # by the device's SM count (an H100/H200 has 132)
    saved_device = (torch.accelerator.empty_cache, torch.accelerator.current_device_index,
                    torch.cuda.get_device_properties)
    torch.accelerator.empty_cache = lambda: None
    torch.accelerator.current_device_index = lambda: 0
    torch.cuda.get_device_properties = lambda *args, **kwargs: _CudaDeviceProperties()  # type: ignore[assignment]
    try:
        yield
    finally:
        (torch.accelerator.empty_cache, torch.accelerator.current_device_index,
         torch.cuda.get_device_properties) = saved_device
        platform.get_attn_backend_cls = saved_attn
        torch.cuda.Stream, torch.cuda.Event = saved_cuda  # type: ignore[misc]
        if saved_cap is None:
            del platform.get_device_capability
        else:
            platform.get_device_capability = saved_cap
        ModelRegistry.models.update(saved_models)


@contextmanager
def _inert(names: tuple[str, ...]) -> Iterator[None]:
    """Each ``module:Class`` replaced by an empty ``nn.Module`` while the model is built."""
    import importlib

    import torch.nn as nn

    class Inert(nn.Module):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__()

    saved = []
    for name in names:
        module = importlib.import_module(name.split(":")[0])
        attr = name.split(":")[1]
        saved.append((module, attr, getattr(module, attr)))
        setattr(module, attr, Inert)
    try:
        yield
    finally:
        for module, attr, value in saved:
            setattr(module, attr, value)


def _single_rank(vllm_config: Any) -> None:
    from vllm.config import set_current_vllm_config
    from vllm.distributed import ensure_model_parallel_initialized, init_distributed_environment, parallel_state
    from vllm.distributed.parallel_state import model_parallel_is_initialized

    if model_parallel_is_initialized():
        if parallel_state._EP is not None or not vllm_config.model_config.is_moe:
            return
        # the groups were made for a dense model (no expert-parallel group): make them again
        parallel_state.destroy_model_parallel()
        with set_current_vllm_config(vllm_config):
            ensure_model_parallel_initialized(1, 1)
        return
    store = tempfile.mkdtemp(prefix="specguard-gloo-")  # gloo's file store, for the process's life
    atexit.register(shutil.rmtree, store, ignore_errors=True)
    with set_current_vllm_config(vllm_config):
        init_distributed_environment(world_size=1, rank=0, local_rank=0,
                                     distributed_init_method=f"file://{store}/store", backend="gloo")
        ensure_model_parallel_initialized(1, 1)


def _side(model: Any, rec: Any, arch: str, n: int, draft: bool) -> dict[str, Any]:
    cls = type(model)
    out: dict[str, Any] = {"architecture": arch, "class": f"{cls.__module__}.{cls.__qualname__}",
                           "modules": _modules(model, rec.asked, n, draft)}
    # packed: what the quant config holds once the model is built (configure_quant_config /
    # SupportsQuant), i.e. what is_layer_skipped and friends expand fused layers with
    loader = {"mapper": _mapper(model, n, draft),
              "packed": rec.packed_snapshot or None,
              "stacked": _stacked_params(model) or None, "experts": _expert_mapping(model) or None}
    out["loader"] = {k: v for k, v in loader.items() if v}
    return out


def _engine_config(target: Target, config: dict[str, Any], root: Path) -> Any:
    """The VllmConfig ``vllm serve`` builds for ``config`` (+ the drafter's), written under ``root``."""
    from vllm.engine.arg_utils import EngineArgs

    root.mkdir(parents=True, exist_ok=True)
    Path(root, "config.json").write_text(json.dumps(config))
    spec: dict[str, Any] | None = None
    if target.method:
        spec = {"method": target.method, "num_speculative_tokens": 1}
    if target.draft is not None and spec is not None:
        Path(root, "draft").mkdir(exist_ok=True)
        Path(root, "draft", "config.json").write_text(json.dumps(target.draft))
        spec["model"] = str(Path(root, "draft"))
    with inspect_in_process():
        return EngineArgs(model=str(root), skip_tokenizer_init=True, speculative_config=spec,
                          **target.engine_args).create_engine_config()


def record(name: str) -> dict[str, Any]:
    """The build plan of ``name`` (target and, where it has one, its draft as vLLM's proposer builds it)."""
    target = TARGETS[name]
    arch = name.split("+", 1)[0]
    config = {"architectures": [arch], "model_type": target.model_type, "num_hidden_layers": N, **target.config}
    if target.text is not None:
        # ``config``: the wrapper's own keys (a vision tower's size) beside its text_config
        config = {"architectures": [arch], "model_type": target.model_type, **target.config,
                  "text_config": {**target.text, "num_hidden_layers": N}}
    with (tempfile.TemporaryDirectory(prefix="specguard-plan-") as d, _class_mappings_kept(),
          _cuda_build(target.cuda), _inert(target.inert)):
        vc = _engine_config(target, config, Path(d, "with"))
        _single_rank(vc)
        built, rec = _build(vc, vc.model_config)
        n = _num_layers(built, config)
        plan: dict[str, Any] = {"schema": SCHEMA, "engine": ENGINE, "recorded_with": config,
                                "target": _side(built, rec, arch, n, False)}
        if target.cuda:  # what a CUDA server builds (nvidia/ classes), not this CPU build's
            plan = {**plan, "platform": {"device": "cuda", "capability": list(CUDA_CAPABILITY)}}
        if target.method:
            dmc = vc.speculative_config.draft_model_config
            # an MTP draft is built with the target's quant config object (load_eagle_model keeps
            # vllm_config.quant_config); a drafter checkpoint gets its own (get_draft_quant_config)
            if target.method == "dspark":  # dspark/utils.py: get_draft_quant_config into the draft's vllm_config
                draft, drec = _build(vc, dmc, own=True, own_in_config=True)
            else:
                draft, drec = (_build(vc, dmc, rec) if target.draft is None else _build(vc, dmc, own=True))
            side = {"method": target.method, **_side(draft, drec, dmc.hf_config.architectures[0], n, True),
                    **_draft_layers(draft, config, target.draft)}
            side["count_default"] = _count_default(target, config, side["count_keys"], Path(d, "without"))
            plan["draft"] = side
    return plan


def _count_default(target: Target, config: dict[str, Any], keys: list[str], root: Path) -> int | None:
    """The draft layer count vLLM builds from a config without the count keys (the published
    Qwen3-Next config has none); None where vLLM then fails (the key is required)."""
    if not keys or target.draft is not None:
        return None
    try:
        vc = _engine_config(target, {k: v for k, v in config.items() if k not in keys}, root)
        draft, _ = _build(vc, vc.speculative_config.draft_model_config)
    except Exception:
        return None
    count = getattr(_inner(draft), "num_mtp_layers", None)
    return count if isinstance(count, int) else None


def _inner(model: Any) -> Any:
    inner = getattr(model, "model", None)
    return inner if inner is not None else model


def _num_layers(model: Any, config: dict[str, Any]) -> int:
    """The target's layer count as built (``end_layer`` of its decoder; LongCat builds two per layer)."""
    inner = _inner(getattr(model, "language_model", model))
    for attr in ("end_layer",):
        if isinstance(getattr(inner, attr, None), int):
            return int(getattr(inner, attr))
    return int(config.get("text_config", config)["num_hidden_layers"])


def _draft_layers(draft: Any, config: dict[str, Any], own: dict[str, Any] | None) -> dict[str, Any]:
    """Where the draft's layers start (runtime index) and how many it builds, with the config
    key each equals (``count_key``: the recorded count equals that key; none: a constant)."""
    inner = _inner(draft)
    start = getattr(inner, "mtp_start_layer_idx", None)
    count = getattr(inner, "num_mtp_layers", None)
    source = own if own is not None else config.get("text_config", config)
    out: dict[str, Any] = {"start": start, "count": count}
    keys = [k for k, v in source.items() if isinstance(v, int) and not isinstance(v, bool) and v == count]
    out["count_keys"] = [k for k in keys if any(w in k for w in ("nextn", "mtp", "predict"))]
    return out


def supported_architectures() -> list[str]:
    from vllm.model_executor.models.registry import ModelRegistry

    return sorted(ModelRegistry.get_supported_archs())


def transformers_architectures() -> list[str]:
    """Generative model classes transformers exports: vLLM's registry
    (``_try_resolve_transformers``: ``getattr(transformers, architecture)``) serves an
    architecture it lacks natively through its Transformers backend when one exists."""
    import transformers

    return sorted(n for n in dir(transformers) if n.endswith(("ForCausalLM", "ForConditionalGeneration")))


def record_all(out_dir: Path = PLANS_DIR, only: list[str] | None = None) -> dict[str, str]:
    """Record every target's plan into ``out_dir``; returns arch -> error for those that failed."""
    saved = {k: os.environ.get(k) for k in CPU_ENV}
    os.environ.update(CPU_ENV)
    try:
        return _record_all(out_dir, only)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def targets(engine: str = ENGINE) -> list[str]:
    """The plan names recorded for ``engine`` (``Target.since``: added in a later version)."""
    def version(e: str) -> tuple[int, ...]:
        return tuple(int(x) for x in e.removeprefix("vllm-").split("."))
    return [n for n, t in TARGETS.items() if t.since is None or version(engine) >= version(t.since)]


def torchvision_prelude() -> None:
    """Qwen3.5's module imports Qwen3-VL's, whose transformers image/video processors import
    torchvision: where that is the overlay without its ``_C`` (scripts/engines.sh:
    .engines/torchvision-0.28.0, put on the path by the callers), its op schemas are defined
    first (engines/torchvision_ops.py, as the SGLang recorder does)."""
    import importlib.util

    spec = importlib.util.find_spec("torchvision")  # (fires the overlay's sitecustomize hook, if any)
    if spec is None or spec.origin is None or "torchvision" in sys.modules:
        return
    if any(Path(spec.origin).parent.glob("_C*.so")):
        return  # a build whose extension loads registers its own ops
    define_torchvision_ops()


def _record_all(out_dir: Path, only: list[str] | None) -> dict[str, str]:
    torchvision_prelude()
    from vllm.model_executor.models.registry import ModelRegistry

    only = only or targets()
    _register_remote_configs()
    for name in only:  # imported before any build: _class_mappings_kept sees them
        ModelRegistry._try_load_model_cls(name.split("+", 1)[0])
    out_dir.mkdir(parents=True, exist_ok=True)
    failed: dict[str, str] = {}
    for name in only:
        try:
            plan = record(name)
        except Exception as exc:
            import traceback
            traceback.print_exc()
            failed[name] = f"{type(exc).__name__}: {exc}"[:400]
            continue
        (out_dir / f"{name}.json").write_text(dumps(plan))
    import transformers

    registry = {"schema": SCHEMA, "engine": ENGINE, "architectures": supported_architectures(),
                "transformers": transformers.__version__, "transformers_backend": transformers_architectures()}
    (out_dir / "_registry.json").write_text(dumps(registry))
    return failed


def dumps(obj: Any) -> str:
    """Compact, diff-friendly JSON: objects one key a line, a list of scalars (a module
    row, a mapping entry) on one line."""
    return _dump(obj, 0) + "\n"


def _dump(obj: Any, depth: int) -> str:
    pad = " " * (depth + 1)
    if isinstance(obj, dict) and obj:
        items = [f"{pad}{json.dumps(k)}: {_dump(v, depth + 1)}" for k, v in obj.items()]
        return "{\n" + ",\n".join(items) + "\n" + " " * depth + "}"
    if isinstance(obj, list) and any(isinstance(x, (dict, list)) for x in obj):
        return "[\n" + ",\n".join(pad + _dump(x, depth + 1) for x in obj) + "\n" + " " * depth + "]"
    return json.dumps(obj)
