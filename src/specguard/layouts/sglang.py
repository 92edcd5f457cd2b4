"""DeepSeek-V4/V3, GLM-4-MoE and Qwen3.5 checkpoint names as SGLang 0.5.23 builds them (docs/engines.md).

SGLang names the layers of one checkpoint differently from vLLM, so an exclusion
written for one engine's prefixes can match nothing under the other's. Read from
SGLang 0.5.23's source (site-packages ``sglang/srt/``):

- target layers: models/deepseek_v4.py ``DeepseekV4DecoderLayer`` builds
  ``self_attn`` (``DeepseekV4Attention``: ``wqkv_a`` when ``SGLANG_OPT_FUSE_WQA_WKV``,
  default on (environ.py), else ``wq_a``/``wkv``; ``wq_b``, ``wo_a``, ``wo_b``,
  ``compressor``, ``indexer``) and ``mlp`` (deepseek_v2.py ``DeepseekV2MoE``:
  ``gate``, ``experts``, ``shared_experts.gate_up_proj``/``down_proj``), the names
  ``remap_weight_name_to_dpsk_hf_format`` maps checkpoint names onto
  (``.attn.`` -> ``.self_attn.``, ``.ffn.`` -> ``.mlp.``, ``.w1/.w3/.w2.`` ->
  ``gate_proj/up_proj/down_proj``, the norms to ``input_layernorm`` /
  ``post_attention_layernorm``);
- the NextN draft (models/deepseek_v4_nextn.py): ``mtp.0.X`` becomes the decoder
  layer ``model.decoder.X``; ``e_proj``, ``h_proj``, ``enorm``, ``hnorm`` and
  ``hc_head_*`` sit at ``model.X``, the head at ``model.shared_head.head``;
- DeepSeek-V3 (models/deepseek_v2.py ``DeepseekV2AttentionMLA``): ``q_a_proj`` and
  ``kv_a_proj_with_mqa`` fuse into ``self_attn.fused_qkv_a_proj_with_mqa`` (vLLM:
  ``fused_qkv_a_proj``); its NextN layer is ``model.decoder`` (layouts/deepseek.py);
- the DSpark draft (models/deepseek_v4_dspark.py ``DeepseekV4ForCausalLMDSpark``,
  ``_remap_dspark_weight_name``): stage ``k`` is ``stages.{k}`` (no ``model.``
  root), ``main_proj``/``main_norm`` live on stage 0, ``norm`` and ``hc_head_*`` on
  the last stage, ``markov_head.embed/head`` -> ``markov_head.markov_w1/markov_w2``.
"""

from __future__ import annotations

from specguard.layouts import fusions
from specguard.layouts import roles as r
from specguard.layouts.base import SGLANG, Placement
from specguard.layouts.deepseek import DeepseekV3Layout, DeepseekV4Layout
from specguard.layouts.generic import EagleLayout, GenericLayout
from specguard.layouts.qwen3_5 import Qwen3_5Layout

_STAGE0 = ("main_proj", "main_norm")  # DSparkV4StageMixin: stage 0 only
_LAST_STAGE = ("norm", "hc_head_fn", "hc_head_base", "hc_head_scale")  # the last stage only
_DSPARK_TOP = ("markov_head", "confidence_head")  # on the DSpark model itself, no root
_NORMS = {"attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm"}
_SHARED = {"w1": "gate_up_proj", "w3": "gate_up_proj", "w2": "down_proj"}


def deepseek_v4(rest: str, *, fuse_wqa_wkv: bool = True) -> fusions.Fused:
    """SGLang's layer (quant prefix below the decoder layer), kind and parameter path for the
    part ``rest`` of a DeepSeek-V4 checkpoint name below its layer (``ffn.experts.3.w1``)."""
    segs = rest.split(".")
    head, tail = segs[0], segs[1:]
    if head in _NORMS:
        return fusions.Fused(_NORMS[head], r.NORM, _NORMS[head])
    if head == "ffn":
        if tail[:1] == ["experts"] and (len(tail) == 1 or tail[1].isdigit()):
            return fusions.Fused("mlp.experts", r.ROUTED_EXPERTS, "mlp.experts")
        if tail[:1] == ["shared_experts"] and len(tail) == 2 and tail[1] in _SHARED:
            name = f"mlp.shared_experts.{_SHARED[tail[1]]}"
            return fusions.Fused(name, r.LINEAR, name)
        rest = ".".join(["mlp", *tail])
    elif head == "attn":
        if fuse_wqa_wkv and tail in (["wq_a"], ["wkv"]):
            return fusions.Fused("self_attn.wqkv_a", r.LINEAR, "self_attn.wqkv_a")
        rest = ".".join(["self_attn", *tail])
    return fusions.Fused(rest, fusions.kind_of(rest), rest)


