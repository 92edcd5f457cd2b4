"""Which parameter vLLM 0.33's loader writes a routed-expert tensor into, by name.

fused_moe/routed_experts.py ``RoutedExperts.load_weights`` with the mapping of
``build_expert_params_mapping(include_fused=True)``: fused entries first
(``experts.gate_up_proj`` -> ``w13_weight``, ``experts.down_proj`` ->
``w2_weight``), then per-expert ones (``experts.{e}.gate_proj.`` -> ``w13_``,
``experts.{e}.down_proj.`` -> ``w2_``). A checkpoint name is matched by
*substring*; the matched part is replaced and the rest must name a parameter
of the layer, else ``AttributeError``; a name no entry matches is skipped.
"""
from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

# (gate, up, down, fused gate_up) checkpoint names per convention
CONVENTIONS = (("gate_proj", "up_proj", "down_proj", "gate_up_proj"), ("w1", "w3", "w2", "w13"))

MAPPED, FAILS, SKIPPED = "mapped", "fails to start", "skipped"


@dataclass(frozen=True)
class ExpertLoad:
    outcome: str  # mapped / fails to start / skipped
    parameter: str | None  # the attribute vLLM looks up (w2_qweight, w2_weight.42.qweight)


def expert_load(rest: str, is_3d: bool = False) -> ExpertLoad | None:
    """``rest``: a tensor name after the layer's ``experts.`` (``42.down_proj.qweight``,
    ``down_proj.42.qweight``). None: not an expert name this loader reads."""
    parts = rest.split(".")
    for gate, up, down, fused in CONVENTIONS:
        if parts[0].isdecimal() and len(parts) > 2 and parts[1] in (gate, up, down, fused):
            slot = "w2_" if parts[1] == down else "w13_"
            return ExpertLoad(MAPPED, slot + ".".join(parts[2:]))
        if parts[0] in (fused, down):
            # the fused entry ``experts.{fused|down}`` matches; the rest of the name is kept
            slot = "w13_weight" if parts[0] == fused else "w2_weight"
            tail = ".".join(parts[1:])
            if is_3d and not tail:  # a fused [E, ...] tensor named by its module
                return ExpertLoad(MAPPED, slot)
            return ExpertLoad(FAILS, f"{slot}.{tail}" if tail else slot)
        if parts[0] in (gate, up):
            return ExpertLoad(SKIPPED, None)
    return None


PROJECTIONS = frozenset(name for names in CONVENTIONS for name in names)

# A name whose part after its first ``.experts`` is mapped whatever its parameter
# (``expert_module_mapped``): ``<e>.<projection>`` with a decimal expert index.
_MAPPED_NAME = re.compile(r"^(?:(?!\.experts).)*\.experts\.*\d+\.(?:"
                          + "|".join(map(re.escape, sorted(PROJECTIONS))) + r")(?:\.|$)", re.M)


def all_mapped(names: Sequence[str]) -> bool:
    """Every module named ``experts.<e>.<projection>``: one scan of a layer, not one per expert."""
    return len(_MAPPED_NAME.findall("\n".join(names))) == len(names)


def expert_module_mapped(below: str) -> bool:
    """True when every tensor of the module ``below`` the layer's ``experts.`` (``42.down_proj``)
    is either mapped or not an expert name, whatever its parameter: the per-expert entry
    matches ``{e}.{projection}.`` first (``expert_load``), so a lint never looks at its tensors
    one by one (45,000 expert modules in a DeepSeek export, benchmarks/lint_export.py)."""
    parts = below.split(".", 2)
    return len(parts) >= 2 and parts[0].isdecimal() and parts[1] in PROJECTIONS


def renamed(rest: str) -> str | None:
    """The per-expert spelling the loader maps (``down_proj.42.qweight`` ->
    ``42.down_proj.qweight``), for names whose index follows the projection."""
    parts = rest.split(".")
    if len(parts) >= 2 and parts[1].isdecimal() and not parts[0].isdecimal():
        return ".".join([parts[1], parts[0], *parts[2:]])
    return None
