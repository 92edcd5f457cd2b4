"""Repair strategies, tried in this order; each is one small module with
``apply(plan, problems)`` (see repair/plan.py). A new strategy (a GPTQ
``dynamic`` rule, say) is a new module added to ``STRATEGIES``."""

from __future__ import annotations

from specguard.repair.strategies import (
    dead_patterns,
    draft_layers,
    exclude,
    missing_tensors,
    reencode,
    sglang_hybrid,
    v41_ignore,
)

STRATEGIES = (missing_tensors, reencode, v41_ignore, sglang_hybrid, exclude, draft_layers, dead_patterns)

__all__ = ["STRATEGIES"]
