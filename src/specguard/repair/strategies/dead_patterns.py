"""Drop exclusion entries that match nothing vLLM builds and were meant for modules
this repair re-routed (S1's ``ignored_layers: ["mtp.*"]``, S2's ``re:.*mtp\\..*``):
they exclude nothing, and a reader would take them for the fix.

"Matches nothing" is lint SG101's test (lint/rules_patterns.py), asked of the
same stages: the entry, as the engine renames it (DeepSeek-V4's weights mapper
for vLLM's exact/substring/suffix lists), against every runtime prefix the
layout gives, or for the V4.1 ``ignore`` list the ``mtp.{k}.ffn.experts`` names
it rebuilds from them.
"""

from __future__ import annotations

import re
from fnmatch import fnmatchcase

from specguard.declared import FNMATCHCASE, VLLM_EXACT, VLLM_SUBSTRING, VLLM_SUFFIX, Pattern
from specguard.layouts.registry import DEEPSEEK_V4_TYPES, is_deepseek_v41, model_type_of
from specguard.repair.plan import Plan, Problem
from specguard.resolve import Resolver

_VLLM = (VLLM_EXACT, VLLM_SUBSTRING, VLLM_SUFFIX)


def apply(plan: Plan, problems: list[Problem]) -> None:
    repaired: dict[int, set[str]] = {}
    resolver: dict[int, Resolver] = {}
    for p in plan.problems:
        if p.handled:
            repaired.setdefault(id(p.overlay), set()).update(p.route.checkpoint_names)
            resolver.setdefault(id(p.overlay), p.resolver)
    for ov in plan.overlays:
        r = resolver.get(id(ov))
        if r is None:
            continue
        for pat in r.declared_config.exclusions:
            if _hits(r, pat) & repaired[id(ov)] and _dead(r, pat):
                key = re.sub(r"\[\d+\]$", "", pat.key).rsplit(".", 1)[-1]
                ov.drop_entries(key, [pat.text], "matches no runtime prefix (SG101)", pattern=pat.key)


def _dead(r: Resolver, pat: Pattern) -> bool:
    runtime = sorted({p for m in r.table.modules for p in r.layout.runtime_prefixes(m)})
    if pat.semantics == FNMATCHCASE:
        n = r.layout.num_hidden_layers
        runtime = [x for x in (r.vllm.v41_ignore_name(p, n) for p in runtime) if x is not None]
    spellings = [pat]
    if pat.semantics in _VLLM and model_type_of(r.config) in DEEPSEEK_V4_TYPES:
        renamed = r.vllm.exclusion_rename(pat.text, v41=is_deepseek_v41(r.config))
        spellings.append(Pattern(renamed, pat.semantics, pat.key, pat.effect, pat.group))
    return not any(q.matches(p) for q in spellings for p in runtime)


def _hits(r: Resolver, pat: Pattern) -> set[str]:
    """The checkpoint modules the entry was written for (as a glob where vLLM's matching finds none)."""
    hits = {m for m in r.table.modules if pat.matches(m)}
    if not hits and pat.semantics in _VLLM:
        hits = {m for m in r.table.modules if fnmatchcase(m, pat.text)}
    return hits
