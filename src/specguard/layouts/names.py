"""Name helpers shared by every layout: layer index, expert index, tensor leaf.

A runtime prefix may hold several integers (``model.layers.43.ffn.experts.12``);
the layer index is the integer right after a ``layers.`` segment. vLLM's
``extract_layer_index`` (vllm/model_executor/models/utils.py) instead asserts
that the name holds exactly one integer, so it cannot be used on expert names.
"""

from __future__ import annotations

import re

from specguard.formats.modules import split_name

# `layers.N` as whole segments: `model.layers.3`, `layers.3.attn`, `mtp.layers.0`;
# not `sublayers.3` or `layers_3`.
_LAYER_RE = re.compile(r"(?:^|\.)layers\.(\d+)(?=\.|$)")
_EXPERT_RE = re.compile(r"(?:^|\.)experts\.(\d+)(?=\.|$)")


def layer_index(name: str) -> int | None:
    """The integer after the first ``layers.`` segment, or None.

    >>> layer_index("model.layers.43.ffn.experts.12.w1")
    43
    """
    m = _LAYER_RE.search(name)
    return int(m.group(1)) if m else None


def expert_index(name: str) -> int | None:
    """The integer after an ``experts.`` segment (a per-expert checkpoint name)."""
    m = _EXPERT_RE.search(name)
    return int(m.group(1)) if m else None


def module_name(name: str) -> str:
    """A tensor name without its parameter leaf; a module name is returned as is.

    Uses the formats stage's suffix table so both stages agree on what a
    module is (``layers.0.ffn.experts.3.w1.scale`` -> ``layers.0.ffn.experts.3.w1``).
    """
    return split_name(name)[0]
