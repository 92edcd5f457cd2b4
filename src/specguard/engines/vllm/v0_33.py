"""What vLLM 0.33.0 itself builds for a runtime prefix: its routing, verbatim.

This is the behaviour specguard corrects, re-stated from vLLM's source so users
see where it goes wrong (docs/formats.md "How vLLM 0.33 routes"). Sources, all in
vllm 0.33.0 site-packages:

- quant-config class: model_executor/layers/quantization/__init__.py
  ``get_quantization_config``: ``deepseek_v4_fp8`` is
  ``models.deepseek_v41.quant_config.DeepseekV4FP8Config`` on CUDA/ROCm and
  ``models.deepseek_v4.quant_config.DeepseekV4FP8Config`` elsewhere (CPU).
  ``override_quantization_method`` claims ``fp8`` for model_type deepseek_v4
  (V4 class) or deepseek_v4/_text/v41/v41_text (V4.1 class).
- routed experts: ``DeepseekV4FP8Config.get_quant_method``:
  ``is_layer_skipped`` (exact) -> UnquantizedFusedMoEMethod; expert_dtype fp4:
  V4 class ``moe_quant_algo == "NVFP4"`` -> ModelOptNvFp4FusedMoE else
  Mxfp4MoEMethod, whatever the prefix; V4.1 class ``_is_nvfp4_expert_layer``
  additionally consults the ModelOpt-style ``ignore`` list (fnmatchcase on
  ``mtp.{k}.ffn.experts`` / ``layers.{i}.ffn.experts``); expert_dtype fp8 ->
  Fp8MoEMethod. ``expert_dtype`` and ``moe_quant_algo`` are read lazily from
  ``get_current_vllm_config().model_config.hf_config``, which is the *target's*
  config also while a draft is built (dspark/utils.py ``load_dspark_model``
  keeps the target's model_config).
- linears: V4.1 MXFP8 path for ``weight_block_size == [32, 32]`` with E8M0
  scales; otherwise ``Fp8Config.get_quant_method`` (``is_layer_skipped`` with
  the model's ``packed_modules_mapping``). Embeddings and ParallelLMHead get
  no method from Fp8Config.
- ignore lists: ``model_loader/utils.py configure_quant_config`` applies the
  target class's ``hf_to_vllm_mapper.get_rename_mapper()`` to
  ``ignored_layers`` (DeepSeek-V4: ``mtp.*`` -> ``model.mtp.*``,
  ``layers.N`` -> ``model.layers.N``); the MTP draft reuses that object
  (spec_decode/eagle/utils.py ``load_eagle_model``); only
  ``amd/mtp.py`` calls ``align_mtp_quant_config`` (``model.mtp.{i}.`` ->
  ``model.layers.{N+i}.``); DSpark builds a fresh config from the draft model
  config (``get_draft_quant_config``) whose lists keep raw checkpoint names.
- compressed-tensors: ``CompressedTensorsConfig.apply_vllm_mapper`` maps
  dotted layer paths only; ``re:`` entries are never remapped.
- modules built with ``quant_config=None`` (never quantized): MoE routers
  (``GateLinear`` in deepseek_v2.py and DeepSeek-V4; most MoE models build
  their gate the same way), DeepSeek-V4 ``compressor.fused_wkv_wgate``,
  ``indexer.weights_proj``, the target's and DSpark's ``lm_head``; V3 MTP
  ``eh_proj`` (a plain ``nn.Linear``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import replace
from fnmatch import fnmatchcase
from typing import Any

from specguard import plans
from specguard.declared import parse_declared
from specguard.declared.compressed_tensors import CompressedTensorsDeclared
from specguard.declared.fp8 import MXFP4_DEEPSEEK, NVFP4_MODELOPT, Fp8Declared, fp8_linear_scheme
from specguard.declared.gptq_awq import IntGroupDeclared
from specguard.declared.inc import IncDeclared
from specguard.declared.model import GPTQ_IN_BLOCK, NATIVE, TARGET, UNQUANTIZED, VLLM_SUBSTRING, Declared
from specguard.declared.modelopt import ModelOptDeclared, modelopt_algo_scheme
from specguard.declared.mxfp4 import Mxfp4Declared
from specguard.declared.patterns import (
    FusedShardMismatch,
    modelopt_is_excluded,
    modelopt_rewrite,
    regex_match,
    vllm_is_layer_skipped,
)
from specguard.declared.quark import QuarkDeclared, quark_scheme
from specguard.declared.torchao import TorchAODeclared
from specguard.engines import DSPARK_MODEL, EAGLE_MODEL, MTP_MODEL, NO_PLAN, TARGET_MODEL, EngineChoice
from specguard.engines.vllm import gptq, loader, startup
from specguard.engines.vllm import int_group as ig
from specguard.engines.vllm.inc import inc_builds
from specguard.engines.vllm.startup import Refusal, not_modelled
from specguard.engines.vllm.startup import refusals as startup_refusals
from specguard.formats import scheme as s
from specguard.formats.scheme import Scheme
from specguard.formats.table import Module
from specguard.layouts import Layout, layout_for
from specguard.layouts import roles as r
from specguard.layouts.registry import DEEPSEEK_V4_TYPES, draft_kind_for, is_deepseek_v41, text_config

ENGINE = "vLLM 0.33"  # the modelled engine and version, as every message names it
PLAN_ENGINE = "vllm-0.33"  # its key in engines/registry.py and plans/
PLATFORMS = ("cuda", "rocm", "cpu")
MODELS = (TARGET_MODEL, MTP_MODEL, DSPARK_MODEL, EAGLE_MODEL)

V4_CLASS = "vllm.models.deepseek_v4.quant_config.DeepseekV4FP8Config"
V41_CLASS = "vllm.models.deepseek_v41.quant_config.DeepseekV4FP8Config"
_QC = "vllm.model_executor.layers.quantization"
_EXPERTS_LAYER_RE = re.compile(r"(?:^|\.)layers\.(\d+)\.ffn\.experts$")
_NO_QUANT_CONFIG = ("ffn.gate", "compressor.fused_wkv_wgate", "indexer.weights_proj")
# Modules only one of DeepSeek-V4's draft models builds (nvidia/dspark.py DSparkDeepseekV4Model,
# nvidia/mtp.py DeepSeekV4MultiTokenPredictorLayer).
_DSPARK_ONLY = frozenset({"main_proj", "main_norm", "markov_head", "confidence_head", "context_wkv_proj"})
_MTP_ONLY = frozenset({"e_proj", "h_proj", "enorm", "hnorm", "shared_head"})
# packed_modules_mapping of the model classes (nvidia/model.py; cpu/model.py and amd/model.py; deepseek_v2.py).
_V4_PACKED = {"gate_up_proj": ["w1", "w3"], "fused_wqa_wkv": ["wq_a", "wkv"], "fused_wkv_wgate": ["wkv", "wgate"]}
_GENERIC_PACKED = {"qkv_proj": ["q_proj", "k_proj", "v_proj"], "gate_up_proj": ["gate_proj", "up_proj"]}
# qwen3_5_mtp.py Qwen3_5MTP.packed_modules_mapping (configure_quant_config hands it to the
# shared quant config when the drafter is built); qwen3_5.py Qwen3_5ForConditionalGeneration's
_QWEN3_5_MTP_PACKED = _GENERIC_PACKED
_QWEN3_5_PACKED = {**_GENERIC_PACKED, "in_proj_qkvz": ["in_proj_qkv", "in_proj_z"],
                   "in_proj_ba": ["in_proj_b", "in_proj_a"]}
# qwen3_next.py Qwen3NextForCausalLM: its checkpoints store in_proj_qkvz / in_proj_ba fused
_QWEN3_NEXT_PACKED = {**_GENERIC_PACKED, "in_proj_qkvz": ["in_proj_qkvz"], "in_proj_ba": ["in_proj_ba"]}
# Qwen3.5/Qwen3-Next layers built with quant_config=None: GDN conv1d
# (qwen_gdn_linear_attn.py), the shared-expert gate (qwen3_next.py ReplicatedLinear)
_QWEN3_5_NO_QUANT = (".linear_attn.conv1d", ".mlp.shared_expert_gate")
_V4_CPU_PACKED = {"gate_up_proj": ["w1", "w3"], "fused_wqa_wkv": ["wq_a", "wkv"]}

# nvidia/model.py ``_make_deepseek_v4_weights_mapper("fp4").get_rename_mapper()``.
_V4_RENAME_REGEX = (
    (re.compile(r"(\.experts\.\d+\.w[123]\.base_layer)\.scale$"), r"\1.weight_scale"),
    (re.compile(r"(\.experts\.\d+\.w[123])\.scale$"), r"\1.weight_scale"),
    (re.compile(r"\.scale$"), ".weight_scale_inv"),
)
_V4_RENAME_PREFIX = (("layers.", "model.layers."), ("embed.", "model.embed."), ("norm.", "model.norm."),
                     ("hc_head", "model.hc_head"), ("mtp.", "model.mtp."))
_V4_RENAME_SUFFIX = (("head.weight", "lm_head.weight"), ("embed.weight", "embed_tokens.weight"),
                     (".ffn.gate.bias", ".ffn.gate.e_score_correction_bias"))


# config/speculative.py: DSpark drafters that keep their own architecture; any other DSpark
# draft of a DeepSeek-V4(.1) target is the target's config renamed DSparkDraftModel
# (DSparkV41DraftModel for model_type deepseek_v41).
_OWN_DSPARK_ARCHITECTURES = frozenset({"Qwen3DSparkModel", "Gemma4DSparkModel", "K3DSparkModel",
                                       "Qwen3OmniDSparkModel", "MuseSparkDSparkModel"})


def dspark_drafter(config: Mapping[str, Any], draft_config: Mapping[str, Any] | None = None) -> str:
    """The architecture vLLM 0.33 builds a DSpark draft as (``SpeculativeConfig.__post_init__``):
    a self-contained drafter's own class, else ``DSparkDraftModel`` / ``DSparkV41DraftModel``."""
    own = [str(a) for a in (draft_config or {}).get("architectures") or ()]
    hit = next((a for a in own if a in _OWN_DSPARK_ARCHITECTURES), None)
    if hit is not None:
        return hit
    return "DSparkV41DraftModel" if config.get("model_type") == "deepseek_v41" else "DSparkDraftModel"


