"""DeepSeek-V4 (native names, MTP and DSpark drafts) and DeepSeek-V3/V3.2 layouts.

Sources (vLLM 0.33.0, read in site-packages):
- V4 target: vllm/models/deepseek_v4/nvidia/model.py
  ``_make_deepseek_v4_weights_mapper`` (``layers.`` -> ``model.layers.``,
  ``embed.weight`` -> ``model.embed_tokens.weight``, ``head.weight`` ->
  ``lm_head.weight``, ``hc_head`` -> ``model.hc_head``; ``mtp.`` dropped).
- V4 MTP: vllm/models/deepseek_v4/nvidia/mtp.py ``DeepSeekV4MTP.
  _to_spec_layer_name`` (``mtp.{i}.`` -> ``model.layers.{N+i}.``),
  ``_rewrite_spec_layer_name`` (block modules under ``.mtp_block.``), and
  ``DeepSeekV4MultiTokenPredictorLayer.__init__``: the decoder layer is built
  with ``prefix`` = ``model.layers.{N+i}`` (no ``mtp_block`` in the quant
  prefix), ``e_proj``/``h_proj`` at ``{prefix}.e_proj``, SharedHead's
  ParallelLMHead at ``{prefix}.head``.
- V4 DSpark: vllm/models/deepseek_v4/nvidia/dspark.py ``DSparkDeepseekV4Model.
  __init__`` (layers built with prefix ``{root}.layers.{N+i}``, stored in a
  ModuleList so parameters are ``model.layers.{i}``; ``main_proj`` and
  ``context_wkv_proj`` at model level) and ``_remap_dspark_name``.
- V3/V3.2 MTP: vllm/model_executor/models/deepseek_mtp.py
  ``DeepSeekMultiTokenPredictorLayer.__init__`` (``eh_proj`` is a plain
  ``nn.Linear``; SharedHead at ``{prefix}.head``) and
  ``_rewrite_spec_layer_name``.
- SGLang (draft tower only): python/sglang/srt/models/deepseek_v4_nextn.py and
  deepseek_nextn.py build the single NextN layer as ``model.decoder`` with
  ``model.e_proj``/``model.h_proj``/``model.eh_proj`` and the head at
  ``model.shared_head.head``.
"""

from __future__ import annotations

from specguard.layouts import fusions
from specguard.layouts import roles as r
from specguard.layouts.base import SGLANG, Layout, Placement, join
from specguard.layouts.names import layer_index

# DSpark modules that live at model level, not in a decoder layer
# (dspark.py ``_remap_dspark_name`` head_prefixes + main_proj/main_norm).
_DSPARK_HEAD_STACK = (
    "main_proj", "main_norm", "norm", "hc_head_fn", "hc_head_base", "hc_head_scale",
    "markov_head", "confidence_head",
)
# Runtime names that exist only in a DSpark draft model.
_DSPARK_ONLY = ("main_proj", "main_norm", "context_wkv_proj", "markov_head", "confidence_head")
# MTP-layer modules outside the decoder block (mtp.py ``_rewrite_spec_layer_name``).
_V4_MTP_SPEC = ("e_proj", "h_proj", "enorm", "hnorm", "hc_head_fn", "hc_head_base", "hc_head_scale")
_V3_MTP_SPEC = ("embed_tokens", "enorm", "hnorm", "eh_proj", "shared_head")
_SGLANG_NEXTN_TOP = ("e_proj", "h_proj", "eh_proj", "enorm", "hnorm", "shared_head", "hc_head")


def _first(rest: str) -> str:
    return rest.split(".", 1)[0]