class SglangDeepseekV4Layout(DeepseekV4Layout):
    """DeepSeek-V4 (native names) with a NextN or DSpark draft, as SGLang 0.5.23 builds it."""

    family = "deepseek_v4"

    def __init__(self, num_hidden_layers: int, num_draft_layers: int = 0, draft_kind: str | None = r.MTP, *,
                 fuse_wqa_wkv: bool = True) -> None:
        super().__init__(num_hidden_layers, num_draft_layers, draft_kind, engine=SGLANG)
        self.fuse_wqa_wkv = fuse_wqa_wkv

    def draft_inputs(self) -> list[tuple[int | None, tuple[str, ...]]]:
        return []  # SGLang's draft inputs are not modelled

    def _fuse(self, rest: str) -> fusions.Fused:
        return deepseek_v4(rest, fuse_wqa_wkv=self.fuse_wqa_wkv)

    def _runtime_role(self, name: str) -> r.Role | None:
        segs = name.split(".")
        if segs[0] == "stages" and len(segs) > 1 and segs[1].isdigit():
            k = int(segs[1])
            return r.Role(r.DRAFT, r.DSPARK, self.num_hidden_layers + k, k)
        if segs[0] in _DSPARK_TOP:
            return r.Role(r.DRAFT, r.DSPARK, None, None)
        return super()._runtime_role(name)

    def _place(self, module: str) -> Placement:
        if module.split(".", 1)[0] in ("stages", *_DSPARK_TOP):  # already SGLang's runtime spelling
            return self._place_runtime(module)
        return super()._place(module)

    def _place_layer(self, module: str, layer: int, rest: str) -> Placement:
        if layer >= self.num_hidden_layers:
            return self._place_draft(module, layer - self.num_hidden_layers, rest)
        f = self._fuse(rest)
        base = f"model.layers.{layer}"
        return self._placement(module, r.Role(r.MAIN, layer=layer), f.kind, f"{base}.{f.prefix}", f"{base}.{f.param}")

    def _place_runtime(self, module: str) -> Placement:
        segs = module.split(".")
        role = self._runtime_role(module)
        if segs[:2] == ["model", "layers"] and len(segs) > 3 and segs[2].isdigit():
            role = r.Role(r.MAIN, layer=int(segs[2]))
            rest = ".".join(segs[3:])
        elif segs[:2] == ["model", "decoder"] or (segs[0] == "stages" and len(segs) > 2):
            rest = ".".join(segs[2:])
        else:
            rest = ""
        kind = r.ROUTED_EXPERTS if rest.endswith("mlp.experts") else fusions.kind_of(rest or module)
        if module.endswith("embed_tokens"):
            role, kind = r.Role(r.EMBEDDING), r.EMBEDDING_KIND
        elif module in (self.head, "model.shared_head.head"):
            kind = r.HEAD_KIND
            role = role or r.Role(r.HEAD)
        return self._placement(module, role or r.Role(r.MAIN), kind, module)

    _nextn_head_parameter = None  # SGLang's NextN head: its parameters at model.shared_head.head

    def _nextn_fuse(self, rest: str) -> fusions.Fused:
        return self._fuse(rest)

    def _place_draft(self, module: str, i: int, rest: str) -> Placement:
        if self.draft_kind == r.DSPARK:
            return self._place_stage(module, i, rest)
        return self._place_sglang_mtp(module, i, rest)

    def _place_stage(self, module: str, i: int, rest: str) -> Placement:
        first = rest.split(".", 1)[0]
        if first in _DSPARK_TOP:
            role = r.Role(r.DRAFT, r.DSPARK, None, i)
            rest = rest.replace("markov_head.embed", "markov_head.markov_w1", 1)
            rest = rest.replace("markov_head.head", "markov_head.markov_w2", 1)
            kind = {"markov_head.markov_w1": r.EMBEDDING_KIND, "markov_head.markov_w2": r.HEAD_KIND}.get(
                rest, fusions.kind_of(rest))
            return self._placement(module, role, kind, rest)
        stage = i
        if first in _STAGE0:
            stage = 0
        elif first in _LAST_STAGE:
            stage = max(self.num_draft_layers - 1, 0)
        role = r.Role(r.DRAFT, r.DSPARK, self.num_hidden_layers + stage, stage)
        if first in _STAGE0 or first in _LAST_STAGE:
            kind = r.LINEAR if first == "main_proj" else fusions.kind_of(rest)
            return self._placement(module, role, kind, f"stages.{stage}.{rest}")
        f = self._fuse(rest)
        return self._placement(module, role, f.kind, f"stages.{stage}.{f.prefix}")