class EngineRaises(ValueError):
    """vLLM itself raises ValueError here (modelled, not specguard's error): the layer cannot be built."""


def v41_ignore_name(prefix: str, num_hidden_layers: int) -> str | None:
    """The name deepseek_v41's ``_is_nvfp4_expert_layer`` matches ``ignore`` entries
    against: ``mtp.{L-N}.ffn.experts`` for a draft layer, ``layers.{L}.ffn.experts``
    otherwise (None for a prefix that is not a routed-experts layer)."""
    m = _EXPERTS_LAYER_RE.search(prefix)
    if m is None:
        return None
    idx = int(m.group(1))
    return (f"mtp.{idx - num_hidden_layers}" if idx >= num_hidden_layers else f"layers.{idx}") + ".ffn.experts"


def deepseek_v4_rename(name: str, *, v41: bool = False) -> str:
    """A name through DeepSeek-V4's ``hf_to_vllm_mapper.get_rename_mapper()``
    (``WeightsMapper._map_name_with_shard`` order: regex, substr, prefix, suffix;
    entries mapping to None are dropped by ``get_rename_mapper``)."""
    for pattern, new in _V4_RENAME_REGEX:
        if pattern.search(name):
            name = pattern.sub(new, name)
    if ".shared_experts.w2" in name:
        name = name.replace(".shared_experts.w2", ".shared_experts.down_proj", 1)
    for old, new in _V4_RENAME_PREFIX:
        if v41 and old == "hc_head":  # deepseek_v41's mapper has no hc_head entry
            continue
        if name.startswith(old):
            name = name.replace(old, new, 1)
    for old, new in _V4_RENAME_SUFFIX:
        if name.endswith(old):
            name = new.join(name.rsplit(old, 1))
    return name


