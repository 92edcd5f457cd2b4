"""Scenario checkpoints and their repairs, written once per session."""

from __future__ import annotations

from pathlib import Path

import pytest

from specguard.cli import main


def fix(src: Path, out: Path, *extra: str, draft: Path | None = None) -> int:
    args = ["fix", str(src), "--out", str(out), *extra]
    if draft is not None:
        args += ["--draft", str(draft)]
    return main(args)


@pytest.fixture(scope="session")
def repaired(scenarios, tmp_path_factory: pytest.TempPathFactory):
    """``(scenario, platform) -> DIR`` (None where fix had nothing to write), fixed lazily."""
    root = tmp_path_factory.mktemp("repaired")
    cache: dict[tuple[str, str], Path | None] = {}

    def get(name: str, platform: str = "all") -> Path | None:
        key = (name, platform)
        if key not in cache:
            info = scenarios[name]
            out = root / f"{name}-{platform}"
            rc = fix(info.path, out, "--platform", platform, draft=info.drafter_path)
            assert rc == 0, (name, platform, rc)
            cache[key] = out if out.exists() else None
        return cache[key]

    return get