class SglangDeepseekV3Layout(DeepseekV3Layout):
    """DeepSeek-V2/V3 HF names as SGLang 0.5.23 builds them (NextN draft at ``model.decoder``)."""

    def __init__(self, num_hidden_layers: int, num_draft_layers: int = 0, *, fuse_qkv_a: bool = True,
                 mha: bool = False) -> None:
        super().__init__(num_hidden_layers, num_draft_layers, r.MTP, engine=SGLANG, fuse_qkv_a=fuse_qkv_a, mha=mha)

    def _fuse(self, rest: str) -> fusions.Fused:
        f = super()._fuse(rest)
        if f.prefix == "self_attn.fused_qkv_a_proj":
            name = "self_attn.fused_qkv_a_proj_with_mqa"
            return fusions.Fused(name, f.kind, name)
        return f


# glm4_moe.py ``Glm4MoeForCausalLM.load_weights(is_nextn=True)``: a name of the nextn layer
# containing one of these (a substring test, as SGLang does) loads at ``model.X``; every
# other one into the decoder layer ``model.decoder.X``.
_GLM_NEXTN_SPEC = ("shared_head.norm", "eh_proj", "enorm", "hnorm")


class SglangGlm4MoeLayout(GenericLayout):
    """GLM-4.5/4.6/4.7 MoE (``glm4_moe``) with its NextN draft, as SGLang 0.5.23 builds it.

    Target layers keep their checkpoint names (glm4_moe.py: ``self_attn.qkv_proj``,
    ``mlp.gate_up_proj``, ``mlp.experts``, ``mlp.shared_experts.gate_up_proj``); the target
    skips layers >= N on load. The draft (glm4_moe_nextn.py ``Glm4MoeModelNextN``) is one
    decoder layer at ``model.decoder`` beside ``model.eh_proj``/``enorm``/``hnorm``/
    ``shared_head.norm``; its ``embed_tokens`` and ``shared_head.head`` are skipped on load
    (``"shared_head.head" in name or "embed_tokens" in name: continue``): the target's serve.
    """

    family = "glm4_moe"
    sglang_nextn_top = ("eh_proj", "enorm", "hnorm", "shared_head")

    def __init__(self, num_hidden_layers: int, num_draft_layers: int = 0) -> None:
        super().__init__(num_hidden_layers, num_draft_layers, r.MTP, engine=SGLANG)

    def draft_checkpoint_prefixes(self) -> tuple[str, ...]:
        return tuple(f"model.layers.{i}." for i in self.draft_layers)

    def _place_nextn(self, module: str, layer: int) -> Placement:
        role = self._draft_role(layer - self.num_hidden_layers)
        rest = module.split(f"layers.{layer}.", 1)[1] if f"layers.{layer}." in module else ""
        if "shared_head.head" in rest:
            return self._placement(module, role, r.HEAD_KIND, "model.shared_head.head", "lm_head")
        if "embed_tokens" in rest:
            return self._placement(module, role, r.EMBEDDING_KIND, "model.embed_tokens")
        if any(w in module for w in _GLM_NEXTN_SPEC):
            kind = r.LINEAR if rest == "eh_proj" else fusions.kind_of(rest)
            return self._placement(module, role, kind, f"model.{rest}")
        f = self._fuse(rest)
        return self._placement(module, role, f.kind, f"model.decoder.{f.prefix}")


