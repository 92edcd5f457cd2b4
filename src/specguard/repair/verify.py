"""Prove a written repair the way a user would, once per platform class: every
runtime module of the new directory routes ``ok`` (``specguard route``), and
whatever ``check`` adds (the fix command adds ``specguard lint``: no error)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from specguard.checkpoint.errors import CheckpointError
from specguard.checkpoint.source import open_checkpoint
from specguard.repair.plan import DRAFTER, TARGET, open_resolvers
from specguard.resolve import OK, Resolver


class RepairFailed(CheckpointError):
    """The written checkpoint still routes a module wrong: a bug in a strategy, never kept."""


@dataclass(frozen=True)
class Verified:
    platforms: tuple[str, ...]
    modules: int  # runtime modules routed per platform
    notes: tuple[str, ...] = ()  # what ``check`` reported and let pass (lint warnings left)


Check = Callable[[list[Resolver], str], Sequence[str]]  # raises RepairFailed, or returns notes


def verify(paths: Mapping[str, Path], platforms: Sequence[str], draft_method: str | None = None,
           check: Check | None = None) -> Verified:
    modules, notes = 0, set[str]()
    for platform in platforms:
        target = open_checkpoint(paths[TARGET])
        drafter = open_checkpoint(paths[DRAFTER]) if DRAFTER in paths else None
        rs = open_resolvers(target, drafter, platform, draft_method)
        routes = [rt for r in rs for rt in r.routes()]
        bad = [rt for rt in routes if rt.verdict != OK]
        if bad:
            raise RepairFailed(f"{bad[0].prefix} on {platform}",
                               f"still {bad[0].verdict} after the repair ({bad[0].reason}); nothing written")
        if check is not None:
            notes.update(check(rs, platform))
        modules = len(routes)
    return Verified(tuple(platforms), modules, tuple(sorted(notes)))
