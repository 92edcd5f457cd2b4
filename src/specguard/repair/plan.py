"""What a repair changes, checkpoint by checkpoint, and how it is planned.

``make_plan`` opens the target (and a separate drafter) once per platform class,
collects every runtime module that does not route ``ok``, and hands them to the
strategies in ``STRATEGIES`` order. Each strategy is one small module with an
``apply(plan, problems)`` that edits an :class:`Overlay` (a config copy, modules
to re-encode) and marks the problems it settled; a problem no strategy settles,
or one a strategy declares beyond repair, raises :class:`Unrepairable`.
Nothing is written here: ``repair.write`` turns the plan into a directory.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from specguard.checkpoint.errors import CheckpointError
from specguard.checkpoint.source import Checkpoint
from specguard.engines.vllm.v0_33 import PLATFORMS
from specguard.layouts.registry import text_config
from specguard.layouts.runs import describe as describe  # one definition; strategies import it from here
from specguard.resolve import OK, Resolver, Route

ALL = "all"
TARGET, DRAFTER = "target", "drafter"


class Unrepairable(CheckpointError):
    """The checkpoint cannot be repaired from what it stores (exit 2, nothing written)."""


def platforms_for(choice: str) -> tuple[str, ...]:
    """``all`` -> every platform class vLLM 0.33 distinguishes (V4.1 on cuda/rocm, V4 on cpu)."""
    return PLATFORMS if choice == ALL else (choice,)


@dataclass(frozen=True)
class Change:
    """One edit of a config file: entries added to (+) or dropped from (-) a list, or a key set (=)."""

    file: str
    key: str
    op: str
    values: tuple[Any, ...]
    why: str


def merged(changes: Sequence[Change]) -> list[Change]:
    """Edits of the same list for the same reason, as one."""
    out: dict[tuple, Change] = {}
    for c in changes:
        k = (c.file, c.key, c.op, c.why)
        out[k] = Change(*k[:3], out[k].values + c.values, c.why) if k in out else c
    return list(out.values())


@dataclass
class Overlay:
    """Planned changes to one checkpoint: edited config copies and modules to re-encode."""

    checkpoint: Checkpoint
    role: str  # TARGET or DRAFTER
    config: dict[str, Any]
    hf_quant_config: dict[str, Any] | None
    reencode: dict[str, str] = field(default_factory=dict)  # checkpoint module -> new format
    changes: list[Change] = field(default_factory=list)  # what changed in the configs, and why
    index_add: dict[str, str] = field(default_factory=dict)  # tensor -> file, for weight_map
    rename: dict[str, str] = field(default_factory=dict)  # tensor -> the name vLLM's loader maps

    @classmethod
    def of(cls, checkpoint: Checkpoint, role: str) -> Overlay:
        hf = copy.deepcopy(dict(checkpoint.hf_quant_config)) if checkpoint.hf_quant_config else None
        return cls(checkpoint, role, copy.deepcopy(dict(checkpoint.config or {})), hf)

    # -- where the claim lives ---------------------------------------------------

    def quant_block(self) -> tuple[dict[str, Any], str]:
        """The quantization block vLLM reads, and the file it lives in: config.json's
        ``quantization_config`` first (weight_utils.get_quant_config), else
        hf_quant_config.json's ``quantization`` (ModelOpt's unified export)."""
        cfg = self.config
        for holder in (cfg, text_config(cfg)):
            qc = holder.get("quantization_config")
            if isinstance(qc, dict):
                return qc, "config.json"
        if isinstance(self.hf_quant_config, dict):
            q = self.hf_quant_config.get("quantization")
            return (q if isinstance(q, dict) else self.hf_quant_config), "hf_quant_config.json"
        raise Unrepairable(f"{self.checkpoint.name} [config.json]", "no quantization config to edit")

    def add_entries(self, key: str, entries: Sequence[str], why: str) -> None:
        block, file = self.quant_block()
        have = _entries(block, key)
        new = [e for e in entries if e not in have]
        if new:
            block[key] = [*have, *new]
            self.changes.append(Change(file, key, "+", tuple(new), why))

    def drop_entries(self, key: str, entries: Sequence[str], why: str) -> None:
        block, file = self.quant_block()
        have = _entries(block, key)
        gone = [e for e in have if e in entries]
        if gone:
            block[key] = [e for e in have if e not in entries]
            if not block[key]:
                del block[key]
            self.changes.append(Change(file, key, "-", tuple(gone), why))

    def set_quant_key(self, key: str, value: Any, why: str) -> None:
        """A key of the quantization block itself (GPTQ's ``dynamic``), replaced whole."""
        block, file = self.quant_block()
        if block.get(key) != value:
            block[key] = value
            self.changes.append(Change(file, key, "=", (value,), why))

    def set_key(self, key: str, value: Any, why: str) -> None:
        """A top-level key of config.json's text config (``num_nextn_predict_layers``)."""
        holder = text_config(self.config)
        if not isinstance(holder, dict):
            raise Unrepairable(f"{self.checkpoint.name} [config.json]", "the text config is not an object")
        if holder.get(key) != value:
            holder[key] = value
            self.changes.append(Change("config.json", key, "=", (value,), why))

    def index_outside_drafts(self, resolver: Resolver) -> None:
        """Name in the index the draft tensors stored only in files it never names: vLLM
        opens the indexed files only (SG303; what add-mtp-weights.py does by hand)."""
        c = self.checkpoint
        names = [n for n in c.outside_index if resolver.layout.role(n).is_draft and n not in self.index_add]
        if c.index is None or not names:
            return
        self.index_add.update({n: c.tensors[n].file for n in names})
        files = tuple(sorted({c.tensors[n].file for n in names}))
        self.changes.append(Change("model.safetensors.index.json", "weight_map", "+", files,
                                   f"{len(names)} draft tensor(s) the index never named"))

    def rename_unmapped_experts(self, resolver: Resolver) -> None:
        """Routed-expert tensors named ``experts.{proj}.{e}`` (SG702): rewritten under
        ``experts.{e}.{proj}``, the per-expert names vLLM 0.33's loader maps."""
        from specguard.engines.vllm.loader import MAPPED, expert_load, renamed
        from specguard.layouts import roles as r

        found: dict[str, str] = {}
        for rt in resolver.routes():
            if rt.kind != r.ROUTED_EXPERTS:
                continue
            for module in rt.checkpoint_names:
                mod = resolver.table.modules.get(module)
                if mod is None or ".experts." not in module:
                    continue
                head, below = module.split(".experts.", 1)
                for param in mod.params:
                    got = expert_load(f"{below}.{param}")
                    new = renamed(f"{below}.{param}")
                    if got is not None and got.outcome != MAPPED and new is not None:
                        found[f"{module}.{param}"] = f"{head}.experts.{new}"
        found = {k: v for k, v in found.items() if k not in self.rename}
        if not found:
            return
        self.rename.update(found)
        for shard in sorted({self.checkpoint.tensors[n].file for n in found}):
            n = sum(1 for k in found if self.checkpoint.tensors[k].file == shard)
            self.changes.append(Change(shard, "tensor names", "=", ("experts.<proj>.<e> -> experts.<e>.<proj>",),
                                       f"{n} expert tensor(s) vLLM's loader cannot map"))

    @property
    def changed(self) -> bool:
        edits = bool(self.reencode) or bool(self.index_add) or bool(self.rename)
        return edits or self.config != dict(self.checkpoint.config or {}) or (
            self.hf_quant_config != (dict(self.checkpoint.hf_quant_config)
                                     if self.checkpoint.hf_quant_config else None))


@dataclass
class Problem:
    """One runtime module that does not route ``ok`` on one platform class."""

    platform: str
    overlay: Overlay
    resolver: Resolver
    route: Route
    handled: bool = False

    @property
    def where(self) -> str:
        return f"{self.overlay.checkpoint.name} [{self.route.prefix}]"


@dataclass
class Plan:
    platforms: tuple[str, ...]
    overlays: list[Overlay]  # target first, then a separate drafter
    problems: list[Problem]

    @property
    def clean(self) -> bool:
        return not self.problems and not any(ov.index_add or ov.rename for ov in self.overlays)

    def pending(self, pick: Callable[[Problem], bool] = lambda p: True) -> list[Problem]:
        return [p for p in self.problems if not p.handled and pick(p)]


def open_resolvers(target: Checkpoint, drafter: Checkpoint | None, platform: str,
                   draft_method: str | None = None) -> list[Resolver]:
    """Target (and drafter) resolvers as ``specguard route`` builds them, never memoized."""
    t = Resolver(target, draft_method=None if drafter else draft_method, platform=platform)
    if drafter is None:
        return [t]
    return [t, Resolver(drafter, draft_method=draft_method or "dspark", target=t, platform=platform)]


def make_plan(target: Checkpoint, drafter: Checkpoint | None, platforms: Sequence[str],
              draft_method: str | None = None) -> Plan:
    overlays = [Overlay.of(target, TARGET)] + ([Overlay.of(drafter, DRAFTER)] if drafter else [])
    problems: list[Problem] = []
    for platform in platforms:
        for overlay, res in zip(overlays, open_resolvers(target, drafter, platform, draft_method), strict=True):
            problems += [Problem(platform, overlay, res, rt) for rt in res.routes() if rt.verdict != OK]
            overlay.index_outside_drafts(res)
            overlay.rename_unmapped_experts(res)
    plan = Plan(tuple(platforms), overlays, problems)
    if plan.clean:
        return plan
    from specguard.repair.strategies import STRATEGIES

    for strategy in STRATEGIES:
        strategy.apply(plan, plan.pending())
    left = plan.pending()
    if left:
        p = left[0]
        raise Unrepairable(p.where, f"no repair strategy for {p.route.verdict} on {p.platform}: {p.route.reason}")
    return plan


def _entries(block: Mapping[str, Any], key: str) -> list[Any]:
    """The list under ``key`` (absent or not a list: empty)."""
    value = block.get(key)
    return list(value) if isinstance(value, list) else []
