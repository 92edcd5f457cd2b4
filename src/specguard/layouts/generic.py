"""Fallback layout (GLM-4 MoE, Qwen3-Next/3.5, MiMo and similar) and EAGLE drafters.

Draft if the name says so or the layer index is >= ``num_hidden_layers``:
- GLM-4 MoE MTP: ``model.layers.{N+i}`` on disk and at runtime
  (vllm/model_executor/models/glm4_moe_mtp.py, like DeepSeek-V3);
- Qwen3-Next / Qwen3.5 MTP: ``mtp.layers.{j}``, ``mtp.fc``; vLLM builds them
  with quant prefix ``mtp.layers.{j}`` (qwen3_next_mtp.py / qwen3_5_mtp.py:
  ``maybe_prefix(prefix, "mtp")``), i.e. the ``mtp.`` segment *is* part of the
  runtime prefix for this family and the layer index restarts at 0;
- MiMo: ``model.mtp_layers.{i}`` on disk, quant prefix ``model.layers.{N+i}``
  (mimo_mtp.py ``MiMoMultiTokenPredictor.__init__``).
"""

from __future__ import annotations

import re

from specguard import plans
from specguard.layouts import fusions
from specguard.layouts import roles as r
from specguard.layouts.base import Layout, Placement
from specguard.layouts.names import layer_index

_EMBED_LEAVES = frozenset({"embed_tokens", "wte", "embed_in", "tok_embeddings", "word_embeddings"})
_HEAD_NAMES = frozenset({"lm_head", "output", "embed_out"})
_MIMO_RE = re.compile(r"^(?:model\.)?mtp_layers\.(\d+)(?:\.(.*))?$")
_QWEN_MTP_RE = re.compile(r"^(?:model\.)?mtp(?:\.layers\.(\d+))?(?:\.(.*))?$")
_EAGLE_LAYER_RE = re.compile(r"^(?:model\.)?(?:layers\.(\d+)|midlayer)\.(.*)$")


class GenericLayout(Layout):
    """Layer index >= N is draft; ``mtp.*`` / ``mtp_layers.*`` names are draft."""

    family = "generic"

    def __init__(self, num_hidden_layers: int, num_draft_layers: int = 0, draft_kind: str | None = None, *,
                 engine: str = "vllm", plan: plans.Plan | None = None) -> None:
        super().__init__(num_hidden_layers, num_draft_layers, draft_kind, engine=engine)
        self.plan = plan
        # checkpoint-name renames the engine's draft loader applies (its hf_to_vllm_mapper)
        self._draft_renames = plan.draft.layer_renames() if plan is not None and plan.draft is not None else ()

    def draft_checkpoint_prefixes(self) -> tuple[str, ...]:
        own = tuple(old for old, _ in self._draft_renames)
        return (*super().draft_checkpoint_prefixes(), "mtp.", "model.mtp_layers.", *own)

    def _place_renamed(self, module: str) -> Placement | None:
        """A draft module the plan's loader renames onto a draft layer (ERNIE-4.5:
        ``model.mtp_block.0.`` -> ``model.layers.{N}.mtp_block.``, ernie_mtp.py), placed at
        the quant prefix the plan records for the module it loads into."""
        dotted = module + "."
        hit = next(((old, new) for old, new in self._draft_renames if old in dotted), None)
        if hit is None or self.plan is None or self.plan.draft is None:
            return None
        old, new = hit
        layer = self.num_hidden_layers
        path = dotted.replace(old, new.replace("{D}", str(layer)), 1).rstrip(".")
        f = self._fuse(path)
        row = self.plan.draft.by_path(f.prefix)
        prefix = plans.instantiate(row.quant_prefix or row.path, f.prefix) if row is not None else f.prefix
        kind = f.kind if row is None or row.kind == r.OTHER else row.kind
        return self._placement(module, self._draft_role(0), kind, prefix, f.param)

    def _fuse(self, module: str) -> fusions.Fused:
        """Engine layer, kind and parameter path of a module (family fusions)."""
        return fusions.generic(module)

    def _runtime_role(self, name: str) -> r.Role | None:
        if name == "mtp" or name.startswith(("mtp.", "model.mtp.")):
            m = _QWEN_MTP_RE.match(name)
            return self._draft_role(int(m.group(1)) if m and m.group(1) else None)
        m = _MIMO_RE.match(name)
        if m:
            return self._draft_role(int(m.group(1)))
        return super()._runtime_role(name)

    def _place(self, module: str) -> Placement:
        return self._planned(self._named(module))

    def _named(self, module: str) -> Placement:
        """The hand-written naming: where a checkpoint module goes (``_planned`` then asks the plan)."""
        n = self.num_hidden_layers
        if self._draft_renames:
            renamed = self._place_renamed(module)
            if renamed is not None:
                return renamed
        m = _MIMO_RE.match(module)
        if m:
            i = int(m.group(1))
            f = self._fuse(m.group(2) or "")
            return self._placement(
                module, self._draft_role(i), f.kind,
                _join(f"model.layers.{n + i}", f.prefix), _join(f"model.mtp_layers.{n + i}", f.param),
            )
        if module == "mtp" or module.startswith(("mtp.", "model.mtp.")):
            m = _QWEN_MTP_RE.match(module)
            stage = int(m.group(1)) if m and m.group(1) else None
            f = self._fuse(module)
            param = "model." + f.param.removeprefix("model.").removeprefix("mtp.")
            return self._placement(module, self._draft_role(stage), f.kind, f.prefix, param)
        leaf = module.rsplit(".", 1)[-1]
        layer = layer_index(module)
        if layer is not None and layer >= n:
            return self._place_nextn(module, layer)
        if leaf in _EMBED_LEAVES:
            return self._placement(module, r.Role(r.EMBEDDING), r.EMBEDDING_KIND, module)
        if module in _HEAD_NAMES or leaf == "lm_head":
            return self._placement(module, r.Role(r.HEAD), r.HEAD_KIND, module)
        f = self._fuse(module)
        return self._placement(module, r.Role(r.MAIN, layer=layer), f.kind, f.prefix)

    def _place_nextn(self, module: str, layer: int) -> Placement:
        """GLM-4 MoE / DeepSeek-style MTP layer kept at ``model.layers.{N+i}``."""
        role = self._draft_role(layer - self.num_hidden_layers)
        if module.endswith(f"layers.{layer}.shared_head.head"):
            base = module.removesuffix(".shared_head.head")
            return self._placement(module, role, r.HEAD_KIND, f"{base}.head", module)
        if module.rsplit(".", 1)[-1] == "embed_tokens":
            return self._placement(module, role, r.EMBEDDING_KIND, "model.embed_tokens")
        f = self._fuse(module)
        return self._placement(module, role, f.kind, f.prefix)


