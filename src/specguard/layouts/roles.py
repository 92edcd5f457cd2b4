"""Roles a module plays in speculative decoding, and module kinds."""

from __future__ import annotations

from dataclasses import dataclass

# Roles (docs/names.md).
MAIN = "main"
DRAFT = "draft"
EMBEDDING = "embedding"
HEAD = "head"
ROLES = (MAIN, DRAFT, EMBEDDING, HEAD)

# Draft kinds.
MTP = "mtp"
DSPARK = "dspark"
EAGLE = "eagle"
DRAFT_KINDS = (MTP, DSPARK, EAGLE)

# Module kinds: what class of engine layer the module becomes. The declared
# stage keys its rules on these (a global MoE switch applies to routed experts
# only; ModelOpt quantizes heads; Fp8Config never does).
ROUTED_EXPERTS = "routed_experts"
LINEAR = "linear"
EMBEDDING_KIND = "embedding"
HEAD_KIND = "head"
NORM = "norm"
OTHER = "other"
MODULE_KINDS = (ROUTED_EXPERTS, LINEAR, EMBEDDING_KIND, HEAD_KIND, NORM, OTHER)


@dataclass(frozen=True)
class Role:
    """Where a module sits: main stack, a draft layer, the embedding or the head.

    ``layer`` is the runtime layer index (``N + i`` for draft layer ``i``);
    ``draft_index`` is ``i``. Draft-owned embeddings and heads (an MTP layer's
    ``shared_head.head``) are role ``draft``: what matters for routing is that
    they belong to the draft tower.
    """

    kind: str
    draft_kind: str | None = None
    layer: int | None = None
    draft_index: int | None = None

    @property
    def is_draft(self) -> bool:
        return self.kind == DRAFT

    def __str__(self) -> str:
        if self.kind != DRAFT:
            return self.kind if self.layer is None else f"{self.kind} (layer {self.layer})"
        parts = [self.draft_kind or "draft"]
        if self.draft_index is not None:
            parts.append(str(self.draft_index))
        where = f", layer {self.layer}" if self.layer is not None else ""
        return f"draft ({' '.join(parts)}{where})"


def role_label(role: Role) -> str:
    """``main``, ``embedding``, ``head`` or ``draft (mtp)``: one label per run of layers."""
    return f"draft ({role.draft_kind})" if role.is_draft and role.draft_kind else role.kind
