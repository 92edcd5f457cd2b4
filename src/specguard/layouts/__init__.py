"""Per-family naming rules: checkpoint names <-> runtime prefixes, and roles.

Pure Python over strings and config dicts; never reads files, never imports torch.
"""

from specguard.layouts.base import SGLANG, VLLM, Layout, Placement
from specguard.layouts.deepseek import DeepseekV3Layout, DeepseekV4Layout
from specguard.layouts.generic import EagleLayout, GenericLayout
from specguard.layouts.names import expert_index, layer_index, module_name
from specguard.layouts.registry import LayoutError, draft_kind_for, layout_for, text_config
from specguard.layouts.roles import (
    DRAFT,
    DSPARK,
    EAGLE,
    EMBEDDING,
    EMBEDDING_KIND,
    HEAD,
    HEAD_KIND,
    LINEAR,
    MAIN,
    MTP,
    NORM,
    OTHER,
    ROUTED_EXPERTS,
    Role,
)

__all__ = [
    "DRAFT", "DSPARK", "EAGLE", "EMBEDDING", "EMBEDDING_KIND", "HEAD", "HEAD_KIND", "LINEAR",
    "MAIN", "MTP", "NORM", "OTHER", "ROUTED_EXPERTS", "SGLANG", "VLLM",
    "DeepseekV3Layout", "DeepseekV4Layout", "EagleLayout", "GenericLayout", "Layout",
    "LayoutError", "Placement", "Role", "draft_kind_for", "expert_index", "layer_index",
    "layout_for", "module_name", "text_config",
]