class SglangGptOssLayout(GenericLayout):
    """gpt-oss (``GptOssForCausalLM``, HF names) as SGLang 0.5.23 builds it (models/gpt_oss.py).

    The runtime prefixes are the HF checkpoint's, fused as vLLM fuses them:
    ``model.layers.{i}.self_attn.qkv_proj`` (``GptOssAttention``: ``QKVParallelLinear``, loaded
    from ``q_proj``/``k_proj``/``v_proj`` through ``stacked_params_mapping``), ``self_attn.o_proj``,
    ``self_attn.sinks`` (a bare parameter), ``mlp.experts`` (``GptOssSparseMoeBlock``:
    ``get_moe_impl_class`` -> ``FusedMoE``; ``gate_up_proj_blocks``/``_scales``/``_bias`` and
    ``down_proj_*`` load into ``w13_*``/``w2_*`` under ``mxfp4``, ``_load_mxfp4_experts_weights``),
    ``mlp.router`` (a ``TinyGemmLinear`` whose quant prefix is ``mlp.gate`` but which is built
    with ``quant_config=None``, so the prefix is never matched), the norms, ``model.embed_tokens``
    and ``lm_head``. gpt-oss has no NextN/MTP layer of its own; an EAGLE-3 drafter is a separate
    checkpoint (its own Resolver), the target only captures hidden states
    (``set_eagle3_layers_to_capture``)."""

    family = "gpt_oss"


class SglangQwen3_5Layout(Qwen3_5Layout):
    """Qwen3.5 / 3.6 / 3.8 (dense and MoE) with its MTP draft, as SGLang 0.5.23 builds it.

    Quant prefixes are the checkpoint's names with the fusions of ``packed_modules_mapping``
    (qwen3_5.py ``Qwen3_5ForCausalLM``: ``qkv_proj``, ``gate_up_proj``, ``in_proj_qkvz``,
    ``in_proj_ba``): the multimodal classes build the language model at
    ``model.language_model`` (qwen3_vl.py, ``hf_to_sglang_mapper = None``), the text-only ones at
    ``model`` (qwen3_5_text.py). The MTP draft (qwen3_5_mtp.py ``Qwen3_5ForCausalLMMTP``) builds
    its one decoder layer with prefix ``mtp`` (``add_prefix("mtp", "")``): ``mtp.layers.0.self_attn.
    qkv_proj``, ``mtp.layers.0.mlp.experts``, ``mtp.layers.0.mlp.shared_expert.gate_up_proj``; the
    decoder layer keeps ``self_attn`` in the quant prefix but not in the module tree (its loader's
    ``.replace(".self_attn", "")``), so parameters sit at ``model.layers.0.qkv_proj``. ``fc`` is a
    plain ``nn.Linear`` with no prefix (named ``mtp.fc`` here, as the checkpoint does); no SGLang
    plan rewrites these names (vLLM's recorded plan is not asked).
    """

    def __init__(self, num_hidden_layers: int, num_draft_layers: int = 0) -> None:
        super().__init__(num_hidden_layers, num_draft_layers, r.MTP, engine=SGLANG)

    def _place(self, module: str) -> Placement:
        p = self._named(module)
        if not p.role.is_draft or not module.startswith("mtp."):
            return p
        # qwen3_5_mtp.py load_weights: mtp. -> model., model.fc -> fc, model.pre_fc -> pre_fc, .self_attn dropped
        param = "model." + p.parameter_prefix.removeprefix("model.").removeprefix("mtp.")
        param = param.replace("model.fc", "fc", 1).replace("model.pre_fc", "pre_fc", 1).replace(".self_attn", "")
        return self._placement(module, p.role, p.kind, p.runtime_prefix, param, p.runtime_prefixes[1:])


# llama_eagle3.py ``LlamaForCausalLMEagle3.load_weights``: legacy checkpoint names
_EAGLE3_LEGACY = {"midlayer": "layers.0", "aux_norm_low": "fc_norm.0", "aux_norm_mid": "fc_norm.1",
                  "aux_norm_high": "fc_norm.2"}
