"""What SGLang 0.5.23 builds for a runtime prefix (docs/engines.md "SGLang 0.5.23").

Restated from SGLang's source and checked against what its real code decided on CPU
(plans/sglang-0.5.23/deepseek_v4.json, recorded by engines/sglang/recorder.py). The
prefixes are SGLang's own (layouts/sglang.py: ``model.decoder.*`` for DeepSeek-V4's
NextN layer, ``stages.{k}.*`` for DSpark, ``.mlp.``/``.self_attn.`` for ``.ffn.``/``.attn.``),
so an exclusion is matched where SGLang matches it. Sources (site-packages ``sglang/srt/``):

- quant-config choice: configs/model_config.py ``_parse_quant_hf_config`` (config.json's
  ``quantization_config``, else hf_quant_config.json), ``model_loader/loader.py
  _get_quantization_config`` (``Fp8Config.is_fp4_experts`` from the ModelConfig; a
  ``MIXED_PRECISION`` + ``moe_quant_algo: NVFP4`` config becomes ``HybridFp8NvFp4Config``
  whose NVFP4 half excludes ``ignore`` + ``model.decoder.*`` + ``stages.*``).
- the draft: ``arg_groups/serving_hook.py`` / ``ModelConfig.from_server_args``: the draft
  ModelConfig reads the same config.json (NextN/DSpark drafts live in the target's
  checkpoint) and takes ``--speculative-draft-model-quantization`` if given, else the
  target's ``--quantization`` (unset: config.json decides); ``unquant`` means none.
  ``is_fp4_experts`` is one answer for target and draft (the header probe).
- DeepSeek-V4 routed experts: ``is_fp4_experts`` from ``routed_experts_quant_method``, else
  configs/deepseek_v4.py ``try_detect_fp4_experts``: the dtype of the first routed-expert
  weight in the index's order (U8/I8/F4: MXFP4; F8_E4M3: FP8); fp8.py ``Fp8Config``:
  ``is_layer_skipped`` -> unquantized, else MXFP4 when ``is_fp4_experts``, else FP8 block.
- linears: fp8.py ``Fp8Config.get_quant_method`` (``is_layer_skipped`` on ``ignored_layers``
  kept with and without ``model.``; no globs); modelopt_quant.py ``_get_quant_method``
  (``is_layer_skipped`` or ``is_layer_excluded``, globbed, part by part).
- built without the quant config: the MoE router (deepseek_v2.py ``MoEGate``, not a
  LinearBase), DeepSeek-V4's ``compressor`` (``expert_pack_quant_config``, None for these
  stacks), DeepSeek-V3 NextN's ``eh_proj`` (deepseek_nextn.py: a plain ``nn.Linear`` but
  under Quark). A NextN draft's embedding and head are the target's
  (speculative/eagle_worker_v2.py ``set_embed_and_head``): not built from the draft's bytes.
  DSpark's ``confidence_head.proj`` and ``markov_head.markov_w{1,2}`` (dspark.py
  ``DSparkConfidenceHead``, ``DSparkMarkovHead``) are plain ``nn.Linear``/``nn.Embedding``.
- DeepSeek-V4 ``wo_a`` (deepseek_v4.py ``wo_a_fp8_gemm_enabled``): FP8 through its own GEMM
  under ``Fp8Config`` with 128x128 blocks, "any other layout dequantizes wo_a to bf16 at load".

- GLM-4-MoE NextN (models/glm4_moe_nextn.py ``Glm4MoeModelNextN``) and DeepSeek-V3 NextN
  (models/deepseek_nextn.py ``DeepseekModelNextN``): under a ``modelopt_fp4``
  quant config the draft is built with ``quant_config=None`` (BF16) whatever it stores (DeepSeek-V3:
  recorded, the draft model built and loaded: deepseek_v4.json ``s8-nvfp4`` ``model``). Its loader
  (deepseek_common/deepseek_weight_loader.py ``do_load_weights``) then finds no parameter for a
  stored scale of a fused ``gate_up_proj`` (``params_dict[name]``: KeyError, the server stops);
  other scales are skipped with a warning;
  ``eh_proj`` is a plain ``nn.Linear``; the router (glm4_moe.py ``Glm4MoeGate``) an
  ``nn.Module`` with its own F32 parameter.

- gpt-oss (models/gpt_oss.py): only the experts get the quant config; layers/quantization/mxfp4.py
  ``Mxfp4Config`` (``ignored_layers`` never read from the config) builds them Mxfp4MoEMethod.
- compressed-tensors (layers/quantization/compressed_tensors/): ``ignore`` and ``targets`` matched
  on SGLang's prefixes (patterns.py ``ct_*``), a routed-experts layer by expert 0's projections.
- DSpark (models/deepseek_v4_dspark.py ``DeepseekV4ForCausalLMDSpark``): ``len(dspark_target_layer_ids)``
  stages (else ``num_nextn_predict_layers``); a stored stage past them maps to ``stages.{k}``, which
  ``load_weights`` drops ("unexpected weight"): not built. ``markov_rank`` (``dspark_markov_rank``, ...)
  not > 0: a ValueError before any stage (and spec_aux_hidden_state.py raises it first). Recorded:
  dspark_config.py ``parse_dspark_draft_config`` (deepseek_v4.json ``dspark``).
- Qwen3.5 MTP (models/qwen3_5_mtp.py ``Qwen3_5ForCausalLMMTP``): ``_mtp_quant_config`` keeps
  ``Fp8Config`` and drops a serialized ``modelopt_fp4`` config (recorded in qwen3_5.json); ``fc`` is a
  plain ``nn.Linear``; qwen2_moe.py ``shared_expert_gate`` a ``torch.nn.Linear`` on CUDA; qwen3_5.py
  ``conv1d`` has ``quant_config=None``; the model's ``packed_modules_mapping`` reaches the quant config.

Families modelled: DeepSeek-V4 (NextN and DSpark), DeepSeek-V3 NextN, GLM-4-MoE NextN and Qwen3.5 MTP,
under no quantization, ``fp8`` (Fp8Config, HybridFp8NvFp4Config) and ModelOpt NVFP4
(ModelOptFp4Config); compressed-tensors for DeepSeek-V4, GLM-4-MoE and Qwen3.5; gpt-oss unquantized or
under ``mxfp4`` (plans/sglang-0.5.23/gpt_oss.json, compressed_tensors.json). Anything else
routes ``unknown`` (no recorded SGLang fact), never ok.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from specguard.declared.compressed_tensors import weights_scheme
from specguard.engines import NOT_MODELLED, EngineChoice, Refusal
from specguard.engines.sglang import patterns as p
from specguard.formats import scheme as s
from specguard.formats.scheme import Scheme
from specguard.formats.table import Module
from specguard.layouts import Layout, layout_for
from specguard.layouts import roles as r
from specguard.layouts.base import SGLANG
from specguard.layouts.registry import (
    DEEPSEEK_V3_TYPES,
    DEEPSEEK_V4_TYPES,
    GLM4_MOE_TYPES,
    SGLANG_QWEN3_5_TYPES,
    draft_kind_for,
    is_deepseek_v41,
    text_config,
)
from specguard.layouts.sglang import EAGLE3_ARCHS, SglangEagle3Layout, SglangQwen3_5Layout

ENGINE = "SGLang 0.5.23"
GPT_OSS_TYPE = "gpt_oss"
PLAN_ENGINE = "sglang-0.5.23"
_QC = "sglang.srt.layers.quantization"
FP8_CLASS, HYBRID_CLASS = f"{_QC}.fp8.Fp8Config", f"{_QC}.modelopt_quant.HybridFp8NvFp4Config"
MODELOPT_FP4_CLASS = f"{_QC}.modelopt_quant.ModelOptFp4Config"
MXFP4_CLASS = f"{_QC}.mxfp4.Mxfp4Config"
CT_CLASS = f"{_QC}.compressed_tensors.compressed_tensors.CompressedTensorsConfig"
GPT_OSS_MXFP4 = Scheme(s.MXFP4, s.GPT_OSS, group_size=32, scale_dtype="U8", weight_dtype="U8")
NVFP4 = Scheme(s.NVFP4, s.MODELOPT, group_size=16, scale_dtype="F8_E4M3", weight_dtype="U8")
MXFP4 = Scheme(s.MXFP4, s.DEEPSEEK, group_size=32, scale_dtype="F8_E8M0")
# model_loader/weight_utils.py ``_ROUTED_EXPERT_KEY_RE``
_ROUTED_EXPERT_KEY = re.compile(r"\.experts\.\d+\.(?:w[123]|down_proj|up_proj|gate_proj)\.weight$")
# QuantizationConfig.get_name() of each class: a --speculative-draft-model-quantization naming the
# checkpoint's own method builds the same class
_NAMES = {FP8_CLASS: "fp8", HYBRID_CLASS: "fp8", MODELOPT_FP4_CLASS: "modelopt_fp4", MXFP4_CLASS: "mxfp4",
          CT_CLASS: "compressed-tensors"}
_NO_QUANT_CONFIG = (".mlp.gate", ".self_attn.compressor")  # MoEGate; compressor (expert_pack only)
# Qwen3.5 (qwen3_5.py ``Qwen3_5ForCausalLM.packed_modules_mapping``, which the loader hands the
# quant config): a fused layer is skipped when every shard is listed (utils.py is_layer_skipped)
QWEN3_5_PACKED = {"qkv_proj": ("q_proj", "k_proj", "v_proj"), "gate_up_proj": ("gate_proj", "up_proj"),
                  "in_proj_qkvz": ("in_proj_qkv", "in_proj_z"), "in_proj_ba": ("in_proj_b", "in_proj_a")}
# Qwen3.5 layers built without the quant config: qwen2_moe.py ``shared_expert_gate`` (torch.nn.Linear
# on CUDA), qwen3_5.py GatedDeltaNet ``conv1d`` (quant_config=None); qwen3_5_mtp.py ``fc`` is below
_QWEN3_5_NO_QUANT_CONFIG = (".mlp.shared_expert_gate", ".linear_attn.conv1d")


class Sglang0523:
    """SGLang 0.5.23's routing for one checkpoint and the draft it serves from it."""

    name = ENGINE
    plan_engine = PLAN_ENGINE
    platforms = ("cuda",)  # modelled as the recorder ran it: an SM100 CUDA machine (override_platform)

    def __init__(self, config: Mapping[str, Any], hf_quant_config: Mapping[str, Any] | None = None, *,
                 platform: str = "cuda", draft_method: str | None = None,
                 draft_config: Mapping[str, Any] | None = None,
                 draft_hf_quant_config: Mapping[str, Any] | None = None,
                 tensor_dtypes: Mapping[str, str] | None = None,
                 draft_quantization: str | None = None) -> None:
        """``draft_quantization``: ``--speculative-draft-model-quantization`` (None: the draft's
        config.json decides; ``unquant``: no quant config for the draft)."""
        alone = draft_config is None and str((config.get("architectures") or [""])[0]) in EAGLE3_ARCHS
        if alone:  # an EAGLE-3 head inspected alone: what its own ModelConfig gives it, as beside a target
            draft_config, draft_hf_quant_config = config, hf_quant_config
        self.config = config
        self.text = text_config(config)
        self.platform = platform
        # the target's own layout: served beside a separate drafter (EAGLE) it drafts nothing itself
        separate = draft_config is not None or draft_kind_for(draft_method) == r.EAGLE
        self.layout: Layout = layout_for(config, draft_method=None if separate or alone else draft_method,
                                         engine=SGLANG)
        # a separate drafter (--speculative-draft-model-path): its own ModelConfig reads its own
        # config.json (model_config.py from_server_args), so its quant config is the drafter's
        own, own_hf = (config, hf_quant_config) if draft_config is None else (draft_config, draft_hf_quant_config)
        if draft_config is not None:
            self.layout = layout_for(draft_config, target_config=None if alone else config, engine=SGLANG)
            self.text = text_config(draft_config)
        self.model_type = str(self.text.get("model_type") or own.get("model_type") or "")
        self.draft_quantization = draft_quantization
        quant = own.get("quantization_config") or self.text.get("quantization_config")
        self.nested = not isinstance(quant, Mapping)
        self.quant: Mapping[str, Any] = quant if isinstance(quant, Mapping) else (own_hf or {})
        self.quant_class = self._quant_class()
        self.is_fp4_experts = self._fp4_experts(tensor_dtypes)
        # configs/deepseek_v41.py: DeepseekV41ForCausalLM is built as DeepseekV4ForCausalLM (recorded),
        # its model_type deepseek_v41 switching V4.1-only modules on (deepseek_v4.py ``is_dsv41``)
        self.v41 = self.model_type in DEEPSEEK_V4_TYPES and is_deepseek_v41(own)
        self._why_unknown = self._unmodelled(draft_config)

    # -- which quant config --------------------------------------------------

    def _quant_class(self) -> str | None:
        """The quant-config class ``_get_quantization_config`` builds (None: no quantization;
        ``"?<method>"``: a method this model does not restate)."""
        q = self.quant
        if not q:
            return None
        method = str(q.get("quant_method") or "").lower()
        algo = str(q.get("quant_algo") or (q.get("quantization") or {}).get("quant_algo") or "").upper()
        if method == "fp8":
            hybrid = (algo == "MIXED_PRECISION" and str(q.get("moe_quant_algo") or "").upper() == "NVFP4"
                      and q.get("group_size") is not None)
            return HYBRID_CLASS if hybrid else FP8_CLASS
        if (method in ("modelopt", "") or self.nested) and "NVFP4" in algo:
            return MODELOPT_FP4_CLASS
        if method == "mxfp4":
            return MXFP4_CLASS
        if method in ("compressed-tensors", "compressed_tensors"):
            return CT_CLASS
        return f"?{method or algo or 'unknown'}"

    def _fp4_experts(self, dtypes: Mapping[str, str] | None) -> bool:
        """configs/model_config.py: ``routed_experts_quant_method == "mxfp4"``; for DeepSeek-V4
        without it, the header probe of the first routed-expert weight (default True:
        ``SGLANG_DSV4_FP4_EXPERTS``)."""
        method = self.quant.get("routed_experts_quant_method")
        if method is not None or self.model_type not in DEEPSEEK_V4_TYPES:
            return method == "mxfp4"
        first = next((n for n in dtypes or {} if _ROUTED_EXPERT_KEY.search(n)), None)
        dtype = dtypes[first] if first is not None and dtypes is not None else None
        return dtype != "F8_E4M3"  # U8/I8/F4: MXFP4; any other or none: the default, True

    def _unmodelled(self, draft_config: Mapping[str, Any] | None) -> str | None:
        """Why no SGLang fact covers this checkpoint (None: the model below answers)."""
        arch = str((self.config.get("architectures") or ["?"])[0])
        if draft_config is not None:
            drafter = str((draft_config.get("architectures") or ["?"])[0])
            if drafter not in EAGLE3_ARCHS:
                return (f"a separate {drafter} drafter checkpoint under {ENGINE} is not modelled "
                        f"(docs/engines.md: {', '.join(EAGLE3_ARCHS)} only)")
            if self.quant_class is not None and self.quant_class.startswith("?"):
                return f"{ENGINE}'s {self.quant_class[1:]} quant config is not modelled (docs/engines.md)"
            return None
        if self.model_type not in (DEEPSEEK_V4_TYPES | DEEPSEEK_V3_TYPES | GLM4_MOE_TYPES | SGLANG_QWEN3_5_TYPES
                                   | {GPT_OSS_TYPE}):
            return (f"no {ENGINE} fact is recorded for {arch} (docs/engines.md: DeepSeek-V4/V4.1, -V3, "
                    "GLM-4-MoE, Qwen3.5, gpt-oss only)")
        if self.quant_class is not None and self.quant_class.startswith("?"):
            return f"{ENGINE}'s {self.quant_class[1:]} quant config is not modelled (docs/engines.md)"
        return self._unmodelled_pair(arch)

    def _unmodelled_pair(self, arch: str) -> str | None:
        """Architecture x quant stack pairs with no recorded SGLang fact (docs/engines.md)."""
        gpt_oss = self.model_type == GPT_OSS_TYPE
        if gpt_oss and self.quant_class not in (None, MXFP4_CLASS):
            return (f"{ENGINE}'s gpt-oss under {self.quant_class.rsplit('.', 1)[-1]} is not modelled "
                    "(docs/engines.md: gpt-oss under mxfp4 or unquantized only)")
        if self.quant_class == MXFP4_CLASS and not gpt_oss:
            return f"{ENGINE}'s Mxfp4Config for {arch} is not modelled (docs/engines.md: gpt-oss only)"
        if self.quant_class == CT_CLASS and self.model_type not in _CT_RECORDED:
            return (f"{ENGINE}'s compressed-tensors for {arch} is not recorded (docs/engines.md: DeepSeek-V4, "
                    "GLM-4-MoE, Qwen3.5)")
        return None

    @property
    def is_qwen3_5(self) -> bool:
        """Qwen3.5/3.6/3.8 with its MTP (SGLang's own layout; Qwen3-Next shares vLLM's layout family
        but not these rules: it stays unknown)."""
        return isinstance(self.layout, SglangQwen3_5Layout)

    # -- the EngineModel protocol -------------------------------------------------

    def plain_draft_fix(self, stored: str) -> str | None:
        """SG204's fix where SGLang builds the draft without a quant config whatever the config
        declares (None: the config decides, its usual fix applies)."""
        if self.draft_quantization == "unquant" and self.quant_class is not None:
            return ("launch SGLang without --speculative-draft-model-quantization unquant (the draft then "
                    "takes the checkpoint's quant config), or store them unquantized")
        if self._draft_quant() is None and self.quant_class is not None:
            return (f"store them unquantized (dequantize the {stored} weights to BF16): {ENGINE} builds this "
                    f"draft without a quant config whatever the config declares ({self._drop_source()})")
        return None

    def unmodelled(self) -> str | None:
        """Why this model restates nothing of SGLang's build for the checkpoint (None: it does)."""
        return self._why_unknown

    def v41_ignore_name(self, prefix: str, num_hidden_layers: int) -> str | None:
        return None  # SGLang has no DeepSeek-V4.1 ``ignore`` reading of vLLM's kind

    def exclusion_rename(self, pattern: str, *, v41: bool = False) -> str:
        return pattern  # matched as written (Fp8Config also tries it with and without ``model.``)

    def ignored_layers_entries(self, prefix: str) -> list[str]:
        """The ``ignored_layers`` entries that make Fp8Config skip ``prefix`` (repair/strategies/
        exclude.py): the shards of a fused layer, as utils.py ``is_layer_skipped`` matches them."""
        return p.skipping_entries(prefix)

    def gptq_dynamic_fix(self, dynamic: dict, prefixes: list[str], quantized: Sequence[str] = ()) -> dict | None:
        return None  # GPTQ under SGLang is not modelled

    def refusals(self, modules: Mapping[str, Module]) -> list[Refusal]:
        """Where SGLang stops (recorded, deepseek_v4.json): a DSpark draft without a Markov head, and a
        DeepSeek-V3 NextN draft built without its quant config over stored scales of a fused layer.
        Other start-up refusals are not modelled; unmodelled stacks route unknown."""
        if self._why_unknown is not None:
            return []
        return [*self._dspark_refusals(modules), *self._nextn_scale_refusals(modules)]

    def _draft_modules(self, modules: Mapping[str, Module]) -> list[tuple[str, str, Module]]:
        """(checkpoint name, SGLang runtime prefix, module) of every stored draft module."""
        out = []
        for name, mod in modules.items():
            prefix = next(iter(self.layout.runtime_prefixes(name)), None)
            if prefix is not None and self.layout.role(prefix).is_draft:
                out.append((name, prefix, mod))
        return out

    def dspark_stages(self) -> int | None:
        """The DSpark stages SGLang builds (deepseek_v4_dspark.py ``__init__``: one per
        ``dspark_target_layer_ids`` entry, else ``num_nextn_predict_layers``); None: no DSpark draft."""
        if getattr(self.layout, "draft_kind", None) != r.DSPARK:
            return None
        ids = self.text.get("dspark_target_layer_ids")
        return len(ids) if isinstance(ids, list) and ids else int(self.text.get("num_nextn_predict_layers") or 1)

    def _dspark_refusals(self, modules: Mapping[str, Module]) -> list[Refusal]:
        if self.dspark_stages() is None:
            return []
        # dspark_config.py parse_dspark_draft_config: dspark_markov_rank, else the nested
        # dflash_config/dspark_config's, else markov_rank (recorded: deepseek_v4.json ``dspark``)
        nested = {**(self.text.get("dflash_config") or {}), **(self.text.get("dspark_config") or {})}
        rank = next((v for v in (self.text.get("dspark_markov_rank"), nested.get("markov_rank"),
                                 self.text.get("markov_rank")) if v is not None), 0)
        if int(rank) > 0:
            return []
        names = tuple(name for name, _, _ in self._draft_modules(modules))
        return [Refusal("start-up", f"ValueError: DSpark V4 draft requires markov_rank > 0, got markov_rank={rank}",
                        "its DSpark draft declares no Markov head (dspark_markov_rank), which SGLang's DSpark "
                        "requires (deepseek_v4_dspark.py; spec_aux_hidden_state.py raises it first)", names)]

    def _nextn_scale_refusals(self, modules: Mapping[str, Module]) -> list[Refusal]:
        if self.layout.family != "deepseek_v3" or self.quant_class is None or self._draft_quant() is not None:
            return []
        draft = self._draft_modules(modules)
        for _, prefix, mod in draft:
            scales = sorted(p for p in mod.params if p and p not in ("weight", "bias"))
            if prefix.endswith(".gate_up_proj") and ".experts." not in f"{prefix}." and scales:
                shards = tuple(n for n, pre, _ in draft if pre == prefix)
                return [Refusal("weight loading", f"KeyError: '{prefix}.{scales[0]}'",
                                f"its NextN draft has no quant config{self._why_none()}, "
                                f"so the stored {mod.scheme.format} scales of the fused {prefix.rsplit('.', 1)[-1]} "
                                "have no parameter (deepseek_weight_loader.py do_load_weights)", shards)]
        return []

    def fused_shards(self, prefix: str, model: str | None = None) -> tuple[str, ...]:
        proj = prefix.rsplit(".", 1)[-1]
        if self.is_qwen3_5:
            return tuple(prefix.rsplit(".", 1)[0] + "." + sh for sh in QWEN3_5_PACKED.get(proj, ()))
        shards = {"gate_up_proj": ("gate_proj", "up_proj"), "wqkv_a": ("wq_a", "wkv")}.get(proj, ())
        return tuple(prefix.replace(proj, sh) for sh in shards)

    def built_without_quant_config(self, prefix: str, kind: str) -> bool:
        if prefix.endswith(_NO_QUANT_CONFIG) or ".self_attn.compressor." in prefix:
            return True
        if prefix.endswith(".self_attn.indexer.weights_proj") and not self.v41:
            # layers/attention/dsv4/indexer.py C4Indexer: quant_config only when it is expert_pack
            return True
        if prefix.startswith(("confidence_head.", "markov_head.")):
            return True  # dspark.py DSparkConfidenceHead.proj, DSparkMarkovHead: plain nn.Linear/nn.Embedding
        if self.layout.family == "gpt_oss":
            # gpt_oss.py: GptOssAttention gets no quant_config (GptOssDecoderLayer does not pass it), the
            # router is a TinyGemmLinear(quant_config=None), lm_head's quant_config is commented out, the
            # embedding takes none: only the experts (GptOssSparseMoeBlock) see the quant config
            return kind != r.ROUTED_EXPERTS
        if self.layout.family == "glm4_moe":
            return prefix == "model.eh_proj"  # glm4_moe_nextn.py: a plain nn.Linear
        if self.layout.family == SglangEagle3Layout.family:
            return prefix == "model.fc"  # llama_eagle3.py: a plain torch.nn.Linear
        if self.is_qwen3_5:  # qwen3_5_mtp.py: ``self.fc = nn.Linear(...)``
            return prefix == "mtp.fc" or prefix.endswith(_QWEN3_5_NO_QUANT_CONFIG)
        # deepseek_nextn.py: eh_proj is a plain nn.Linear unless the quant config is Quark's
        return self.layout.family == "deepseek_v3" and prefix == "model.eh_proj" and not self._draft_quant_is("quark")

    def not_built(self, prefix: str, model: str | None = None) -> EngineChoice | None:
        role = self.layout.role(prefix)
        stages = self.dspark_stages()
        if stages is not None and role.is_draft and prefix.startswith("stages.") and (role.draft_index or 0) >= stages:
            why = (f"SGLang builds {stages} DSpark stage(s), one per dspark_target_layer_ids entry "
                   "(deepseek_v4_dspark.py); load_weights drops this stage's tensors (\"unexpected weight\")")
            return EngineChoice(Scheme(s.UNKNOWN, reason=why), "not built", why, self._class_for(True))
        if role.is_draft and role.draft_kind == r.MTP and prefix in ("model.shared_head.head", "model.embed_tokens"):
            why = "the NextN draft serves the target's embedding and head (speculative/eagle_worker_v2.py " \
                  "set_embed_and_head)"
            return EngineChoice(Scheme(s.UNKNOWN, reason=why), "not built", why, self._class_for(role.is_draft))
        return None

    def builds(self, runtime_prefix: str, *, kind: str, model: str | None = None) -> EngineChoice:
        draft = self.layout.role(runtime_prefix).is_draft
        cls = self._class_for(draft)
        if self._why_unknown is not None and kind not in (r.NORM, r.OTHER):
            return EngineChoice(Scheme(s.UNKNOWN, reason=self._why_unknown), NOT_MODELLED, self._why_unknown, cls)
        if kind in (r.NORM, r.OTHER):
            return self._plain(cls, "Parameter", "not a quantizable layer")
        if self.v41 and (prefix_v41 := _v41_only(runtime_prefix)) is not None:
            why = (f"{ENGINE} serves DeepSeek-V4.1 through its V4 classes (recorded), but its V4.1-only "
                   f"{prefix_v41} is not modelled (docs/engines.md)")
            return EngineChoice(Scheme(s.UNKNOWN, reason=why), NOT_MODELLED, why, cls)
        if cls is not None and cls.startswith("?"):
            why = f"the draft's quantization {cls[1:]!r} (--speculative-draft-model-quantization) is not modelled"
            return EngineChoice(Scheme(s.UNKNOWN, reason=why), NOT_MODELLED, why, cls)
        if self.built_without_quant_config(runtime_prefix, kind):
            return self._plain(cls, _unquantized(kind), "the model builds this layer without the quant config")
        if cls is None:
            return self._plain(None, _unquantized(kind), "no quant config" + (self._no_draft_quant() if draft else ""))
        try:
            if cls == MXFP4_CLASS:
                return self._mxfp4(runtime_prefix, kind, cls)
            if cls == CT_CLASS:
                return self._compressed_tensors(runtime_prefix, kind, cls)
            if cls == MODELOPT_FP4_CLASS:
                return self._modelopt(runtime_prefix, kind, cls)
            return self._fp8(runtime_prefix, kind, cls)
        except p.ShardsDisagree as exc:
            return EngineChoice(Scheme(s.UNKNOWN, reason=str(exc)), "ValueError", f"is_layer_skipped raises: {exc}",
                                cls)

    # -- the lists, as SGLang's quant config holds them -------------------------------

    def fp8_ignored(self) -> list[str]:
        """Fp8Config's ``ignored_layers`` (both ``model.`` spellings)."""
        return p.fp8_ignored_layers(self.quant) if self.quant_class in (FP8_CLASS, HYBRID_CLASS) else []

    def nvfp4_excludes(self) -> list[str] | None:
        """The NVFP4 config's ``exclude_modules`` (None: no NVFP4 config): ModelOptFp4Config's from
        its config, the hybrid's ``ignore`` plus the NextN and DSpark draft prefixes."""
        if self.quant_class == HYBRID_CLASS:
            return [*(str(x) for x in self.quant.get("ignore") or []), *p.HYBRID_DRAFT_EXCLUDES]
        if self.quant_class == MODELOPT_FP4_CLASS:
            return p.modelopt_excludes(self.quant, self.nested)
        return None

    def matching(self, prefix: str) -> dict[str, bool | str | None]:
        """What SGLang's matching answers for ``prefix``, keyed as the recorder records it
        (engines/sglang/recorder.py ``_prefix_facts``)."""
        out: dict[str, bool | str | None] = {}
        calls = {}
        if self.quant_class in (FP8_CLASS, HYBRID_CLASS):
            calls["fp8_skipped"] = lambda: p.is_layer_skipped(prefix, self.fp8_ignored(), self.packed())
        excludes = self.nvfp4_excludes()
        if excludes is not None:
            calls["nvfp4_excluded"] = lambda: p.is_layer_excluded(prefix, excludes)
            calls["nvfp4_skipped"] = lambda: p.is_layer_skipped(prefix, excludes, self.packed())
        for key, call in calls.items():
            try:
                out[key] = call()
            except p.ShardsDisagree:
                out[key] = "raises"
        if self.quant_class == CT_CLASS:
            out.update(self._ct_matching(prefix))
        elif self.quant_class == MXFP4_CLASS:
            out["mxfp4_linear"] = None  # Mxfp4Config.from_config sets no ignored_layers: None on CUDA
        return out

    def packed(self) -> Mapping[str, Sequence[str]]:
        """The model class's ``packed_modules_mapping`` as the loader hands it to the quant config
        ({}: SGLang falls back to ``_FALLBACK_FUSED_SHARDS``; only Qwen3.5's is restated)."""
        return QWEN3_5_PACKED if self.is_qwen3_5 else {}

    # -- per stack ------------------------------------------------------------------

    def _class_for(self, draft: bool) -> str | None:
        return self._draft_quant() if draft else self.quant_class

    def _draft_quant(self) -> str | None:
        if self.draft_quantization == "unquant":
            return None
        cls = self.quant_class
        if self.draft_quantization is not None and self.draft_quantization != _NAMES.get(cls or ""):
            # another method than the checkpoint's: ModelConfig._verify_quantization converts or refuses
            return f"?{self.draft_quantization}"
        if self.layout.family in ("glm4_moe", "deepseek_v3") and cls == MODELOPT_FP4_CLASS:
            # glm4_moe_nextn.py / deepseek_nextn.py: "Overriding ... quant config for modelopt_fp4": None
            return None
        if self.is_qwen3_5 and cls == MODELOPT_FP4_CLASS:
            return None  # qwen3_5_mtp.py _mtp_quant_config: a serialized modelopt_fp4 checkpoint: None
        return cls

    def _no_draft_quant(self) -> str:
        why = self._why_none()
        return f" for the draft{why}" if why else ""

    def _why_none(self) -> str:
        """Why the draft has no quant config, as a trailing clause (findings wrap it in parentheses)."""
        if self.draft_quantization == "unquant":
            return ", as --speculative-draft-model-quantization unquant asks"
        if self.quant_class is not None:
            return f", dropped by {self._drop_source()} under modelopt_fp4"
        return ""

    def _drop_source(self) -> str:
        """Where SGLang drops the draft's quant config under modelopt_fp4."""
        if self.is_qwen3_5:
            return "qwen3_5_mtp.py _mtp_quant_config"
        return "deepseek_nextn.py" if self.layout.family == "deepseek_v3" else "glm4_moe_nextn.py"

    def _draft_quant_is(self, name: str) -> bool:
        return str(self.quant.get("quant_method") or "").lower() == name

    def _plain(self, cls: str | None, method: str, why: str) -> EngineChoice:
        return EngineChoice(Scheme(s.BF16, s.PLAIN), method, why, cls)

    def _fp8(self, prefix: str, kind: str, cls: str) -> EngineChoice:
        if kind in (r.EMBEDDING_KIND, r.HEAD_KIND):
            return self._plain(cls, "None", "fp8.py Fp8Config.get_quant_method: not a LinearBase/FusedMoE")
        ignored = self.fp8_ignored()
        skipped = p.is_layer_skipped(prefix, ignored, self.packed())
        lists = f"ignored_layers as SGLang holds them: {_shown(ignored)}"
        if kind == r.ROUTED_EXPERTS:
            return self._fp8_experts(prefix, cls, skipped, lists)
        if skipped:
            return self._plain(cls, "UnquantizedLinearMethod", f"fp8.py is_layer_skipped; {lists}")
        block = self.quant.get("weight_block_size")
        scheme = self._fp8_linear(block)
        if prefix.endswith(".self_attn.wo_a") and list(block or ()) != [128, 128]:
            return EngineChoice(scheme, "dequantized to BF16 at load",
                                "deepseek_v4.py wo_a_fp8_gemm_enabled: not 128x128 blocks", cls)
        return EngineChoice(scheme, "Fp8LinearMethod", f"fp8.py Fp8Config: linear, not skipped ({lists})", cls)

    def _fp8_experts(self, prefix: str, cls: str, skipped: bool, lists: str) -> EngineChoice:
        if cls == HYBRID_CLASS:
            exclude = self.nvfp4_excludes() or []
            if not p.is_layer_excluded(prefix, exclude):
                return EngineChoice(NVFP4, "ModelOptNvFp4FusedMoEMethod",
                                    f"HybridFp8NvFp4Config: {prefix} matches no NVFP4 exclusion {exclude}", cls)
            lists = f"NVFP4 half excludes it ({exclude}); falls back to Fp8Config"
        elif skipped:
            return self._plain(cls, "UnquantizedFusedMoEMethod", f"fp8.py is_layer_skipped; {lists}")
        if self.is_fp4_experts:
            return EngineChoice(MXFP4, "Mxfp4FlashinferTrtllmMoEMethod",
                                f"Fp8Config.is_fp4_experts (one answer for every layer, target and draft); {lists}",
                                cls)
        return EngineChoice(self._fp8_linear(self.quant.get("weight_block_size")), "Fp8MoEMethod",
                            f"Fp8Config, is_fp4_experts false; {lists}", cls)

    def _fp8_linear(self, block: Any) -> Scheme:
        e8m0 = str(self.quant.get("scale_fmt") or "") == "ue8m0" or (
            self.model_type in DEEPSEEK_V4_TYPES and self.is_fp4_experts)
        if not block:
            return Scheme(s.FP8_TENSOR, scale_dtype="F32", weight_dtype="F8_E4M3")
        return Scheme(s.FP8_BLOCK, s.DEEPSEEK, block=tuple(block), scale_dtype="F8_E8M0" if e8m0 else "F32",
                      weight_dtype="F8_E4M3")

    def _modelopt(self, prefix: str, kind: str, cls: str) -> EngineChoice:
        exclude = self.nvfp4_excludes() or []
        if kind == r.EMBEDDING_KIND:
            return self._plain(cls, "None", "modelopt_quant.py _get_quant_method: no method for embeddings")
        if kind == r.ROUTED_EXPERTS:
            if p.is_layer_excluded(prefix, exclude):
                return self._plain(cls, "None", f"modelopt_quant.py is_layer_excluded: {exclude}")
            return EngineChoice(NVFP4, "ModelOptNvFp4FusedMoEMethod", f"ModelOptFp4Config; excludes {exclude}", cls)
        if p.is_layer_skipped(prefix, exclude, self.packed()) or p.is_layer_excluded(prefix, exclude):
            return self._plain(cls, "UnquantizedLinearMethod", f"modelopt_quant.py is_layer_excluded: {exclude}")
        return EngineChoice(NVFP4, "ModelOptFp4LinearMethod", f"ModelOptFp4Config: {prefix} matches no "
                            f"exclusion {exclude}", cls)


    # -- gpt-oss: Mxfp4Config (layers/quantization/mxfp4.py) --------------------------------

    def _mxfp4(self, prefix: str, kind: str, cls: str) -> EngineChoice:
        """Mxfp4Config.get_quant_method: a FusedMoE gets Mxfp4MoEMethod (``is_checkpoint_mxfp4_serialized``:
        ``"mxfp4" in quant_method``, true whenever this class is chosen); ``ignored_layers`` is never
        set (``from_config`` does not read ``modules_to_not_convert``), so a linear gets None. gpt-oss
        hands the config to its experts only (``built_without_quant_config``)."""
        if kind == r.ROUTED_EXPERTS:
            return EngineChoice(GPT_OSS_MXFP4, "Mxfp4MoEMethod", "mxfp4.py Mxfp4Config: FusedMoE, checkpoint "
                                "mxfp4-serialized (gpt_oss.py _load_mxfp4_experts_weights reads *_blocks/*_scales)",
                                cls)
        why = f"{ENGINE}'s Mxfp4Config for a {kind} layer outside gpt-oss is not modelled"
        return EngineChoice(Scheme(s.UNKNOWN, reason=why), NOT_MODELLED, why, cls)

    # -- compressed-tensors (layers/quantization/compressed_tensors/compressed_tensors.py) ----

    def _ct_groups(self) -> dict[str, Mapping[str, Any]]:
        """``target_scheme_map``: target -> its config group, in config order (a target a later group
        names again takes that group's scheme at its first position, as a dict assignment does)."""
        out: dict[str, Mapping[str, Any]] = {}
        for group in (self.quant.get("config_groups") or {}).values():
            if isinstance(group, Mapping):
                for target in group.get("targets") or ():
                    out[str(target)] = group
        return out

    def _ct_ignore(self) -> list[str]:
        return [str(x) for x in self.quant.get("ignore") or []]

    def _ct_fused(self) -> Mapping[str, Sequence[str]]:
        """``packed_modules_mapping``: the model class's, which model_loader/weight_utils.py
        ``get_quant_config`` writes over the config's; none for the DeepSeek-V4 and GLM-4-MoE
        classes (recorded)."""
        return self.packed()

    def _ct_scheme_dict(self, name: str, class_name: str) -> Mapping[str, Any] | None:
        """``get_scheme_dict``: None when ignored, else the matched target's group (ValueError from
        SGLang, raised here as ShardsDisagree/LookupError, where it finds none)."""
        if p.ct_should_ignore(name, self._ct_ignore(), self._ct_fused()):
            return None
        groups = self._ct_groups()
        targets = p.ct_targets(list(groups)) if class_name in p.CT_MOE_CLASSES else list(groups)
        target = p.ct_find_target(name, class_name, targets, self._ct_fused())
        if target is None:
            raise LookupError(f"Unable to find matching target for {name} in the compressed-tensors config")
        return groups.get(target) or groups["Linear"]  # FusedMoE/DeepEPMoE stand for Linear's group

    def _ct_matching(self, prefix: str) -> dict[str, bool | str | None]:
        """What the recorder asks SGLang's compressed-tensors functions (recorder.py ``_ct_prefix_facts``)."""
        def scheme(name: str, class_name: str) -> str | None:
            try:
                return _ct_scheme_name(self._ct_scheme_dict(name, class_name))
            except (LookupError, p.ShardsDisagree) as exc:
                return f"raises: {str(exc)[:40]}"

        fused = self._ct_fused()
        if prefix.endswith(".experts"):
            names = [prefix + shard for shard in p.CT_MOE_SHARDS]
            schemes = {scheme(n, "FusedMoE") for n in names}
            return {"ct_ignored": p.ct_should_ignore(names[0], self._ct_ignore(), fused),
                    "ct_scheme": schemes.pop() if len(schemes) == 1 else "raises: projections differ",
                    "ct_mxfp4_moe": self._ct_mxfp4_moe()}
        try:
            ignored: bool | str = p.ct_should_ignore(prefix, self._ct_ignore(), fused)
        except p.ShardsDisagree:
            ignored = "raises"
        if prefix.endswith(("lm_head", "shared_head.head")):
            groups = self._ct_groups()
            hit = next((t for t in groups if p.ct_check_equal_or_regex(prefix, [t])), None)
            head = None if ignored is True or hit is None else _ct_scheme_name(groups[hit])
            return {"ct_ignored": ignored, "ct_scheme": head}
        return {"ct_ignored": ignored, "ct_scheme": scheme(prefix, "ReplicatedLinear")}

    def _ct_mxfp4_moe(self) -> bool:
        """``_is_mxfp4_moe``: ``mxfp4`` in the top-level format, or the Linear/FusedMoE group's
        weights are FP4 float, group 32, symmetric."""
        if "mxfp4" in str(self.quant.get("format") or ""):
            return True
        groups = self._ct_groups()
        for key in ("FusedMoE", "Linear"):
            w = (groups.get(key) or {}).get("weights") or {}
            if (w.get("num_bits") == 4 and str(w.get("type")).lower() == "float"
                    and str(w.get("strategy")).lower() == "group" and w.get("group_size") == 32
                    and w.get("symmetric", True)):
                return True
        return False

    def _compressed_tensors(self, prefix: str, kind: str, cls: str) -> EngineChoice:
        if kind == r.EMBEDDING_KIND:
            return self._plain(cls, "None", "compressed_tensors.py get_quant_method: no method for embeddings")
        if self.model_type in DEEPSEEK_V4_TYPES and prefix.endswith(".self_attn.wo_a"):
            return self._plain(cls, "UnquantizedLinearMethod", "deepseek_v4.py: wo_a takes the quant config only "
                               "under an Fp8Config with 128x128 blocks (wo_a_fp8_gemm_enabled); its loader "
                               "dequantizes a .wo_a.scale pair, passing any other wo_a weight through as stored")
        try:
            if kind == r.ROUTED_EXPERTS:
                return self._ct_experts(prefix, cls)
            if kind == r.HEAD_KIND:
                facts = self._ct_matching(prefix)
                if facts["ct_scheme"] is None:
                    return self._plain(cls, "None", "compressed_tensors.py get_lm_head_scheme: no target names "
                                       "the head (module-class targets are not consulted)")
                head = next(g for t, g in self._ct_groups().items() if p.ct_check_equal_or_regex(prefix, [t]))
                return self._ct_choice(head, "CompressedTensorsLinearMethod", prefix, cls, moe=False)
            group = self._ct_scheme_dict(prefix, "ReplicatedLinear")
        except (LookupError, p.ShardsDisagree) as exc:
            why = f"compressed_tensors.py raises at start-up: {exc}"
            return EngineChoice(Scheme(s.UNKNOWN, reason=why), NOT_MODELLED, why, cls)
        if group is None:
            return self._plain(cls, "UnquantizedLinearMethod", f"compressed_tensors.py should_ignore_layer: "
                               f"{prefix} matches the ignore list")
        return self._ct_choice(group, "CompressedTensorsLinearMethod", prefix, cls, moe=False)

    def _ct_experts(self, prefix: str, cls: str) -> EngineChoice:
        if self._ct_mxfp4_moe():
            return EngineChoice(Scheme(s.MXFP4, s.COMPRESSED_TENSORS, group_size=32, scale_dtype="U8",
                                       weight_dtype="U8"), "Mxfp4MoEMethod",
                                "compressed_tensors.py _is_mxfp4_moe (checked before the ignore list)", cls)
        groups = [self._ct_scheme_dict(prefix + shard, "FusedMoE") for shard in p.CT_MOE_SHARDS]
        if any(g != groups[0] for g in groups):
            raise p.ShardsDisagree("All MoE projections need to have same quantization scheme but found multiple")
        if groups[0] is None:
            return self._plain(cls, "UnquantizedFusedMoEMethod", f"compressed_tensors.py get_moe_scheme: "
                               f"{prefix}.0.gate_proj matches the ignore list")
        return self._ct_choice(groups[0], "CompressedTensorsFusedMoEMethod", prefix, cls, moe=True)

    def _ct_choice(self, group: Mapping[str, Any], method: str, prefix: str, cls: str, *, moe: bool) -> EngineChoice:
        """The scheme a matched config group builds, where SGLang has one for it (compressed_tensors.py
        ``_get_scheme_from_parts`` / ``get_moe_scheme``); any other: unknown."""
        weights, acts = group.get("weights"), group.get("input_activations")
        fmt = group.get("format") or self.quant.get("format")
        scheme = weights_scheme(weights if isinstance(weights, dict) else None, str(fmt) if fmt else None)
        supported = {s.NVFP4, s.FP8_BLOCK, s.FP8_CHANNEL, s.FP8_TENSOR, s.INT4_GROUP}
        if scheme.format.startswith("fp8") and not acts and (moe or scheme.format == s.FP8_BLOCK):
            supported = set()  # get_moe_scheme "Unsupported FusedMoe scheme"; _is_fp8_w8a16: tensor/channel
        if scheme.format == s.INT4_GROUP and fmt != "pack-quantized":
            supported = set()  # _get_scheme_from_parts: "CompressedTensorsW4A16Sparse24 is not supported now"
        if not moe and scheme.format != s.INT4_GROUP and fmt not in _CT_ACT_FORMATS:
            supported = set()  # is_activation_quantization_format false: "No compressed-tensors compatible scheme"
        if scheme.format not in supported:
            why = f"{ENGINE}'s compressed-tensors {scheme.format} {'MoE ' if moe else ''}scheme is not modelled"
            return EngineChoice(Scheme(s.UNKNOWN, reason=why), NOT_MODELLED, why, cls)
        targets = ", ".join(str(t) for t in group.get("targets") or ())
        n = len(self._ct_ignore())
        return EngineChoice(scheme, method, f"compressed_tensors.py: {prefix} matches target(s) {targets} and "
                            f"none of the {n} ignore entries", cls)


