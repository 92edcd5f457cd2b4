"""Prove a written repair the way a user would, once per engine and platform class:
every runtime module of the new directory routes ``ok`` (``specguard route``;
``unknown``, where specguard cannot say what the engine builds, is counted, not
vouched for), and whatever ``check`` adds (the fix command adds ``specguard lint``:
no error)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from specguard.checkpoint.errors import CheckpointError
from specguard.checkpoint.source import open_checkpoint
from specguard.engines.registry import DEFAULT as DEFAULT_ENGINE
from specguard.engines.registry import engine as engine_of
from specguard.repair.plan import DRAFTER, TARGET, open_resolvers, platforms_of
from specguard.resolve import OK, UNKNOWN, Resolver


class RepairFailed(CheckpointError):
    """The written checkpoint still routes a module wrong: a bug in a strategy, never kept."""


@dataclass(frozen=True)
class Verified:
    platforms: tuple[str, ...]
    modules: int  # runtime modules routed per platform
    notes: tuple[str, ...] = ()  # what ``check`` reported and let pass (lint warnings left)
    engines: tuple[str, ...] = (DEFAULT_ENGINE,)
    unvouched: int = 0  # of ``modules``, those routed ``unknown`` (the most under any one run)


Check = Callable[[list[Resolver], str], Sequence[str]]  # raises RepairFailed, or returns notes


def verify(paths: Mapping[str, Path], platforms: Sequence[str], draft_method: str | None = None,
           check: Check | None = None, engines: Sequence[str] = (DEFAULT_ENGINE,)) -> Verified:
    modules, unvouched, notes = 0, 0, set[str]()
    for key in engines:
        for platform in platforms_of(key, platforms):
            target = open_checkpoint(paths[TARGET])
            drafter = open_checkpoint(paths[DRAFTER]) if DRAFTER in paths else None
            rs = open_resolvers(target, drafter, platform, draft_method, key)
            routes = [rt for r in rs for rt in r.routes()]
            bad = [rt for rt in routes if rt.verdict not in (OK, UNKNOWN)]
            on = f"{engine_of(key).name} {platform}" if len(engines) > 1 else platform
            if bad:
                raise RepairFailed(f"{bad[0].prefix} on {on}",
                                   f"still {bad[0].verdict} after the repair ({bad[0].reason}); nothing written")
            if check is not None:
                notes.update(check(rs, on))
            modules = len(routes)
            unvouched = max(unvouched, sum(1 for rt in routes if rt.verdict == UNKNOWN))
    return Verified(tuple(platforms), modules, tuple(sorted(notes)), tuple(engines), unvouched)