class Vllm033:
    """vLLM 0.33.0's routing for one target checkpoint (and its draft).

    ``platform`` picks the quant-config class (``cuda``/``rocm``: V4.1 class,
    ``cpu``: V4 class) and whether ``align_mtp_quant_config`` runs (``rocm``).
    ``draft_config`` (+ ``draft_hf_quant_config``) is a separate drafter
    checkpoint's config (DSpark/EAGLE ``speculative_config.model``).
    """

    name = ENGINE
    plan_engine = PLAN_ENGINE  # plans/<key>/ this version reads (a subclass for another version sets its own)
    # amd/mtp.py align_mtp_quant_config re-keys the MTP draft's ignore entries on ROCm (new in 0.33)
    realigns_mtp_on_rocm = True
    # modelopt.py ModelOptQuantConfigBase.from_config reads config.json's list from ``ignore``,
    # else ``exclude_modules`` (0.32: ``ignore`` only); the fix planner writes the key every engine reads
    reads_config_json_exclude_modules = True
    # models/deepseek_v4{,1}/quant_config.py build MXFP4 experts with this activation key
    # (quant_utils name; 0.32: none): the vLLM plugin builds its MXFP4 method the same way
    deepseek_v4_mxfp4_activation: str | None = "kMxfp8Dynamic"

    # What the other stages ask of this engine, on the value: they import no engine module
    # (tests/test_architecture.py), so another engine answers with its own facts.
    platforms: tuple[str, ...] = PLATFORMS  # the platform classes that pick a quant-config class
    v41_quant_configs = (V4_CLASS, V41_CLASS)  # DeepSeek-V4(.1)'s own quant configs
    loader = loader  # routed-expert name mapping of the weight loader (engines/vllm/loader.py)

    @staticmethod
    def v41_ignore_name(prefix: str, num_hidden_layers: int) -> str | None:
        return v41_ignore_name(prefix, num_hidden_layers)

    @staticmethod
    def exclusion_rename(pattern: str, *, v41: bool = False) -> str:
        """An exclusion entry as the engine renames it before matching (DeepSeek-V4's mapper)."""
        return deepseek_v4_rename(pattern, v41=v41)

    @staticmethod
    def gptq_dynamic_fix(dynamic: dict, prefixes: list[str], quantized: Sequence[str] = ()) -> dict | None:
        return gptq.gptq_dynamic_fix(dynamic, prefixes, quantized)

    def __init__(
        self,
        config: Mapping[str, Any],
        hf_quant_config: Mapping[str, Any] | None = None,
        *,
        platform: str = "cuda",
        draft_method: str | None = None,
        draft_config: Mapping[str, Any] | None = None,
        draft_hf_quant_config: Mapping[str, Any] | None = None,
        tensor_dtypes: Mapping[str, str] | None = None,
    ) -> None:
        """``tensor_dtypes`` (tensor name -> safetensors dtype) of every tensor in every
        ``*.safetensors`` of the checkpoint directory: what vLLM's GPTQ/AWQ
        ``maybe_update_config`` reads when the config names no module list."""
        if platform not in PLATFORMS:
            raise ValueError(f"unknown platform {platform!r}; expected one of {PLATFORMS}")
        self.platform = platform
        # answers per runtime prefix, each asked several times per route (its model, its plan row, whether
        # the model builds it without a quant config): once each (787 routes, twice, in an export's lint)
        self._model_memo: dict[str, str] = {}
        self._row_memo: dict[tuple[str, str | None, int], plans.ModuleRow | None] = {}  # by plan too (a
        self._plain_memo: dict[tuple[str, str, int], bool] = {}  # copy without one shares these dicts)
        self.config = config
        self.text = text_config(config)
        self.draft_kind = draft_kind_for(draft_method)
        # An EAGLE drafter is a checkpoint of its own; the target's layout decides
        # which prefixes belong to the draft (layer index >= N).
        self.layout: Layout = layout_for(config, draft_method=None if self.draft_kind == r.EAGLE else draft_method)
        self.hf_quant_config = hf_quant_config
        self.tensor_dtypes = tensor_dtypes
        self.declared = parse_declared(config, hf_quant_config)
        self.draft_declared = (
            parse_declared(draft_config, draft_hf_quant_config) if draft_config is not None else self.declared
        )
        self.draft_text = text_config(draft_config) if draft_config is not None else self.text
        self.model_type = str(self.text.get("model_type") or config.get("model_type") or "")
        self.v41 = is_deepseek_v41(config)
        # Read lazily by DeepseekV4FP8Config from the current vLLM config's hf_config,
        # i.e. the target's config.json, also while a draft is built.
        qc = config.get("quantization_config") or self.text.get("quantization_config") or {}
        self.expert_dtype = str(self.text.get("expert_dtype") or "fp4")
        self.moe_quant_algo = str(qc.get("moe_quant_algo") or "").upper() if isinstance(qc, Mapping) else ""
        self.quantization_config: Mapping[str, Any] = qc if isinstance(qc, Mapping) else {}
        # The build plan recorded from vLLM 0.33 for this architecture (plans/vllm-0.33/):
        # where it has the answer, the hand-written rules below are not asked.
        self.plan: plans.Plan | None = self._recorded_plan(config, draft_config)
        self._no_plan = self.no_plan()
        self._excludes: dict[str, tuple[str, ...]] = {}  # modelopt_excludes by model, once each
        self._ignored: dict[str, tuple[str, ...]] = {}  # ignored_layers by model: asked once per module

    def _recorded_plan(self, config: Mapping[str, Any], draft_config: Mapping[str, Any] | None) -> plans.Plan | None:
        """The plan recorded for this target and the draft it is served with, where it describes
        this platform's build: an EAGLE drafter's over its target, a DeepSeek-V4 DSpark draft's
        (``+DSparkDraftModel``), else the target's own (with its MTP draft). None where none
        answers: the hand-written rules below then decide (CPU/ROCm DeepSeek-V4, V4.1)."""
        found: list[plans.Plan | None] = []
        if self.draft_kind == r.EAGLE:
            found.append(plans.plan_for_config(config, self.plan_engine, drafter=draft_config))
        else:
            if self.draft_kind == r.DSPARK:
                found.append(plans.plan_for_config(config, self.plan_engine,
                                                   drafter={"architectures": [dspark_drafter(config, draft_config)]}))
            found.append(plans.plan_for_config(config, self.plan_engine))
        # a plan recorded from another platform's classes (DeepSeek-V4: nvidia/) does not answer here
        return next((p for p in found if p is not None and p.answers_for(self.platform)), None)

    # -- which class, which lists --------------------------------------------

    def quant_config_class(self, model: str = TARGET_MODEL) -> str | None:
        """Class path of the quant config vLLM builds for the target or a draft.

        A DSpark draft gets the *target's* quantization method
        (config/speculative.py: ``draft_model_config.quantization =
        target_model_config.quantization``) fed with the drafter's own dict."""
        if model == DSPARK_MODEL:
            return _class_of(self.declared, self.model_type, self.platform)
        d, model_type = self._declared(model)
        return _class_of(d, model_type, self.platform)

    def ignored_layers(self, model: str = TARGET_MODEL) -> tuple[str, ...]:
        """The ignore list as vLLM matches it for ``model``: renamed through the
        target class's mapper for the target and the MTP draft (which shares the
        object), re-keyed on ROCm only, raw for a DSpark/EAGLE draft's fresh config.
        V4.1's registry class (the VL wrapper) has no class-level mapper, so its
        lists stay raw too."""
        hit = self._ignored.get(model)
        if hit is None:  # every route asks (``_skipped``): the list is the same for all of a model's modules
            hit = self._ignored[model] = self._ignored_layers(model)
        return hit

    def _ignored_layers(self, model: str) -> tuple[str, ...]:
        raw = self._unquantized_entries(model)
        if not self.v4_mapper_applies(model):
            return tuple(raw)
        names = [deepseek_v4_rename(x) for x in raw]
        if self.platform == "rocm" and model == MTP_MODEL and self.realigns_mtp_on_rocm:
            n = int(self.text.get("num_hidden_layers") or 0)
            for i in range(int(self.text.get("num_nextn_predict_layers") or 0)):
                names = [x.replace(f"model.mtp.{i}.", f"model.layers.{n + i}.", 1)
                         if x.startswith(f"model.mtp.{i}.") else x for x in names]
        return tuple(names)

    def _unquantized_entries(self, model: str) -> list[str]:
        """The config's unquantizing list entries for ``model``, as written: what ``ignored_layers``
        and ``modelopt_excludes`` each rename as vLLM does."""
        d, _ = self._declared(model)
        return [x.text for x in d.patterns if x.effect == UNQUANTIZED]

    def v4_mapper_applies(self, model: str) -> bool:
        """Whether vLLM renames ``model``'s lists through DeepSeek-V4's class-level
        ``hf_to_vllm_mapper`` (``configure_quant_config`` / ``apply_vllm_mapper``):
        for the target and the MTP draft that shares its config, not for a
        DSpark/EAGLE draft's fresh config, and not for V4.1 (its registry class,
        the VL wrapper, has no class-level mapper) or non-V4 models."""
        return model not in (DSPARK_MODEL, EAGLE_MODEL) and self.model_type in DEEPSEEK_V4_TYPES and not self.v41

    # -- start-up -----------------------------------------------------------------

    def refusals(self, modules: Mapping[str, Module]) -> list[Refusal]:
        """Why vLLM 0.33 will not start on this checkpoint (engines/vllm/startup.py); empty if it starts."""
        unsupported = self.unsupported_architecture()
        if unsupported is not None:
            return [unsupported]  # nothing past the registry lookup runs
        return startup_refusals(self.config, self.hf_quant_config, modules, self.layout, self.quant_config_class())

    def unsupported_architecture(self) -> Refusal | None:
        """model_executor/models/registry.py ``_raise_for_unsupported``: no architecture the
        config names is in vLLM 0.33's registry (recorded: plans/vllm-0.33/_registry.json),
        nor served by its Transformers backend (``_try_resolve_transformers``: a class
        transformers exports, or remote code named in ``auto_map``)."""
        if not self._looked_up:
            self._unsupported, self._looked_up = self._unsupported_architecture(), True
        return self._unsupported

    _looked_up: bool = False  # per model: every route asks
    _unsupported: Refusal | None = None

    def _unsupported_architecture(self) -> Refusal | None:
        archs = self.config.get("architectures")
        known = plans.supported_architectures(self.plan_engine)
        if not isinstance(archs, list) or not archs or known is None or self.config.get("auto_map"):
            return None
        names = [str(a) for a in archs]
        backend = plans.transformers_backend(self.plan_engine)
        if any(a in known or a in backend for a in names):
            return None
        return Refusal(startup.CONFIG, f"ValueError: Model architectures {names} are not supported for now",
                       f"{self.name}'s model registry has no architecture {names[0]} "
                       "(model_executor/models/registry.py _raise_for_unsupported)")

    def no_plan(self) -> str | None:
        """Why specguard cannot say what vLLM 0.33 builds for this architecture (None: it can):
        the config names an architecture with no recorded plan and no hand-written family model.
        Every ``builds`` answer is then ``unknown`` (scheme UNKNOWN, method "no plan")."""
        archs = self.config.get("architectures")
        if self.plan is not None or self.layout.family != "generic" or not isinstance(archs, list) or not archs:
            return None
        if self.unsupported_architecture() is not None:
            return None  # refused at start-up: SG701 says so
        return (f"no build plan of {archs[0]} is recorded for {self.name} "
                "(docs/architecture.md \"Plans\": scripts/record_plans.py adds one)")

    # -- the routing ------------------------------------------------------------

    def builds(self, runtime_prefix: str, *, kind: str, model: str | None = None) -> EngineChoice:
        """What vLLM 0.33 builds for the layer at ``runtime_prefix``.

        ``model`` defaults to the draft model for draft prefixes (per the
        layout's draft kind) and the target otherwise.
        """
        model = model or self._model_of(runtime_prefix)
        if model not in MODELS:
            raise ValueError(f"unknown model {model!r}; expected one of {MODELS}")
        d, model_type = self._declared(model)
        cls = self.quant_config_class(model)
        why_unknown = self._no_plan
        if why_unknown is not None and kind not in (r.NORM, r.OTHER):
            return EngineChoice(Scheme(s.UNKNOWN, reason=why_unknown), NO_PLAN, why_unknown, cls)
        if kind in (r.NORM, r.OTHER):
            return self._plain(d, cls, "Parameter", "not a quantizable layer")
        if self.built_without_quant_config(runtime_prefix, kind):
            return self._plain(d, cls, _unquantized_method(kind), "the model builds this layer with quant_config=None")
        if cls is None:
            if d.stack == "unknown":
                return not_modelled(d.quant_method)
            return self._plain(d, None, _unquantized_method(kind), "no quantization config")
        # the draft's own class differs only for a DSpark draft (given the target's method): for any
        # other model ``quant_config_class`` is this very call
        if model == DSPARK_MODEL and cls != _class_of(d, model_type, self.platform):
            return EngineChoice(Scheme(s.UNKNOWN, reason="draft quant config cannot be built"), "ValueError",
                                f"the draft is given the target's method ({cls.rsplit('.', 1)[-1]}) over its own "
                                f"{d.stack} config; from_config raises", cls)
        if isinstance(d, Fp8Declared):
            return self._fp8(d, cls, runtime_prefix, kind, model)
        if isinstance(d, ModelOptDeclared):
            return self._modelopt(d, cls, runtime_prefix, kind, model)
        if isinstance(d, CompressedTensorsDeclared):
            return self._compressed_tensors(d, cls, runtime_prefix, kind, model)
        if isinstance(d, Mxfp4Declared):
            if kind == r.ROUTED_EXPERTS:
                return EngineChoice(Scheme(s.MXFP4, s.GPT_OSS, group_size=32), "Mxfp4MoEMethod",
                                    "mxfp4.py Mxfp4Config.get_quant_method: every RoutedExperts", cls)
            return self._plain(d, cls, _unquantized_method(kind), "mxfp4.py: linears stay unquantized")
        if isinstance(d, QuarkDeclared):
            return self._quark(d, cls, runtime_prefix, kind, model)
        if isinstance(d, TorchAODeclared):  # torchao.py TorchAOConfig.get_quant_method
            claim = d.scheme_for(runtime_prefix, kind=kind)
            return EngineChoice(claim.scheme, "TorchAOLinearMethod" if claim.quantized else _unquantized_method(kind),
                                f"torchao: {claim.source}", cls)
        if isinstance(d, IncDeclared):
            return inc_builds(d, cls, runtime_prefix, kind, self._packed(model), self.platform)
        if isinstance(d, IntGroupDeclared) and d.stack == s.GPTQ and model in (TARGET_MODEL, MTP_MODEL):
            return self._gptq(d, cls, runtime_prefix, kind, model)
        if isinstance(d, IntGroupDeclared):
            return self._int_group(d, cls, runtime_prefix, kind, model)
        return self._plain(d, cls, _unquantized_method(kind), "no quantization config")

    # -- helpers ----------------------------------------------------------------

    def _declared(self, model: str) -> tuple[Declared, str]:
        if model in (DSPARK_MODEL, EAGLE_MODEL):
            return self.draft_declared, str(self.draft_text.get("model_type") or "")
        return self.declared, self.model_type

    def _model_of(self, prefix: str) -> str:
        hit = self._model_memo.get(prefix)
        if hit is None:
            hit = self._model_memo[prefix] = self._model_of_role(prefix)
        return hit

    def _model_of_role(self, prefix: str) -> str:
        role = self.layout.role(prefix)
        if not role.is_draft:
            return TARGET_MODEL
        kind = self.draft_kind or role.draft_kind
        return {r.DSPARK: DSPARK_MODEL, r.EAGLE: EAGLE_MODEL}.get(kind, MTP_MODEL) if kind else MTP_MODEL

    def fused_shards(self, prefix: str, model: str | None = None) -> tuple[str, ...]:
        """The shard prefixes vLLM tests ignore/exclude entries against for a fused
        layer (``is_layer_skipped``: ``prefix.replace(proj, shard)`` for each shard
        in the model's ``packed_modules_mapping``); empty for an unfused layer."""
        model = model or self._model_of(prefix)
        proj = prefix.rsplit(".", 1)[-1]
        shards = self._packed(model).get(proj, ())
        return tuple(prefix.replace(proj, shard) for shard in shards)

    def not_built(self, prefix: str, model: str | None = None) -> EngineChoice | None:
        """What stands in for ``builds`` when the ``model`` does not build this stored
        module at all (None: it does). A module the engine model does not know is
        never assumed to be a quantized linear: no claim."""
        refused = self.unsupported_architecture()
        if refused is not None:  # the registry lookup fails before any layer is built
            stops = f"{self.name} will not start: {refused.because}"
            return EngineChoice(Scheme(s.UNKNOWN, reason=stops), "not built", stops, None)
        model = model or self._model_of(prefix)
        why = self._foreign(prefix, model)
        if why is None:
            return None
        return EngineChoice(Scheme(s.UNKNOWN, reason=why), "not built", why, self.quant_config_class(model))

    def _foreign(self, prefix: str, model: str) -> str | None:
        if self.layout.family != "deepseek_v4":
            return None
        parts = set(prefix.split("."))
        if model == MTP_MODEL and parts & _DSPARK_ONLY:
            return ("DeepSeek-V4's MTP model (models/deepseek_v4/nvidia/mtp.py) builds no "
                    f"{'/'.join(sorted(parts & _DSPARK_ONLY))}: a DSpark module, not loaded")
        if model == DSPARK_MODEL and parts & _MTP_ONLY:
            return ("DeepSeek-V4's DSpark model (models/deepseek_v4/nvidia/dspark.py) builds no "
                    f"{'/'.join(sorted(parts & _MTP_ONLY))}: an MTP module, not loaded")
        return None

    def plan_row(self, prefix: str, model: str | None = None) -> plans.ModuleRow | None:
        """The recorded module behind a runtime prefix (None: no plan, or the plan has no such module)."""
        if self.plan is None:
            return None
        key = (prefix, model, id(self.plan))
        if key not in self._row_memo:
            side = self._plan_side(model or self._model_of(prefix))
            self._row_memo[key] = side.find(prefix) if side is not None else None
        return self._row_memo[key]

    def _plan_side(self, model: str) -> plans.Side | None:
        """The plan's side that describes ``model``: the target, or its draft where the plan's
        draft is that kind (an MTP plan says nothing of a DSpark draft model)."""
        if self.plan is None:
            return None
        if model == TARGET_MODEL:
            return self.plan.target
        kind = {MTP_MODEL: "mtp", DSPARK_MODEL: "dspark", EAGLE_MODEL: "eagle"}.get(model)
        method = self.plan.draft_method or ""
        return self.plan.draft if kind is not None and method.startswith(kind) else None

    def built_prefixes(self) -> tuple[str, ...]:
        """Quant prefixes the target asks about whatever the checkpoint stores (no layer
        index: ``lm_head``, ``model.embed_tokens``), recorded in its plan. A tied head is
        still built, and its prefix still asked, though no tensor of it is stored."""
        if self.plan is None:
            return ()
        return tuple(row.quant_prefix for row in self.plan.target.modules
                     if row.quant_prefix is not None and "{" not in row.quant_prefix)

    def built_without_quant_config(self, prefix: str, kind: str) -> bool:
        """Layers the model class builds with ``quant_config=None``: no config can quantize them.
        Recorded in the plan where there is one (a module row whose quant config was never
        asked: GLM MTP's ``eh_proj``, a plain ``nn.Linear``); otherwise the rules below."""
        key = (prefix, kind, id(self.plan))
        hit = self._plain_memo.get(key)
        if hit is None:
            hit = self._plain_memo[key] = self._built_without_quant_config(prefix, kind)
        return hit

    def _built_without_quant_config(self, prefix: str, kind: str) -> bool:
        row = self.plan_row(prefix) if kind in _PLANNED_KINDS else None
        if row is not None:
            return not row.asks_quant_config
        family = self.layout.family
        if family == "deepseek_v4" and prefix.endswith(_NO_QUANT_CONFIG):
            return True
        dotted = f".{prefix}"
        if ".confidence_head." in dotted or dotted.endswith(".markov_w1"):
            # qwen3_dspark.py: DSparkConfidenceHead.proj is a ReplicatedLinear(params_dtype=float32)
            # built without a quant config; DSparkMarkovHead.markov_w1 an nn.Embedding
            return True
        if family == "deepseek_v4" and ".markov_head." in dotted:
            # deepseek_v4/nvidia/dspark.py builds DSparkMarkovHead without quant_config, so its
            # markov_w2 ParallelLMHead gets none (Qwen3 DSpark passes its quant config on)
            return True
        parent, _, leaf = prefix.rpartition(".")
        if (leaf == "gate" and parent.rsplit(".", 1)[-1] in ("mlp", "ffn", "block_sparse_moe")
                and self.model_type not in GATE_WITH_QUANT_CONFIG):
            return True  # MoE routers: GateLinear(quant_config=None) in deepseek_v2.py / deepseek_v4
        if family == "qwen3_5" and prefix.endswith(_QWEN3_5_NO_QUANT):
            return True
        if kind == r.HEAD_KIND and prefix == "lm_head" and family == "deepseek_v4":
            return True  # nvidia/model.py and dspark.py build ParallelLMHead without quant_config
        return family == "deepseek_v3" and prefix.endswith(".eh_proj") and self.layout.role(prefix).is_draft

    def _gptq(self, d: IntGroupDeclared, cls: str, prefix: str, kind: str, model: str) -> EngineChoice:
        """auto_gptq.py as it decides for this prefix (see engines/vllm/gptq.py)."""
        qc = self.quantization_config
        unquantized = "UnquantizedFusedMoEMethod" if kind == r.ROUTED_EXPERTS else "UnquantizedLinearMethod"
        if model == MTP_MODEL and self.model_type.startswith("qwen3_5") and prefix.startswith("mtp.layers."):
            hit = next((k for k in qc.get("dynamic") or {} if k.startswith("-:") and "mtp" in k), None)
            if hit is not None:
                return self._plain(d, cls, unquantized, f"qwen3_5_mtp.py: dynamic {hit!r} makes "
                                   "Qwen3_5MultiTokenPredictor build the MTP layers with quant_config=None")
        layers, _ = self.int_group_layers(d, model)
        try:
            got = gptq.gptq_builds(qc, prefix, kind, layers, self._packed(model))
        except ig.ShardsDisagree as exc:
            return EngineChoice(Scheme(s.UNKNOWN, reason=str(exc)), "ValueError",
                                f"is_layer_gptq_quantized: {exc}", cls)
        if not got.quantized:
            return self._plain(d, cls, unquantized, f"gptq: {got.why}")
        method = "AutoGPTQMoEMethod" if kind == r.ROUTED_EXPERTS else "AutoGPTQLinearMethod"
        return EngineChoice(d.scheme_of(got.bits, got.group_size), method, f"gptq: {got.why}", cls)

    def gptq_quantized_layers(self) -> list[str]:
        """``modules_in_block_to_quantize`` as the target's ``AutoGPTQConfig`` holds it."""
        return self.int_group_layers(self.declared, TARGET_MODEL)[0]

    def int_group_layers(self, d: Declared, model: str) -> tuple[list[str], str]:
        """GPTQ's ``modules_in_block_to_quantize`` / AWQ's ``modules_to_not_convert`` as vLLM
        holds them after ``maybe_update_config``, and where they come from: the config's
        list (flattened) or, when it has none, engines/vllm/int_group.py's reading of the
        directory's dtypes. The target and its MTP draft share one directory; a DSpark/EAGLE
        draft reads its own, which this model does not hold, so it keeps the config's."""
        own = [x.text for x in d.patterns if x.semantics in (GPTQ_IN_BLOCK, VLLM_SUBSTRING)]
        if own or self.tensor_dtypes is None or model not in (TARGET_MODEL, MTP_MODEL):
            return own, f"{d.stack}: the config's list"
        quant, plain = ig.modules_by_dtype(self.tensor_dtypes)
        return (quant if d.stack == s.GPTQ else plain), \
            f"{d.stack}: maybe_update_config derives the list from the weights' dtypes"

    def _plain(self, d: Declared, cls: str | None, method: str, why: str) -> EngineChoice:
        return EngineChoice(d.unquantized, method, why, cls)

    def _packed(self, model: str) -> Mapping[str, Sequence[str]]:
        """The ``packed_modules_mapping`` the quant config holds while ``model`` is built:
        recorded in the plan (configure_quant_config / SupportsQuant hand it over)."""
        side = self._plan_side(model)
        if side is not None:
            return side.packed_modules_mapping
        if model == DSPARK_MODEL and self.layout.family == "deepseek_v4":
            # No DeepSeek-V4(.1) DSpark class (nvidia/, amd/, xpu/ dspark.py) declares one, nor is
            # SupportsQuant: configure_quant_config leaves the fresh draft config's {} (the CUDA
            # plan, DeepseekV4ForCausalLM+DSparkDraftModel.json, records none either)
            return {}
        if self.v41 and model != DSPARK_MODEL:
            return {}  # the VL wrapper class declares no packed_modules_mapping
        if model == DSPARK_MODEL or self.model_type not in DEEPSEEK_V4_TYPES:
            if self.layout.family == "deepseek_v3" and model != DSPARK_MODEL:
                packed = {"gate_up_proj": ["gate_proj", "up_proj"]}
                if self.text.get("q_lora_rank") is not None:
                    packed["fused_qkv_a_proj"] = ["q_a_proj", "kv_a_proj_with_mqa"]
                return packed
            if self.layout.family == "qwen3_5" and model != DSPARK_MODEL:
                if model == MTP_MODEL:
                    return _QWEN3_5_MTP_PACKED
                return _QWEN3_NEXT_PACKED if self.model_type.startswith("qwen3_next") else _QWEN3_5_PACKED
            if self.layout.family == "generic" and model != DSPARK_MODEL:
                # Llama/Qwen-style classes (qwen3_moe.py, llama.py ... packed_modules_mapping)
                return _GENERIC_PACKED
            return {}
        return _V4_PACKED if self.platform == "cuda" else _V4_CPU_PACKED

    def _skipped(self, prefix: str, model: str) -> tuple[bool, str]:
        """``is_layer_skipped`` (exact) as vLLM calls it; raises FusedShardMismatch as vLLM does."""
        ignored = self.ignored_layers(model)
        hit = vllm_is_layer_skipped(prefix, ignored, self._packed(model))
        return hit, f"ignored_layers as vLLM holds them for the {model} model: {list(ignored)}"

    def _int_group(self, d: IntGroupDeclared, cls: str, prefix: str, kind: str, model: str) -> EngineChoice:
        """AWQ, and GPTQ for a DSpark/EAGLE draft (engines/vllm/int_group.py): the module
        list as vLLM holds it (``int_group_layers``), merged layers expanded to their
        shards; the rest of the claim (bits, group, dynamic, lm_head) is the config's.
        The target's and MTP draft's GPTQ layers go through ``_gptq``."""
        experts = kind == r.ROUTED_EXPERTS  # auto_awq.py / auto_gptq.py get_quant_method
        method = f"Auto{'GPTQ' if d.stack == s.GPTQ else 'AWQ'}{'MoE' if experts else 'Linear'}Method"
        unquantized = "UnquantizedFusedMoEMethod" if experts else "UnquantizedLinearMethod"
        rest = replace(d, patterns=tuple(x for x in d.patterns if x.semantics not in (GPTQ_IN_BLOCK, VLLM_SUBSTRING)))
        own, source = self.int_group_layers(d, model)
        packed = self._packed(model) if kind == r.LINEAR else {}
        if kind in (r.LINEAR, r.ROUTED_EXPERTS) or (kind == r.HEAD_KIND and d.lm_head):
            try:
                if d.stack == s.GPTQ:
                    skipped = kind != r.ROUTED_EXPERTS and not ig.gptq_quantized(prefix, own, packed)
                else:
                    skipped = ig.awq_skipped(prefix, own, packed)
            except ig.ShardsDisagree as exc:
                return EngineChoice(Scheme(s.UNKNOWN, reason=str(exc)), "ValueError", str(exc), cls)
            if skipped:
                return self._plain(d, cls, unquantized, f"{source}: {prefix} is not quantized")
        claim = rest.scheme_for(prefix, kind=kind)
        return EngineChoice(claim.scheme, method if claim.quantized else unquantized,
                            f"{d.stack}: {claim.source}", cls)

    def _quark(self, d: QuarkDeclared, cls: str, prefix: str, kind: str, model: str) -> EngineChoice:
        """quark/quark.py ``QuarkConfig.get_quant_method`` / ``get_quant_method_target``:
        ``should_ignore_layer`` over the merged layer's shards, then the shards' layer
        config (``_find_matched_config``), whose weight spec picks the scheme."""
        if kind in (r.EMBEDDING_KIND, r.HEAD_KIND):
            return self._plain(d, cls, "None", "QuarkConfig.get_quant_method: not a LinearBase/RoutedExperts")
        leaf = prefix.rsplit(".", 1)[-1]
        shards = [prefix.replace(leaf, sh) for sh in self._packed(model).get(leaf, ())] or [prefix]
        unquant = "UnquantizedFusedMoEMethod" if kind == r.ROUTED_EXPERTS else "UnquantizedLinearMethod"
        direct = d.excluded(prefix, kind)
        hits = [direct] if direct else [d.excluded(sh, kind) for sh in shards]
        if any(hits) and not all(hits):
            return EngineChoice(Scheme(s.UNKNOWN, reason="shards excluded differently"), "ValueError",
                                f"quark/utils.py should_ignore_layer raises for {prefix}: some shards excluded", cls)
        if hits[0] is not None:
            return self._plain(d, cls, unquant, f"should_ignore_layer: {hits[0]}")
        found = [d.config_for(sh) for sh in shards]
        if any(c != found[0][0] for c, _ in found):
            return EngineChoice(Scheme(s.UNKNOWN, reason="shards configured differently"), "ValueError",
                                f"quark.py _find_matched_config raises for {prefix}: shards differ", cls)
        cfg, source = found[0]
        scheme = quark_scheme(cfg)
        method = _QUARK_MOE.get(scheme.format, "RuntimeError") if kind == r.ROUTED_EXPERTS else "QuarkLinearMethod"
        return EngineChoice(scheme, method, f"quark.py QuarkConfig.get_quant_method: {source}", cls)

    def _fp8(self, d: Fp8Declared, cls: str, prefix: str, kind: str, model: str) -> EngineChoice:
        # expert_dtype / moe_quant_algo come from the target's hf_config (lazy properties).
        expert_dtype, algo = self.expert_dtype, self.moe_quant_algo
        e8m0 = expert_dtype == "fp4" if cls in (V4_CLASS, V41_CLASS) else d.e8m0
        block = d.weight_block_size
        where = {V4_CLASS: "deepseek_v4 DeepseekV4FP8Config.get_quant_method",
                 V41_CLASS: "deepseek_v41 DeepseekV4FP8Config.get_quant_method"}.get(
            cls, "fp8.py Fp8Config.get_quant_method")
        if kind in (r.EMBEDDING_KIND, r.HEAD_KIND):
            return self._plain(d, cls, "None", "Fp8Config.get_quant_method returns None for embeddings/heads")
        try:
            skipped, lists = self._skipped(prefix, model)
        except FusedShardMismatch as exc:
            return EngineChoice(Scheme(s.UNKNOWN, reason=str(exc)), "ValueError", f"is_layer_skipped raises: {exc}",
                                cls)
        if kind == r.LINEAR:
            if skipped:
                return self._plain(d, cls, "UnquantizedLinearMethod", f"is_layer_skipped (exact); {lists}")
            scheme = fp8_linear_scheme(block, e8m0, cls == V41_CLASS)
            method = "ModelOptLinearMethod" if scheme.format == s.MXFP8 else "Fp8LinearMethod"
            return EngineChoice(scheme, method, f"{where}: linear, not in ignored_layers", cls)
        if skipped:
            return self._plain(d, cls, "UnquantizedFusedMoEMethod", f"is_layer_skipped (exact); {lists}")
        if cls not in (V4_CLASS, V41_CLASS) or expert_dtype == "fp8":
            if d.store_dtype == "mxfp4":
                return EngineChoice(Scheme(s.MXFP4, group_size=32), "Mxfp4MoEMethod", "Fp8Config store_dtype", cls)
            # each stack's text says what that engine reads: Fp8Config has no expert_dtype
            why = (f"expert_dtype={expert_dtype} -> Fp8Config" if cls in (V4_CLASS, V41_CLASS)
                   else "routed experts, not in ignored_layers")
            return EngineChoice(fp8_linear_scheme(block, e8m0, False), "Fp8MoEMethod", f"{where}: {why}", cls)
        if cls == V41_CLASS:
            nvfp4, why = self._v41_is_nvfp4(d, prefix, algo)
        else:
            nvfp4 = algo == "NVFP4"
            why = f"moe_quant_algo={algo or 'unset'} (one global switch, prefix unused)"
        if nvfp4:
            return EngineChoice(NVFP4_MODELOPT, "ModelOptNvFp4FusedMoE", f"{where}: {why}", cls)
        return EngineChoice(MXFP4_DEEPSEEK, "Mxfp4MoEMethod", f"{where}: {why}", cls)

    def _v41_is_nvfp4(self, d: Fp8Declared, prefix: str, algo: str) -> tuple[bool, str]:
        """deepseek_v41/quant_config.py ``_is_nvfp4_expert_layer``."""
        if algo != "NVFP4":
            return False, f"_is_nvfp4_expert_layer: moe_quant_algo={algo or 'unset'}"
        ignore = [x.text for x in d.patterns if x.effect == NATIVE]
        n = int(self.text.get("num_hidden_layers") or 0)  # the target's hf_text_config
        name = v41_ignore_name(prefix, n)  # None: not a routed-experts layer
        if name is None or not ignore:
            return True, "_is_nvfp4_expert_layer: moe_quant_algo=NVFP4 and no ModelOpt-style ignore list"
        hit = next((p for p in ignore if fnmatchcase(name, p)), None)
        if hit is None:
            return True, f"_is_nvfp4_expert_layer: {name!r} matches no ignore entry {ignore}"
        return False, f"_is_nvfp4_expert_layer: {name!r} matches ignore entry {hit!r}"

    def modelopt_excludes(self, model: str = TARGET_MODEL) -> tuple[str, ...]:
        """``exclude_modules`` as vLLM matches them: ``apply_vllm_mapper`` (the
        ``x*`` -> ``x``, ``x.*`` rewrite, then the model's renames) runs only when
        the model class has a class-level ``hf_to_vllm_mapper`` -- DeepSeek-V4's
        does, DeepSeek-V2/V3's and the V4.1 VL wrapper's do not."""
        hit = self._excludes.get(model)  # asked per layer (hundreds per lint); the config is fixed
        if hit is None:
            raw = self._unquantized_entries(model)
            hit = self._excludes[model] = (tuple(raw) if not self.v4_mapper_applies(model)
                                           else tuple(deepseek_v4_rename(x) for x in modelopt_rewrite(raw)))
        return hit

    def _modelopt(self, d: ModelOptDeclared, cls: str, prefix: str, kind: str, model: str) -> EngineChoice:
        """modelopt.py ``ModelOptQuantConfigBase.get_quant_method`` (and the MIXED_PRECISION one)."""
        if kind == r.EMBEDDING_KIND:
            return self._plain(d, cls, "None", "modelopt.py get_quant_method: no method for embeddings")
        excludes = self.modelopt_excludes(model)
        try:
            excluded = modelopt_is_excluded(prefix, excludes, self._packed(model))
        except FusedShardMismatch as exc:
            return EngineChoice(Scheme(s.UNKNOWN, reason=str(exc)), "ValueError", f"is_layer_skipped raises: {exc}",
                                cls)
        if excluded:
            method = "UnquantizedLinearMethod" if kind in (r.LINEAR, r.HEAD_KIND) else "None"
            return self._plain(d, cls, method, f"modelopt.py is_layer_excluded: {list(excludes)}")
        if d.quant_algo == "MIXED_PRECISION":
            key = d._quantized_layer(prefix, kind)
            if key is None:
                method = "UnquantizedLinearMethod" if kind in (r.LINEAR, r.HEAD_KIND) else "None"
                return self._plain(d, cls, method, "MIXED_PRECISION: not in quantized_layers")
            algo = str(d.quantized_layers[key].get("quant_algo", "")).upper()
            scheme = modelopt_algo_scheme(algo, d.quantized_layers[key].get("group_size") or d.group_size)
            why = f"quantized_layers[{key!r}].quant_algo={algo}"
        else:
            algo, scheme = d.quant_algo, modelopt_algo_scheme(d.quant_algo, d.group_size)
            why = f"quant_algo={algo}" + (" (ParallelLMHead is quantized unless excluded)" if kind == r.HEAD_KIND
                                          else "")
        if kind == r.ROUTED_EXPERTS:
            method = {s.NVFP4: "ModelOptNvFp4FusedMoE", s.MXFP8: "ModelOptMxFp8FusedMoE",
                      s.FP8_BLOCK: "Fp8MoEMethod" if d.quant_algo == "MIXED_PRECISION" else "ModelOptFp8MoEMethod",
                      }.get(scheme.format, "ModelOptFp8MoEMethod")
            if method == "ModelOptFp8MoEMethod" and scheme.format in (s.FP8_BLOCK, s.FP8_CHANNEL):
                # ModelOptFp8Config.FusedMoEMethodCls whatever the algo: its create_weights
                # makes per-tensor w13/w2_weight_scale (PerTensorScaleParameter), so per-block
                # or per-channel expert scales do not load into it.
                scheme = Scheme(s.FP8_TENSOR, s.MODELOPT, scale_dtype="F32", weight_dtype="F8_E4M3")
                why += " (ModelOptFp8MoEMethod: per-tensor expert scales)"
        else:
            method = "ModelOptLinearMethod"
        return EngineChoice(scheme, method, f"modelopt.py get_quant_method: {why}", cls)

    def _compressed_tensors(self, d: CompressedTensorsDeclared, cls: str, prefix: str, kind: str,
                            model: str) -> EngineChoice:
        if kind == r.EMBEDDING_KIND:
            return self._plain(d, cls, "None", "compressed-tensors embeddings: INT WNA16 only")
        try:
            target, why = self.ct_target(prefix, kind, model)
        except EngineRaises as exc:
            if kind == r.HEAD_KIND:  # get_quant_method swallows it for ParallelLMHead
                return self._plain(d, cls, "None", f"get_scheme raised for ParallelLMHead: {exc}")
            return EngineChoice(Scheme(s.UNKNOWN, reason=str(exc)), "ValueError", f"vLLM raises: {exc}", cls)
        if target is None:
            # an ignored ParallelLMHead falls through to the VocabParallelEmbedding branch, which
            # returns None (compressed_tensors.py get_quant_method): UnquantizedEmbeddingMethod
            method = ("UnquantizedFusedMoEMethod" if kind == r.ROUTED_EXPERTS
                      else "None" if kind == r.HEAD_KIND else "UnquantizedLinearMethod")
            return self._plain(d, cls, method, why)
        groups = self._ct_targets(d, model)
        method = "CompressedTensorsMoEMethod" if kind == r.ROUTED_EXPERTS else "CompressedTensorsLinearMethod"
        return EngineChoice(d.group_schemes[groups[target]], method, why, cls)

    def ct_target(self, prefix: str, kind: str, model: str = TARGET_MODEL) -> tuple[str | None, str]:
        """The ``target_scheme_map`` key vLLM picks for a layer (None: unquantized), and why.

        compressed_tensors.py ``get_scheme_dict``: ``should_ignore_layer`` then
        ``find_matched_target``: exact / ``re:`` on the prefix, then all shards of
        a fused layer (the model's ``packed_modules_mapping``), then the module's
        class name by *substring* (``Linear`` is in ``ColumnParallelLinear``, not
        in ``ParallelLMHead``). RoutedExperts are looked up as
        ``{prefix}.0.{gate,up,down}`` (compressed_tensors_moe.py
        ``get_moe_method``), and ``Linear`` also targets ``RoutedExperts``
        (``_add_fused_moe_to_target_scheme_map``). Raises EngineRaises where vLLM raises ValueError.
        """
        d, _ = self._declared(model)
        if not isinstance(d, CompressedTensorsDeclared):
            raise TypeError(f"ct_target: the {model} model's config is {d.stack}, not compressed-tensors")
        packed = self._packed(model)
        ignore = [self._ct_rename(x.text, model) for x in d.patterns if x.effect == UNQUANTIZED]
        targets = list(self._ct_targets(d, model))
        if kind == r.ROUTED_EXPERTS:
            if "Linear" in targets and "RoutedExperts" not in targets:
                targets.append("RoutedExperts")
            projs = ("w1", "w3", "w2") if self.layout.family == "deepseek_v4" else ("gate_proj", "up_proj", "down_proj")
            names, klass = [f"{prefix}.0.{p}" for p in projs], "RoutedExperts"
        else:
            names = [prefix]
            klass = "ParallelLMHead" if kind == r.HEAD_KIND else "ColumnParallelLinear"
        found = [_ct_pick(n, klass, ignore, targets, packed) for n in names]
        if len({f[0] for f in found}) > 1:
            raise EngineRaises("All MoE projections need to have same quantization scheme but found multiple")
        pick, how = found[-1]
        added_alias = pick == "RoutedExperts" and "RoutedExperts" not in self._ct_targets(d, model)
        pick = "Linear" if added_alias else pick  # the alias shares Linear's scheme
        if pick is None:
            return None, f"should_ignore_layer / find_matched_target: no scheme for {names[-1]} (ignore {ignore})"
        return pick, f"find_matched_target: {pick!r} matches {how}"

    def _ct_targets(self, d: CompressedTensorsDeclared, model: str) -> dict[str, str]:
        """``target_scheme_map`` keys (renamed as vLLM renames them) -> config group.
        Later groups overwrite a repeated target; single-``*Attention`` groups are dropped."""
        out: dict[str, str] = {}
        by_group: dict[str, list[str]] = {}
        for x in d.patterns:
            if x.effect == TARGET:
                by_group.setdefault(x.group or "", []).append(x.text)
        for group, texts in by_group.items():
            if len(texts) == 1 and texts[0].endswith("Attention"):
                continue
            for text in texts:
                out[self._ct_rename(text, model)] = group
        return out

    def _ct_rename(self, target: str, model: str) -> str:
        """``CompressedTensorsConfig.apply_vllm_mapper``: dotted layer paths only, never ``re:``."""
        if "." not in target or target.startswith("re:") or not self.v4_mapper_applies(model):
            return target
        return deepseek_v4_rename(target)


