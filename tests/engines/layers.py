"""vLLM's own layer classes, uninitialised: what ``get_quant_method`` dispatches on by type."""

from __future__ import annotations

from typing import Any

from vllm.model_executor.layers.fused_moe import RoutedExperts
from vllm.model_executor.layers.linear import LinearBase
from vllm.model_executor.layers.vocab_parallel_embedding import ParallelLMHead

CLASSES = {"routed_experts": RoutedExperts, "linear": LinearBase, "head": ParallelLMHead}


def bare_layer(kind: str) -> Any:
    """An instance of the layer class for ``kind``, built without running its __init__."""
    layer = object.__new__(CLASSES[kind])
    layer.__dict__["moe_config"] = None
    return layer