# families whose compressed-tensors cases are recorded (plans/sglang-0.5.23/compressed_tensors.json)
_CT_RECORDED = DEEPSEEK_V4_TYPES | GLM4_MOE_TYPES | SGLANG_QWEN3_5_TYPES
# compressed_tensors/utils.py ``is_activation_quantization_format``
_CT_ACT_FORMATS = ("naive-quantized", "int-quantized", "float-quantized", "nvfp4-pack-quantized", "pack-quantized")


def _ct_scheme_name(group: Mapping[str, Any] | None) -> str | None:
    """recorder.py ``ct_scheme_name`` over the config group's JSON."""
    w = (group or {}).get("weights")
    if not isinstance(w, Mapping):
        return None
    a = group.get("input_activations") if group else None
    block = "x".join(map(str, w["block_structure"])) if w.get("block_structure") else None
    parts = (f"w{w.get('num_bits')}{w.get('type')}", w.get("strategy"), w.get("group_size") and f"g{w['group_size']}",
             block and f"b{block}", f"a{a.get('num_bits')}" if isinstance(a, Mapping) else "a16")
    return "-".join(str(x) for x in parts if x)


# DeepSeek-V4.1-only modules (deepseek_v4.py with ``is_dsv41``): the engram block (layers/engram.py
# ``Engram``), the V4.1 indexer (layers/attention/dsv4/dsv41_sparse.py ``DeepseekV41Indexer``), the
# vision tower and aligner (``ViT``, ``Aligner``; skipped on load without ``vision_n_layers``)
_V41_ONLY = (".engram.", ".self_attn.indexer.")
_V41_ROOTS = ("vision.", "aligner.", "image_")


def _v41_only(prefix: str) -> str | None:
    """The V4.1-only module ``prefix`` belongs to (None: one V4 builds too)."""
    dotted = prefix + "."
    hit = next((m.strip(".") for m in _V41_ONLY if m in dotted), None)
    return hit or next((m.rstrip("._") for m in _V41_ROOTS if prefix.startswith(m)), None)


def _shown(entries: Sequence[str], limit: int = 12) -> str:
    """A list for a reason line: whole up to ``limit`` entries (as before), else its first ones and
    the count left out (a published Qwen3.5 FP8 release lists 978 modules, twice over here)."""
    if len(entries) <= limit:
        return str(list(entries))
    head = ", ".join(repr(x) for x in entries[:3])
    return f"[{head}, ... and {len(entries) - 3} more]"


def _unquantized(kind: str) -> str:
    return "UnquantizedFusedMoEMethod" if kind == r.ROUTED_EXPERTS else "UnquantizedLinearMethod"
