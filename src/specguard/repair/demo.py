"""The repaired checkpoint under a stock engine's routing, for ``specguard demo --fixed``.

``fixed_infos`` runs ``specguard fix`` (default ``--platform all``) on the demo's
exported scenarios; ``run_fixed`` loads the result under the ``global`` policy
(what vLLM 0.33 builds, engine/policies.py) and reports it as its own row.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path

from specguard.checkpoint.source import open_checkpoint
from specguard.factory import ScenarioInfo
from specguard.repair.plan import ALL, make_plan, platforms_for
from specguard.repair.verify import verify
from specguard.repair.write import write_repair

FIXED = "fixed, global"  # the row's label: repaired checkpoint, stock engine routing


def fix_scenario(info: ScenarioInfo, out: Path, platform: str = ALL) -> ScenarioInfo:
    """``info`` pointing at its repaired copy under ``out`` (itself where nothing needs repair)."""
    platforms = platforms_for(platform)
    drafter = open_checkpoint(info.drafter_path) if info.drafter_path else None
    plan = make_plan(open_checkpoint(info.path), drafter, platforms)
    if plan.clean:
        return info
    written = write_repair(plan, out, lambda paths: verify(paths, platforms))
    return replace(info, path=written[0].path, drafter_path=written[1].path if len(written) > 1 else None)


def fixed_infos(infos: Mapping[str, ScenarioInfo], workdir: Path, platform: str = ALL) -> dict[str, ScenarioInfo]:
    """Every exported scenario repaired (the BF16 reference ``s8`` kept as it is)."""
    return {name: info if name == "s8" else fix_scenario(info, workdir / f"{name}-fixed", platform)
            for name, info in infos.items()}


def run_fixed(scenario: str, fixed: dict[str, ScenarioInfo], prompts: list[list[int]], new_tokens: int,
              k: int, device: str, tick: Callable[[], None] = lambda: None, guard: bool = True):
    """The repaired ``scenario`` under the stock (``global``) policy, labelled ``FIXED``."""
    from specguard.engine.demo import run_case

    result = run_case(scenario, "global", fixed, prompts, new_tokens, k, device, tick, guard)
    result.policy = FIXED
    return result
