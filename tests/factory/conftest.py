"""Every scenario written once per test session (about a second in all)."""

from __future__ import annotations

from pathlib import Path

import pytest

from specguard.factory import SCENARIOS, ScenarioInfo, write_scenario


@pytest.fixture(scope="session")
def written(tmp_path_factory: pytest.TempPathFactory) -> dict[str, ScenarioInfo]:
    root: Path = tmp_path_factory.mktemp("scenarios")
    return {name: write_scenario(name, root / name) for name in SCENARIOS}


def checkpoints(info: ScenarioInfo):
    """(path, expected) for the target and, for S4, the drafter."""
    yield info.path, info.expected
    if info.drafter_path is not None:
        yield info.drafter_path, info.drafter_expected