def _ct_pick(name: str, klass: str, ignore: list[str], targets: list[str],
             packed: Mapping[str, Sequence[str]]) -> tuple[str | None, str]:
    """One ``get_scheme_dict`` call: the matched target (None: ignored / unmatched) and what it matched."""
    # should_ignore_layer -> find_matching_patterns
    if any(_ct_vllm_match(name, t) for t in ignore):
        return None, name
    proj = name.split(".")[-1]
    if proj in packed:
        shards = [any(_ct_vllm_match(name.replace(proj, sh), t) for t in ignore) for sh in packed[proj]]
        if any(shards) and not all(shards):
            raise EngineRaises(f"Found different quantization schemes for the shards of {name}.")
        if all(shards):
            return None, name
    # find_matched_target
    hit = next((t for t in targets if _ct_vllm_match(name, t)), None)
    if hit is not None:
        return hit, name
    fused = next((k for k in packed if name.endswith(k)), None)
    if fused is not None:
        per_shard = [next((t for t in targets if _ct_vllm_match(name.replace(fused, sh), t)), None)
                     for sh in packed[fused]]
        if all(per_shard):
            return per_shard[0], f"every shard of {name} ({', '.join(packed[fused])})"
    # module class name, check_contains=True
    hit = next((t for t in targets if (regex_match(t[3:], klass) if t.startswith("re:")
                                       else t.lower() in klass.lower())), None)
    return hit, f"class {klass}" if hit else name


