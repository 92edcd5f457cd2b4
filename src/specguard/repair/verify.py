"""Prove a written repair the way a user would: ``specguard route`` and
``specguard lint`` on the new directory, once per platform class."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from specguard.checkpoint.errors import CheckpointError
from specguard.checkpoint.source import open_checkpoint
from specguard.lint import lint
from specguard.lint.finding import ERROR
from specguard.repair.plan import DRAFTER, TARGET, open_resolvers
from specguard.resolve import OK


class RepairFailed(CheckpointError):
    """The written checkpoint still routes a module wrong: a bug in a strategy, never shipped."""


@dataclass(frozen=True)
class Verified:
    platforms: tuple[str, ...]
    modules: int  # runtime modules routed per platform
    warnings: tuple[str, ...]  # lint warnings left (codes), e.g. SG402 on U8-labelled scales


def verify(paths: Mapping[str, Path], platforms: Sequence[str], draft_method: str | None = None) -> Verified:
    modules, warnings = 0, set()
    for platform in platforms:
        target = open_checkpoint(paths[TARGET])
        drafter = open_checkpoint(paths[DRAFTER]) if DRAFTER in paths else None
        rs = open_resolvers(target, drafter, platform, draft_method)
        routes = [rt for r in rs for rt in r.routes()]
        bad = [rt for rt in routes if rt.verdict != OK]
        if bad:
            raise RepairFailed(f"{bad[0].prefix} on {platform}",
                               f"still {bad[0].verdict} after the repair ({bad[0].reason}); nothing written")
        findings = lint(rs).findings
        errors = [f for f in findings if f.severity == ERROR]
        if errors:
            raise RepairFailed(f"lint on {platform}", f"{errors[0].code}: {errors[0].message}; nothing written")
        warnings |= {f.code for f in findings}
        modules = len(routes)
    return Verified(tuple(platforms), modules, tuple(sorted(warnings)))