class DeepseekV4Layout(Layout):
    """DeepSeek-V4 native checkpoint names with an MTP or DSpark draft.

    ``context_wkv`` is True for the deepseek_v4 DSpark model, whose
    ``context_wkv_proj`` is loaded from every draft layer's ``attn.wkv``
    (deepseek_v41's DSpark has none). ``root`` is where the target's decoder
    lives: ``model`` for V4, ``language_model.model`` for V4.1, whose registry
    class is the VL wrapper (deepseek_v41/nvidia/vl_model.py
    ``DeepseekV41ForCausalLM``: ``language_model`` + ``DeepseekV41LLMForCausalLM``
    with ``model``). Draft models are built on their own, under ``model``.
    """

    family = "deepseek_v4"
    sglang_nextn_top = _SGLANG_NEXTN_TOP

    def __init__(
        self,
        num_hidden_layers: int,
        num_draft_layers: int = 0,
        draft_kind: str | None = r.MTP,
        *,
        engine: str = "vllm",
        context_wkv: bool = True,
        root: str = "model",
    ) -> None:
        super().__init__(num_hidden_layers, num_draft_layers, draft_kind, engine=engine)
        self.context_wkv = context_wkv
        self.root = root
        self.head = "lm_head" if root == "model" else f"{root.rsplit('.', 1)[0]}.lm_head"

    def draft_checkpoint_prefixes(self) -> tuple[str, ...]:
        return tuple(f"mtp.{i}." for i in range(self.num_draft_layers))

    def draft_inputs(self) -> list[tuple[int | None, tuple[str, ...]]]:
        """nvidia/mtp.py DeepSeekV4MultiTokenPredictorLayer: enorm, hnorm, e_proj, h_proj
        per MTP layer; nvidia/dspark.py DSparkDeepseekV4Model: main_proj, main_norm once."""
        if self.engine != "vllm":
            return []
        if self.draft_kind == r.DSPARK:
            return [(None, ("model.main_proj", "model.main_norm"))] if self.num_draft_layers else []
        return [(layer, tuple(f"model.layers.{layer}.{m}" for m in ("e_proj", "h_proj", "enorm", "hnorm")))
                for layer in self.draft_layers]

    def _runtime_role(self, name: str) -> r.Role | None:
        head = name.removeprefix("model.")
        if self.draft_kind == r.DSPARK and _first(head) in _DSPARK_ONLY:
            return r.Role(r.DRAFT, r.DSPARK, None, None)
        return super()._runtime_role(name)

    def _place(self, module: str) -> Placement:
        segs = module.split(".")
        if segs[0] == "mtp" and len(segs) > 2 and segs[1].isdigit():
            return self._place_draft(module, int(segs[1]), ".".join(segs[2:]))
        if segs[0] == "layers" and len(segs) > 2 and segs[1].isdigit():
            return self._place_layer(module, int(segs[1]), ".".join(segs[2:]))
        if segs[0] in ("model", "language_model") or module == self.head:  # already runtime-spelled
            return self._place_runtime(module)
        root = self.root
        if module in ("embed", "embed_tokens") or segs[0] == "embed":
            return self._placement(module, r.Role(r.EMBEDDING), r.EMBEDDING_KIND, f"{root}.embed_tokens")
        if module in ("head", "lm_head"):
            return self._placement(module, r.Role(r.HEAD), r.HEAD_KIND, self.head)
        if module.startswith("hc_head"):
            return self._placement(module, r.Role(r.HEAD), r.OTHER, f"{root}.{module}")
        if module == "norm":
            return self._placement(module, r.Role(r.MAIN), r.NORM, f"{root}.norm")
        return self._placement(module, r.Role(r.MAIN), fusions.kind_of(module), f"{root}.{module}")

    def _place_layer(self, module: str, layer: int, rest: str) -> Placement:
        if layer >= self.num_hidden_layers:  # a conversion that numbers draft layers N+i
            return self._place_draft(module, layer - self.num_hidden_layers, rest)
        f = fusions.deepseek_v4(rest)
        base = f"{self.root}.layers.{layer}"
        return self._placement(module, r.Role(r.MAIN, layer=layer), f.kind, f"{base}.{f.prefix}", f"{base}.{f.param}")

    def _place_runtime(self, module: str) -> Placement:
        layer = layer_index(module)
        if layer is not None and layer >= self.num_hidden_layers:
            role = self._draft_role(layer - self.num_hidden_layers)
        else:
            role = r.Role(r.MAIN, layer=layer)
        rest = module.split(f"layers.{layer}.", 1)[1] if layer is not None and f"layers.{layer}." in module else ""
        rest = rest.removeprefix("mtp_block.")
        kind = fusions.deepseek_v4(rest).kind if rest else fusions.kind_of(module)
        if module.endswith("embed_tokens"):
            role, kind = r.Role(r.EMBEDDING), r.EMBEDDING_KIND
        elif module == self.head:
            role, kind = r.Role(r.HEAD), r.HEAD_KIND
        return self._placement(module, role, kind, module)

    def _place_draft(self, module: str, i: int, rest: str) -> Placement:
        if self.draft_kind == r.DSPARK:
            return self._place_dspark(module, i, rest)
        if self.engine == SGLANG:
            return self._place_sglang_mtp(module, i, rest)
        return self._place_mtp(module, i, rest)

    def _place_mtp(self, module: str, i: int, rest: str) -> Placement:
        layer = self.num_hidden_layers + i
        role = r.Role(r.DRAFT, r.MTP, layer, i)
        base = f"model.layers.{layer}"
        first = _first(rest)
        if first in _V4_MTP_SPEC:
            return self._placement(module, role, fusions.kind_of(rest), f"{base}.{rest}")
        if rest == "head":  # SharedHead(prefix=prefix): ParallelLMHead at {prefix}.head
            return self._placement(module, role, r.HEAD_KIND, f"{base}.head", f"{base}.shared_head.head")
        if rest == "norm":
            return self._placement(module, role, r.NORM, f"{base}.shared_head.norm")
        if first == "emb":  # ``.emb.tok_emb`` -> shared ``model.embed_tokens``
            return self._placement(module, role, r.EMBEDDING_KIND, "model.embed_tokens")
        f = fusions.deepseek_v4(rest)
        return self._placement(module, role, f.kind, f"{base}.{f.prefix}", f"{base}.mtp_block.{f.param}")

    # SGLang's NextN spelling (``model.decoder.*``): the layer fusion and where the head's
    # parameter lives are the engine's (layouts/sglang.py has its own)
    _nextn_head_parameter: str | None = "lm_head"

    def _nextn_fuse(self, rest: str) -> fusions.Fused:
        return fusions.deepseek_v4(rest)

    def _place_sglang_mtp(self, module: str, i: int, rest: str) -> Placement:
        role = r.Role(r.DRAFT, r.MTP, self.num_hidden_layers + i, i)
        first = _first(rest)
        if first in _V4_MTP_SPEC:
            return self._placement(module, role, fusions.kind_of(rest), f"model.{rest}")
        if rest == "head":
            return self._placement(module, role, r.HEAD_KIND, "model.shared_head.head", self._nextn_head_parameter)
        if rest == "norm":
            return self._placement(module, role, r.NORM, "model.shared_head.norm")
        if first == "emb":
            return self._placement(module, role, r.EMBEDDING_KIND, "model.embed_tokens")
        f = self._nextn_fuse(rest)
        return self._placement(module, role, f.kind, f"model.decoder.{f.prefix}", f"model.decoder.{f.param}")

    def _place_dspark(self, module: str, i: int, rest: str) -> Placement:
        first = _first(rest)
        if first in _DSPARK_HEAD_STACK:
            role = r.Role(r.DRAFT, r.DSPARK, None, i)
            # qwen3_dspark.py DSparkMarkovHead: markov_w1 an nn.Embedding, markov_w2 a ParallelLMHead
            kind = {"main_proj": r.LINEAR, "markov_head.markov_w1": r.EMBEDDING_KIND,
                    "markov_head.markov_w2": r.HEAD_KIND}.get(rest, fusions.kind_of(rest))
            return self._placement(module, role, kind, f"model.{rest}", f"model.{rest}", (rest,))
        layer = self.num_hidden_layers + i
        role = r.Role(r.DRAFT, r.DSPARK, layer, i)
        f = fusions.deepseek_v4(rest)
        extra: tuple[str, ...] = (f"layers.{layer}.{f.prefix}",)  # empty-root builds
        if self.context_wkv and rest == "attn.wkv" and i < self.num_draft_layers:
            extra += ("model.context_wkv_proj", "context_wkv_proj")
        return self._placement(
            module, role, f.kind, f"model.layers.{layer}.{f.prefix}", f"model.layers.{i}.{f.param}", extra
        )


