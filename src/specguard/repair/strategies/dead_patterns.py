"""Drop exclusion entries that match nothing vLLM 0.33 builds (lint SG101) and were
meant for modules this repair re-routed (S1's ``ignored_layers: ["mtp.*"]``,
S2's ``re:.*mtp\\..*``): they exclude nothing, and a reader would take them
for the fix."""

from __future__ import annotations

import re

from specguard.repair.plan import Plan, Problem


def apply(plan: Plan, problems: list[Problem]) -> None:
    from specguard.lint import lint

    repaired = {(id(p.overlay), n) for p in plan.problems if p.handled for n in p.route.checkpoint_names}
    seen: set[tuple[int, str]] = set()
    for p in plan.problems:
        if (id(p.overlay), "") in seen:
            continue
        seen.add((id(p.overlay), ""))
        for f in lint([p.resolver], select_codes=["SG101"]).findings:
            key = re.sub(r"\[\d+\]$", "", f.data.get("key", "")).rsplit(".", 1)[-1].split(":")[-1]
            if any((id(p.overlay), m) in repaired for m in f.modules):
                p.overlay.drop_entries(key, [f.data["pattern"]], "matches no runtime prefix (SG101)")
