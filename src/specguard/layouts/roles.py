"""Roles a module plays in speculative decoding, and module kinds."""

from __future__ import annotations

from dataclasses import dataclass

from specguard.plans import LayerClass
from specguard.vocabulary import Vocabulary


class RoleName(Vocabulary):
    """Where a module sits for speculative decoding (docs/names.md)."""

    MAIN = "main"
    DRAFT = "draft"
    EMBEDDING = "embedding"
    HEAD = "head"


class DraftKind(Vocabulary):
    """How a draft is served: layers inside the target (mtp), DSpark stages, or an EAGLE drafter."""

    MTP = "mtp"
    DSPARK = "dspark"
    EAGLE = "eagle"


# What class of engine layer a module becomes: the vocabulary the recorded plans use
# (plans.LayerClass, one list for both).
ModuleKind = LayerClass


# The members under the short names the stages use (``r.DRAFT``, ``r.HEAD_KIND``).
MAIN, DRAFT, EMBEDDING, HEAD = RoleName.MAIN, RoleName.DRAFT, RoleName.EMBEDDING, RoleName.HEAD
MTP, DSPARK, EAGLE = DraftKind.MTP, DraftKind.DSPARK, DraftKind.EAGLE
ROUTED_EXPERTS, LINEAR, NORM, OTHER = ModuleKind.ROUTED_EXPERTS, ModuleKind.LINEAR, ModuleKind.NORM, ModuleKind.OTHER
EMBEDDING_KIND, HEAD_KIND = ModuleKind.EMBEDDING, ModuleKind.HEAD
DRAFT_KINDS = tuple(DraftKind)


@dataclass(frozen=True)
class Role:
    """Where a module sits: main stack, a draft layer, the embedding or the head.

    ``layer`` is the runtime layer index (``N + i`` for draft layer ``i``);
    ``draft_index`` is ``i``. Draft-owned embeddings and heads (an MTP layer's
    ``shared_head.head``) are role ``draft``: what matters for routing is that
    they belong to the draft tower.
    """

    name: RoleName
    draft_kind: DraftKind | None = None
    layer: int | None = None
    draft_index: int | None = None

    @property
    def is_draft(self) -> bool:
        return self.name == DRAFT

    def __str__(self) -> str:
        if self.name != DRAFT:
            return self.name if self.layer is None else f"{self.name} (layer {self.layer})"
        parts = [self.draft_kind or "draft"]
        if self.draft_index is not None:
            parts.append(str(self.draft_index))
        where = f", layer {self.layer}" if self.layer is not None else ""
        return f"draft ({' '.join(parts)}{where})"


def role_label(role: Role) -> str:
    """``main``, ``embedding``, ``head`` or ``draft (mtp)``: one label per run of layers."""
    return f"draft ({role.draft_kind})" if role.is_draft and role.draft_kind else role.name