# the decoder layer's quantizable linears and the quant prefix SGLang builds each at (layer prefix
# ``model`` for every layer): the overridden ``qkv_proj`` and ``mlp`` take the layer's prefix bare
_EAGLE3_LINEARS = {"self_attn.q_proj": "model.qkv_proj", "self_attn.k_proj": "model.qkv_proj",
                   "self_attn.v_proj": "model.qkv_proj", "self_attn.o_proj": "model.self_attn.o_proj",
                   "mlp.gate_proj": "model.gate_up_proj", "mlp.up_proj": "model.gate_up_proj",
                   "mlp.down_proj": "model.down_proj"}
# its ``stacked_params_mapping``: the shard a checkpoint tensor loads into
_EAGLE3_STACKED = {"q_proj": "qkv_proj", "k_proj": "qkv_proj", "v_proj": "qkv_proj", "gate_proj": "gate_up_proj",
                   "up_proj": "gate_up_proj"}
EAGLE3_ARCHS = ("LlamaForCausalLMEagle3",)  # the EAGLE-3 drafter class this layout restates


class SglangEagle3Layout(EagleLayout):
    """An EAGLE-3 drafter (``LlamaForCausalLMEagle3``) as SGLang 0.5.23 builds it.

    models/llama_eagle3.py builds every decoder layer as ``LlamaDecoderLayer(config, i,
    quant_config, prefix)`` with the model's own prefix ``model`` (not ``model.layers.{i}``):
    llama.py's layer puts ``self_attn`` at ``model.self_attn`` (``o_proj``:
    ``model.self_attn.o_proj``), then the EAGLE-3 layer replaces ``qkv_proj`` with one built at
    ``add_prefix("qkv_proj", prefix)`` = ``model.qkv_proj`` and the MLP with
    ``LlamaMLP(..., prefix)``: ``model.gate_up_proj``, ``model.down_proj``. So the quant config
    is asked about those names (one per layer count), while parameters load at
    ``model.layers.{i}.*`` (``midlayer.`` -> ``layers.0.``, then ``model.`` prepended). ``fc`` is a
    plain ``torch.nn.Linear`` (``model.fc``), ``embed_tokens`` a ``VocabParallelEmbedding`` built
    without the quant config, ``lm_head`` a ``ParallelLMHead`` at ``lm_head``; ``d2t`` is read
    into ``hot_token_id``, ``t2d`` skipped. An exclusion written for vLLM's names
    (``model.layers.{N}.self_attn.qkv_proj``) matches none of these.
    """

    family = "sglang_eagle3"

    def __init__(self, target_num_hidden_layers: int, num_draft_layers: int = 1) -> None:
        super().__init__(target_num_hidden_layers, num_draft_layers, engine=SGLANG)

    def _named(self, module: str) -> Placement:
        name = module
        for legacy, new in _EAGLE3_LEGACY.items():  # load_weights: ``if legacy in name: replace``
            if legacy in name:
                name = name.replace(legacy, new)
        return self._renamed(module, name)

    def _renamed(self, module: str, name: str) -> Placement:
        bare = name.removeprefix("model.")
        segs = bare.split(".")
        if segs[0] == "layers" and len(segs) > 2 and segs[1].isdigit():
            i, rest = int(segs[1]), ".".join(segs[2:])
            role, param = self._draft_role(i), f"model.layers.{i}.{rest}"
            if rest in _EAGLE3_LINEARS:
                quant = _EAGLE3_LINEARS[rest]
                leaf = rest.rsplit(".", 1)[-1]
                param = param.replace(leaf, _EAGLE3_STACKED.get(leaf, leaf))
                return self._placement(module, role, r.LINEAR, quant, param)
            return self._placement(module, role, fusions.kind_of(rest), param)
        role = self._draft_role(None)
        if bare == "embed_tokens":
            return self._placement(module, role, r.EMBEDDING_KIND, "model.embed_tokens")
        if bare == "lm_head":
            return self._placement(module, role, r.HEAD_KIND, "lm_head")
        if bare == "fc":
            return self._placement(module, role, r.LINEAR, "model.fc")
        return self._placement(module, role, fusions.kind_of(bare), f"model.{bare}")