class DeepseekV3Layout(Layout):
    """DeepSeek-V2/V3/V3.2 HF names; MTP layers are ``model.layers.{N+i}`` on disk."""

    family = "deepseek_v3"
    sglang_nextn_top = _SGLANG_NEXTN_TOP

    def __init__(
        self,
        num_hidden_layers: int,
        num_draft_layers: int = 0,
        draft_kind: str | None = r.MTP,
        *,
        engine: str = "vllm",
        fuse_qkv_a: bool = True,
        mha: bool = False,
    ) -> None:
        super().__init__(num_hidden_layers, num_draft_layers, draft_kind, engine=engine)
        self.fuse_qkv_a = fuse_qkv_a
        self.mha = mha

    def draft_inputs(self) -> list[tuple[int | None, tuple[str, ...]]]:
        """deepseek_mtp.py DeepSeekMultiTokenPredictorLayer: enorm, hnorm, eh_proj."""
        if self.engine != "vllm":
            return []
        return [(layer, tuple(f"model.layers.{layer}.{m}" for m in ("enorm", "hnorm", "eh_proj")))
                for layer in self.draft_layers]

    def _fuse(self, rest: str) -> fusions.Fused:
        return fusions.deepseek_v3(rest, fuse_qkv_a=self.fuse_qkv_a, mha=self.mha)

    def _place(self, module: str) -> Placement:
        if module in ("model.embed_tokens", "embed_tokens"):
            return self._placement(module, r.Role(r.EMBEDDING), r.EMBEDDING_KIND, "model.embed_tokens")
        if module == "lm_head":
            return self._placement(module, r.Role(r.HEAD), r.HEAD_KIND, "lm_head")
        layer = layer_index(module)
        if layer is None:
            return self._placement(module, r.Role(r.MAIN), fusions.kind_of(module), module)
        rest = module.split(f"layers.{layer}.", 1)[1] if f"layers.{layer}." in module else ""
        if layer >= self.num_hidden_layers:
            return self._place_mtp(module, layer - self.num_hidden_layers, rest)
        f = self._fuse(rest) if rest else fusions.Fused("", fusions.kind_of(module), "")
        base = f"model.layers.{layer}"
        return self._placement(
            module, r.Role(r.MAIN, layer=layer), f.kind, join(base, f.prefix), join(base, f.param)
        )

    def _place_mtp(self, module: str, i: int, rest: str) -> Placement:
        layer = self.num_hidden_layers + i
        role = r.Role(r.DRAFT, r.MTP, layer, i)
        sglang = self.engine == SGLANG
        base = "model" if sglang else f"model.layers.{layer}"
        spec = next((w for w in _V3_MTP_SPEC if w in rest), None)  # substring test, as vLLM does
        if spec == "embed_tokens":
            return self._placement(module, role, r.EMBEDDING_KIND, "model.embed_tokens")
        if rest == "shared_head.head":
            if sglang:
                return self._placement(module, role, r.HEAD_KIND, "model.shared_head.head", "lm_head")
            return self._placement(module, role, r.HEAD_KIND, f"{base}.head", f"{base}.shared_head.head")
        if spec is not None:
            return self._placement(module, role, fusions.kind_of(rest), join(base, rest))
        f = self._fuse(rest) if rest else fusions.Fused("", r.OTHER, "")
        block = "model.decoder" if sglang else base
        param = "model.decoder" if sglang else f"{base}.mtp_block"
        return self._placement(module, role, f.kind, join(block, f.prefix), join(param, f.param))
