"""The demo's scenarios repaired by ``specguard fix``, for ``specguard demo --fixed``
(engine/demo.py loads them under the stock ``global`` policy as a row of their own)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from specguard.checkpoint.source import open_checkpoint
from specguard.factory import ScenarioInfo
from specguard.repair.plan import ALL, make_plan, platforms_for
from specguard.repair.verify import verify
from specguard.repair.write import write_repair


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