class EagleLayout(Layout):
    """A separate EAGLE/EAGLE-3 drafter checkpoint: every module is draft.

    vllm/model_executor/models/llama_eagle.py / llama_eagle3.py build draft
    layer ``i`` with quant prefix ``model.layers.{N_target + i}``
    (``start_layer_id=target_layer_num``); EAGLE-3's ``midlayer.`` is layer 0
    (``orig_to_new_substr={"midlayer.": "layers.0."}``); ``fc`` is ``model.fc``.
    """

    family = "eagle"

    def __init__(self, target_num_hidden_layers: int, num_draft_layers: int = 1, *, engine: str = "vllm",
                 plan: plans.Plan | None = None):
        super().__init__(target_num_hidden_layers, num_draft_layers, r.EAGLE, engine=engine)
        self.plan = plan

    def _runtime_role(self, name: str) -> r.Role | None:
        idx = layer_index(name)
        if idx is None:
            return None  # ``midlayer.*``, ``fc``: ``_place`` knows them
        return self._draft_role(max(idx - self.num_hidden_layers, 0))

    def draft_checkpoint_prefixes(self) -> tuple[str, ...]:
        return ("",)  # the whole checkpoint is the draft

    def _place(self, module: str) -> Placement:
        return self._planned(self._named(module))

    def _named(self, module: str) -> Placement:
        n = self.num_hidden_layers
        m = _EAGLE_LAYER_RE.match(module)
        if m:
            i = int(m.group(1)) if m.group(1) is not None else 0
            f = fusions.generic(m.group(2))
            return self._placement(
                module, self._draft_role(i), f.kind,
                _join(f"model.layers.{n + i}", f.prefix), _join(f"model.layers.{i}", f.param),
            )
        bare = module.removeprefix("model.")
        if bare in _EMBED_LEAVES:
            return self._placement(module, self._draft_role(None), r.EMBEDDING_KIND, "model.embed_tokens")
        if bare in _HEAD_NAMES:
            return self._placement(module, self._draft_role(None), r.HEAD_KIND, "lm_head")
        f = fusions.generic(bare)
        return self._placement(module, self._draft_role(None), f.kind, f"model.{f.prefix}")


def _join(base: str, rest: str) -> str:
    return f"{base}.{rest}" if rest else base