def _ct_vllm_match(name: str, target: str) -> bool:
    """config_utils.py ``is_equal_or_regex_match`` (no contains / fnmatch)."""
    if target.startswith("re:"):
        return regex_match(target[3:], name)
    return target == name


def _unquantized_method(kind: str) -> str:
    """vLLM's unquantized method per layer class: embeddings and LM heads
    (VocabParallelEmbedding / ParallelLMHead) get UnquantizedEmbeddingMethod."""
    methods: dict[str, str] = {r.ROUTED_EXPERTS: "UnquantizedFusedMoEMethod",
                               r.EMBEDDING_KIND: "UnquantizedEmbeddingMethod",
                               r.HEAD_KIND: "UnquantizedEmbeddingMethod"}
    return methods.get(kind, "UnquantizedLinearMethod")


def _class_of(d: Declared, model_type: str, platform: str) -> str | None:
    if d.stack == "none" or d.stack == "unknown":
        return None
    if isinstance(d, Fp8Declared):
        on_gpu = platform in ("cuda", "rocm")
        # override_quantization_method of the class the platform registers
        v4_types = DEEPSEEK_V4_TYPES if on_gpu else {"deepseek_v4"}
        if model_type in v4_types or d.quant_method == "deepseek_v4_fp8":
            return V41_CLASS if on_gpu else V4_CLASS
        return f"{_QC}.fp8.Fp8Config"
    if isinstance(d, ModelOptDeclared):
        name = {"NVFP4": "ModelOptNvFp4Config", "W4A16_NVFP4": "ModelOptNvFp4Config", "MXFP8": "ModelOptMxFp8Config",
                "MIXED_PRECISION": "ModelOptMixedPrecisionConfig"}.get(d.quant_algo, "ModelOptFp8Config")
        return f"{_QC}.modelopt.{name}"
    return {
        "compressed-tensors": f"{_QC}.compressed_tensors.compressed_tensors.CompressedTensorsConfig",
        "mxfp4": f"{_QC}.mxfp4.GptOssMxfp4Config",
        "gptq": f"{_QC}.auto_gptq.AutoGPTQConfig",
        "awq": f"{_QC}.auto_awq.AutoAWQConfig",
        "quark": f"{_QC}.quark.quark.QuarkConfig",
        "torchao": f"{_QC}.torchao.TorchAOConfig",
        "inc": f"{_QC}.inc.inc.INCConfig",
    }.get(d.stack)


