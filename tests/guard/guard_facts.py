"""Names the guard's scenario tests expect, derived from a checkpoint's config."""

from __future__ import annotations

from pathlib import Path

from specguard.refdecoder.loader import ExpertConfig

SCALES_NEVER_LOADED = ("w13_input_scale", "w13_weight_scale_2", "w2_input_scale",
                       "w2_weight_scale_2")


def draft_layer(path: Path) -> int:
    """Runtime index of the first MTP layer: N = num_hidden_layers."""
    return ExpertConfig.from_dir(path).num_hidden_layers


def draft_params(path: Path) -> str:
    return f"model.layers.{draft_layer(path)}.mtp_block.ffn.experts.routed_experts"


def never_loaded(path: Path) -> tuple[str, ...]:
    """The draft layer's four NVFP4 per-tensor scales (seed 001)."""
    return tuple(f"{draft_params(path)}.{p}" for p in SCALES_NEVER_LOADED)
