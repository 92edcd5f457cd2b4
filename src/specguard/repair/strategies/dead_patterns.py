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

import functools
import re
from fnmatch import fnmatchcase

from specguard.declared import FNMATCHCASE, VLLM_EXACT, VLLM_SUBSTRING, VLLM_SUFFIX, Pattern
from specguard.declared.index import NameIndex
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
    for i, ov in enumerate(plan.overlays):
        r = resolver.get(id(ov))
        if r is None or not repaired[id(ov)]:  # nothing re-routed (a config-only repair): no entry was for it
            continue
        names = _Names(r)
        others = _Others(r, [rs[i] for rs in plan.runs if len(rs) > i])
        for pat in r.declared_config.exclusions:
            if names.dead(pat) and names.hits(pat) & repaired[id(ov)] and others.dead(pat):  # cheapest first
                key = re.sub(r"\[\d+\]$", "", pat.key).rsplit(".", 1)[-1]
                ov.drop_entries(key, [pat.text], "matches no runtime prefix (SG101)", pattern=pat.key)


class _Others:
    """The same checkpoint under the plan's other runs (engines, platform classes): an entry dead
    where the problem was found may be what another engine excludes by (SGLang's prefixes are
    not vLLM's: S8-NVFP4's ``model.layers.2.self_attn*``). Indexed only when first asked."""

    def __init__(self, first: Resolver, runs: list[Resolver]) -> None:
        self.runs = [r for r in dict.fromkeys(runs) if r is not first]
        self._names: dict[int, _Names] = {}

    def dead(self, pat: Pattern) -> bool:
        for r in self.runs:
            names = self._names.get(id(r)) or self._names.setdefault(id(r), _Names(r))
            if not names.dead(pat):
                return False
        return True


class _Names:
    """One checkpoint's names, indexed once for all its patterns: a pattern is then a scan of
    a joined text, not a Python loop over 45,000 names (as SG101 does, lint/rules_patterns.py)."""

    def __init__(self, r: Resolver) -> None:
        self.r = r
        runtime = r.stored_runtime_prefixes  # SG101's, found once per resolver
        n = r.layout.num_hidden_layers
        self.runtime = {False: NameIndex(runtime),
                        True: NameIndex(x for x in (r.vllm.v41_ignore_name(p, n) for p in runtime) if x is not None)}

    def dead(self, pat: Pattern) -> bool:
        r = self.r
        spellings = [pat]
        if pat.semantics in _VLLM and model_type_of(r.config) in DEEPSEEK_V4_TYPES:
            renamed = r.vllm.exclusion_rename(pat.text, v41=is_deepseek_v41(r.config))
            spellings.append(Pattern(renamed, pat.semantics, pat.key, pat.effect, pat.group))
        index = self.runtime[pat.semantics == FNMATCHCASE]
        return not any(index.any(q) for q in spellings)

    @functools.cached_property
    def checkpoint(self) -> NameIndex:  # asked only for entries dead at run time
        return self.r.checkpoint_index()

    @functools.cached_property
    def _multiline(self) -> list[str]:
        return [m for m in self.r.table.modules if "\n" in m]

    def hits(self, pat: Pattern) -> set[str]:
        """The checkpoint modules the entry was written for (as a glob where vLLM's matching finds none)."""
        hits = set(self.checkpoint.matching(pat))
        if not hits and pat.semantics in _VLLM:  # the glob as one scan (the index leaves out names with a newline)
            glob = Pattern(pat.text, FNMATCHCASE, pat.key, pat.effect, pat.group)
            hits = set(self.checkpoint.matching(glob)) | {m for m in self._multiline if fnmatchcase(m, pat.text)}
        return hits