# Module kinds a plan's quant-config record answers for (norms and others never ask).
_PLANNED_KINDS = frozenset({r.LINEAR, r.HEAD_KIND, r.ROUTED_EXPERTS})

# Model classes whose router is built with the model's quant_config (qwen3_moe.py
# Qwen3MoeSparseMoeBlock, lfm2_moe.py, k2_horizon.py: ``GateLinear(..., quant_config=quant_config)``).
GATE_WITH_QUANT_CONFIG = frozenset({"qwen3_moe", "lfm2_moe", "k2_horizon"})

# quark/quark_moe.py QuarkMoEMethod.get_moe_method_target: the experts method per weight scheme.
_QUARK_MOE = {
    s.INT4_GROUP: "QuarkW4A16Int4MoEMethod", s.FP8_TENSOR: "QuarkW8A8Fp8MoEMethod",
    s.FP8_CHANNEL: "QuarkW8A8Fp8MoEMethod", s.FP8_BLOCK: "QuarkW8A8Fp8MoEMethod",
    s.MXFP4: "QuarkOCP_MX_MoEMethod", s.MXFP8: "QuarkW8A8Mxfp8MoEMethod", s.NVFP4: "QuarkNvfp4MoEMethod",
    s.INT8_TENSOR: "QuarkW8A8Int8MoEMethod", s.INT8_CHANNEL: "QuarkW8A8Int8MoEMethod",
}


__all__ = [
    "ENGINE",
    "MODELS",
    "PLATFORMS",
    "V4_CLASS",
    "V41_CLASS",
    "EngineChoice",
    "EngineRaises",
    "Vllm033",
    "deepseek_v4_rename",
    "modelopt_algo_scheme",
]
