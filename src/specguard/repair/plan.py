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
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from specguard.checkpoint.errors import CheckpointError
from specguard.checkpoint.source import Checkpoint
from specguard.declared.edits import CONFIG_JSON, HF_QUANT_JSON, Applicability, ConfigEdit, Fix, apply_all
from specguard.engines.registry import DEFAULT as DEFAULT_ENGINE
from specguard.engines.registry import engine as engine_of
from specguard.errors import UsageError
from specguard.layouts.registry import text_config
from specguard.layouts.runs import describe as describe  # one definition; strategies import it from here
from specguard.resolve import OK, UNKNOWN, Resolver, Route

ALL = "all"
TARGET, DRAFTER = "target", "drafter"
DEFAULT_PLATFORM = "cuda"  # Resolver's default platform class


class Unrepairable(CheckpointError):
    """The checkpoint cannot be repaired from what it stores (exit 2, nothing written)."""


def platforms_for(choice: str, engine: str = DEFAULT_ENGINE) -> tuple[str, ...]:
    """``all`` -> every platform class the engine distinguishes (vLLM: V4.1 on cuda/rocm, V4 on cpu)."""
    return engine_of(engine).platforms if choice == ALL else (choice,)


def runs_for(engines: Sequence[str], choice: str) -> list[tuple[str, str]]:
    """(engine key, platform class) for every engine asked for: ``all`` -> each platform class
    that engine distinguishes (``Engine.platforms``); one class -> that class on every engine
    (UsageError where an engine models no such class)."""
    out: list[tuple[str, str]] = []
    for key in engines:
        own = engine_of(key).platforms
        if not own:  # an engine whose builds no platform class changes: routed once
            out.append((key, DEFAULT_PLATFORM if choice == ALL else choice))
            continue
        if choice != ALL and choice not in own:
            raise UsageError(f"--platform {choice}: {key} models no such platform class ({', '.join(own)})")
        out += [(key, p) for p in (own if choice == ALL else (choice,))]
    return out


def platforms_of(engine: str, platforms: Sequence[str]) -> list[str]:
    """Those of ``platforms`` the engine distinguishes (one, the first, where it distinguishes none)."""
    own = engine_of(engine).platforms
    return [p for p in platforms if p in own] if own else list(platforms[:1])


@dataclass(frozen=True)
class Change:
    """One planned change and why. A config change is a ``ConfigEdit`` (the data lint prints as a
    finding's fix and ``specguard fix`` writes); an index or tensor-name change is described by
    ``text``. ``prefixes``: the runtime modules it makes route as stored (a dead entry's drop:
    none, ``pattern`` names it)."""

    why: str
    edit: ConfigEdit | None = None
    text: str = ""
    prefixes: tuple[str, ...] = ()
    applicability: Applicability = Applicability.SAFE
    platforms: tuple[str, ...] = ()  # PLATFORM: where it is right
    pattern: str | None = None  # the pattern key (``quantization_config.ignored_layers[0]``) a drop is for

    def __str__(self) -> str:
        return str(self.edit) if self.edit is not None else self.text


def merged(changes: Sequence[Change]) -> list[Change]:
    """Edits of the same list for the same reason, as one (what fix prints)."""
    out: dict[tuple, Change] = {}
    for c in changes:
        e = c.edit
        if e is None or e.op not in ("extend", "discard"):
            out[(id(c),)] = c
            continue
        k = (e.file, e.path, e.op, c.why)
        if k in out:
            prev = out[k]
            assert prev.edit is not None
            values = [*prev.edit.value, *(v for v in e.value if v not in prev.edit.value)]
            out[k] = replace(prev, edit=replace(prev.edit, value=values), prefixes=prev.prefixes + c.prefixes)
        else:
            out[k] = c
    return list(out.values())


def combined(changes: Sequence[Change], reencode: Sequence[str] = (), message: str = "") -> Fix | None:
    """The changes as one finding's ``Fix``: their edits, the modules re-encoded, the
    applicability of the strongest (a re-encode over a platform-specific edit over a safe one)."""
    if not changes and not reencode:
        return None
    kinds = {c.applicability for c in changes} | ({Applicability.REENCODE} if reencode else set())
    applicability = next(a for a in _STRENGTH if a in kinds)
    platforms = sorted({p for c in changes for p in c.platforms}) if applicability == Applicability.PLATFORM else []
    edits = tuple(c.edit for c in merged(changes) if c.edit is not None)
    text = message or "; ".join(dict.fromkeys(f"{c} ({c.why})" for c in merged(changes)))
    targets = tuple(dict.fromkeys(p for c in changes for p in c.prefixes))
    return Fix(text, edits, applicability, tuple(platforms), tuple(reencode), targets)


_STRENGTH = (Applicability.REENCODE, Applicability.PLATFORM, Applicability.SAFE)


@dataclass
class Overlay:
    """Planned changes to one checkpoint: config edits (the configs are the originals with
    them applied), modules to re-encode, index and tensor-name changes."""

    checkpoint: Checkpoint
    role: str  # TARGET or DRAFTER
    reencode: dict[str, str] = field(default_factory=dict)  # checkpoint module -> new format
    changes: list[Change] = field(default_factory=list)  # what changes, and why
    index_add: dict[str, str] = field(default_factory=dict)  # tensor -> file, for weight_map
    rename: dict[str, str] = field(default_factory=dict)  # tensor -> the name vLLM's loader maps

    @classmethod
    def of(cls, checkpoint: Checkpoint, role: str) -> Overlay:
        return cls(checkpoint, role)

    @property
    def edits(self) -> list[ConfigEdit]:
        return [c.edit for c in self.changes if c.edit is not None]

    def _configs(self) -> tuple[dict[str, Any], dict[str, Any] | None]:
        c = self.checkpoint
        return apply_all(self.edits, copy.deepcopy(dict(c.config or {})),
                         copy.deepcopy(dict(c.hf_quant_config)) if c.hf_quant_config else None)

    @property
    def config(self) -> dict[str, Any]:
        """config.json with every planned edit applied."""
        return self._configs()[0]

    @property
    def hf_quant_config(self) -> dict[str, Any] | None:
        return self._configs()[1]

    # -- where the claim lives ---------------------------------------------------

    def quant_block(self) -> tuple[dict[str, Any], str, tuple[str, ...]]:
        """The quantization block vLLM reads, the file it lives in and its path there:
        config.json's ``quantization_config`` first (weight_utils.get_quant_config), else
        hf_quant_config.json's ``quantization`` (ModelOpt's unified export)."""
        cfg, hf = self._configs()
        for holder in (cfg, text_config(cfg)):
            qc = holder.get("quantization_config")
            if isinstance(qc, dict):
                return qc, CONFIG_JSON, ("quantization_config",)
        if isinstance(hf, dict):
            q = hf.get("quantization")
            return (q, HF_QUANT_JSON, ("quantization",)) if isinstance(q, dict) else (hf, HF_QUANT_JSON, ())
        raise Unrepairable(f"{self.checkpoint.name} [config.json]", "no quantization config to edit")

    def add_entries(self, key: str, entries: Sequence[str], why: str, prefixes: Sequence[str] = (),
                    applicability: Applicability = Applicability.SAFE, platforms: Sequence[str] = ()) -> None:
        block, file, path = self.quant_block()
        have = _entries(block, key)
        new = [e for e in entries if e not in have]
        if new:
            self.changes.append(Change(why, ConfigEdit(file, (*path, key), "extend", new), prefixes=tuple(prefixes),
                                       applicability=applicability, platforms=tuple(platforms)))
            self._mirror(file, key, "extend", new, why, prefixes, applicability, platforms)

    def drop_entries(self, key: str, entries: Sequence[str], why: str, pattern: str | None = None) -> None:
        block, file, path = self.quant_block()
        gone = [e for e in _entries(block, key) if e in entries]
        if gone:
            self.changes.append(Change(why, ConfigEdit(file, (*path, key), "discard", gone), pattern=pattern))
            self._mirror(file, key, "discard", gone, why, pattern=pattern)

    def _mirror(self, file: str, key: str, op: str, entries: Sequence[str], why: str, prefixes: Sequence[str] = (),
                applicability: Applicability = Applicability.SAFE, platforms: Sequence[str] = (),
                pattern: str | None = None) -> None:
        """The same change to hf_quant_config.json's ModelOpt list where config.json holds the claim
        and the export keeps both (ModelOpt writes both files): vLLM and SGLang read config.json's
        only (vllm transformers_utils/config.py ``get_config``; sglang configs/model_config.py
        ``_parse_quant_hf_config``: hf_quant_config.json only without it), other readers the
        standalone file, and lint's SG103 compares them. The two lists then say one thing."""
        hf = self.hf_quant_config
        q = hf.get("quantization") if isinstance(hf, dict) else None
        if file != CONFIG_JSON or key not in MODELOPT_LISTS or not isinstance(q, dict) \
                or not isinstance(q.get("exclude_modules"), list):
            return
        have = q["exclude_modules"]
        values = [e for e in entries if (e not in have) == (op == "extend")]
        if values:
            self.changes.append(Change(why, ConfigEdit(HF_QUANT_JSON, ("quantization", "exclude_modules"), op, values),
                                       prefixes=tuple(prefixes), applicability=applicability,
                                       platforms=tuple(platforms), pattern=pattern))

    def set_quant_key(self, key: str, value: Any, why: str, prefixes: Sequence[str] = ()) -> None:
        """A key of the quantization block itself (GPTQ's ``dynamic``), replaced whole."""
        block, file, path = self.quant_block()
        if block.get(key) != value:
            self.changes.append(Change(why, ConfigEdit(file, (*path, key), "set", value), prefixes=tuple(prefixes)))

    def set_key(self, key: str, value: Any, why: str, prefixes: Sequence[str] = ()) -> None:
        """A top-level key of config.json's text config (``num_nextn_predict_layers``)."""
        holder = text_config(self.config)
        if not isinstance(holder, dict):
            raise Unrepairable(f"{self.checkpoint.name} [config.json]", "the text config is not an object")
        if holder.get(key) != value:
            self.changes.append(Change(why, ConfigEdit(CONFIG_JSON, (key,), "set", value), prefixes=tuple(prefixes)))

    def index_outside_drafts(self, resolver: Resolver) -> None:
        """Name in the index the draft tensors stored only in files it never names: vLLM
        opens the indexed files only (SG303; what add-mtp-weights.py does by hand)."""
        c = self.checkpoint
        names = [n for n in c.outside_index if resolver.layout.role(n).is_draft and n not in self.index_add]
        if c.index is None or not names:
            return
        self.index_add.update({n: c.tensors[n].file for n in names})
        files = tuple(sorted({c.tensors[n].file for n in names}))
        self.changes.append(Change(f"{len(names)} draft tensor(s) the index never named",
                                   text=f"model.safetensors.index.json weight_map + {', '.join(files)}"))

    def rename_unmapped_experts(self, resolver: Resolver) -> None:
        """Routed-expert tensors named ``experts.{proj}.{e}`` (SG702): rewritten under
        ``experts.{e}.{proj}``, the per-expert names vLLM 0.33's loader maps."""
        from specguard.layouts import roles as r

        loader = getattr(resolver.vllm, "loader", None)
        if loader is None:  # an engine with no model of its expert loader: nothing to rename by
            return

        found: dict[str, str] = {}
        mapped: dict[str, bool] = {}  # by ``{e}.{proj}``: the same few hundred in every layer
        known: set[tuple[str, str]] = set()  # ``Resolver.expert_parts`` of modules known to map

        def is_mapped(below: str) -> bool:
            hit = mapped.get(below)
            if hit is None:
                hit = mapped[below] = loader.expert_module_mapped(below)
            return hit

        for rt in resolver.routes():
            if rt.kind != r.ROUTED_EXPERTS:
                continue
            # a layer's experts name a few hundred ``{e}.{proj}``, the same in every layer: the route's set
            # of them (SG702's, made once per route), less those known to map, skips a layer when the rest map
            cut = resolver.expert_parts(rt.prefix) - known
            if all(is_mapped(b) for b in _after_experts_dot(cut)):
                known |= cut
                continue
            for module in rt.checkpoint_names:
                mod = resolver.table.modules.get(module)
                if mod is None or ".experts." not in module:
                    continue
                head, below = module.split(".experts.", 1)
                if is_mapped(below):  # ``{e}.{proj}``: mapped whatever its parameters
                    continue
                for param in mod.params:
                    got = loader.expert_load(f"{below}.{param}")
                    new = loader.renamed(f"{below}.{param}")
                    if got is not None and got.outcome != loader.MAPPED and new is not None:
                        found[f"{module}.{param}"] = f"{head}.experts.{new}"
        found = {k: v for k, v in found.items() if k not in self.rename}
        if not found:
            return
        self.rename.update(found)
        for shard in sorted({self.checkpoint.tensors[n].file for n in found}):
            n = sum(1 for k in found if self.checkpoint.tensors[k].file == shard)
            self.changes.append(Change(f"{n} expert tensor(s) vLLM's loader cannot map",
                                       text=f"{shard} tensor names: experts.<proj>.<e> -> experts.<e>.<proj>"))

    @property
    def changed(self) -> bool:
        return bool(self.reencode or self.index_add or self.rename or self.edits)


def _after_experts_dot(parts: Iterable[tuple[str, str]]) -> Iterator[str]:
    """What follows a module name's first ``.experts.``, from its ``partition(".experts")`` (separator,
    rest): ``rest`` less its dot where the two meet at one place, else ``.experts.`` found in ``rest`` (no
    ``.experts.`` can start inside ``.experts``); none where the name has no ``.experts.``."""
    for sep, rest in parts:
        if not sep:
            continue
        if rest[:1] == ".":
            yield rest[1:]
        else:
            _, dot_sep, after = rest.partition(".experts.")
            if dot_sep:
                yield after


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

    @property
    def engine(self) -> str:
        """The engine key whose build this problem is (``vllm-0.33``)."""
        return self.resolver.engine

    @property
    def run(self) -> str:
        """Engine and platform class, as messages name them: ``vLLM 0.32 cuda``."""
        return f"{engine_of(self.engine).name} {self.platform}"


@dataclass
class Plan:
    platforms: tuple[str, ...]
    overlays: list[Overlay]  # target first, then a separate drafter
    problems: list[Problem]
    refused: list[Unrepairable] = field(default_factory=list)  # lenient plans (lint's): what no strategy repairs
    unvouched: list[Problem] = field(default_factory=list)  # verdict unknown: no repair planned, none vouched for
    engines: tuple[str, ...] = (DEFAULT_ENGINE,)  # engine keys the plan routes under
    # every run's resolvers (one run per engine and platform class), overlays' order: an edit
    # such as dropping a dead entry must hold under each, not only where a problem was found
    runs: list[Sequence[Resolver]] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        return not self.problems and not any(ov.index_add or ov.rename for ov in self.overlays)

    def pending(self, pick: Callable[[Problem], bool] = lambda p: True) -> list[Problem]:
        return [p for p in self.problems if not p.handled and pick(p)]

    def overlay_of(self, checkpoint: Checkpoint) -> Overlay | None:
        return next((ov for ov in self.overlays if ov.checkpoint is checkpoint), None)

    def changes_for(self, checkpoint: Checkpoint, prefixes: Iterable[str]) -> tuple[list[Change], list[str]] | None:
        """The planned changes that make ``prefixes`` route as stored, and the checkpoint modules
        re-encoded for them (None: the plan does not repair every one of them)."""
        ov = self.overlay_of(checkpoint)
        want = set(prefixes)
        if ov is None or not want:
            return None
        repaired = {p.route.prefix for p in self.problems if p.handled and p.overlay is ov}
        if not want <= repaired:
            return None
        changes = [c for c in ov.changes if want & set(c.prefixes)]
        names = {n for p in self.problems if p.overlay is ov and p.route.prefix in want
                 for n in p.route.checkpoint_names}
        return changes, sorted(n for n in ov.reencode if n in names)

    def drops_for(self, checkpoint: Checkpoint, key: str) -> list[Change]:
        """The planned drop of the dead exclusion entry at ``key`` (empty: the plan keeps it)."""
        ov = self.overlay_of(checkpoint)
        return [c for c in ov.changes if c.pattern == key] if ov is not None else []


def open_resolvers(target: Checkpoint, drafter: Checkpoint | None, platform: str,
                   draft_method: str | None = None, engine: str = DEFAULT_ENGINE) -> list[Resolver]:
    """Target (and drafter) resolvers as ``specguard route`` builds them, never memoized."""
    t = Resolver(target, draft_method=None if drafter else draft_method, platform=platform, engine=engine)
    if drafter is None:
        return [t]
    return [t, Resolver(drafter, draft_method=draft_method or "dspark", target=t, platform=platform, engine=engine)]


def make_plan(target: Checkpoint, drafter: Checkpoint | None, platforms: Sequence[str],
              draft_method: str | None = None, engines: Sequence[str] = (DEFAULT_ENGINE,)) -> Plan:
    """The repair ``specguard fix`` writes: every module routes as stored under every engine on
    every platform class it distinguishes among ``platforms``, or :class:`Unrepairable`. Over
    several engines, each is planned alone first, so a refusal names the engine it is for."""
    runs = [(e, p) for e in engines for p in platforms_of(e, platforms)]
    if len(engines) > 1:
        for key in engines:
            try:
                make_plan(target, drafter, platforms, draft_method, (key,))
            except Unrepairable as e:
                raise Unrepairable(f"{engine_of(key).name}: {e.where}", e.what) from e
    try:
        plan = plan_for([(p, open_resolvers(target, drafter, p, draft_method, e)) for e, p in runs])
    except Unrepairable as e:
        if len(engines) > 1:
            raise Unrepairable(e.where, f"{e.what} (no one repair satisfies {', '.join(engines)})") from e
        raise
    plan.engines = tuple(engines)
    return plan


def plan_for(resolvers_by_platform: Sequence[tuple[str, Sequence[Resolver]]], *, strict: bool = True) -> Plan:
    """The one planner: lint asks it (``strict=False``, its own resolvers, one platform) for the
    edits each finding proposes, ``specguard fix`` (``make_plan``) for the edits it writes."""
    first = resolvers_by_platform[0][1]
    overlays = [Overlay.of(first[0].checkpoint, TARGET)] + [Overlay.of(r.checkpoint, DRAFTER) for r in first[1:]]
    problems: list[Problem] = []
    unvouched: list[Problem] = []
    for platform, resolvers in resolvers_by_platform:
        for overlay, res in zip(overlays, resolvers, strict=True):
            for rt in res.routes():
                if rt.verdict != OK:
                    (unvouched if rt.verdict == UNKNOWN else problems).append(Problem(platform, overlay, res, rt))
            overlay.index_outside_drafts(res)
            overlay.rename_unmapped_experts(res)
    plan = Plan(tuple(dict.fromkeys(p for p, _ in resolvers_by_platform)), overlays, problems, unvouched=unvouched,
                engines=tuple(dict.fromkeys(rs[0].engine for _, rs in resolvers_by_platform)),
                runs=[rs for _, rs in resolvers_by_platform])
    if plan.clean:
        return plan
    from specguard.repair.strategies import STRATEGIES

    for strategy in STRATEGIES:
        try:
            strategy.apply(plan, plan.pending())
        except Unrepairable as e:
            if strict:
                raise
            plan.refused.append(e)
    left = plan.pending()
    if left and strict:
        p = left[0]
        on = p.run if len(plan.engines) > 1 else p.platform
        raise Unrepairable(p.where, f"no repair strategy for {p.route.verdict} on {on}: {p.route.reason}")
    return plan


# config.json's ModelOpt exclusion lists, which hf_quant_config.json keeps as quantization.exclude_modules
MODELOPT_LISTS = ("ignore", "exclude_modules")


def _entries(block: Mapping[str, Any], key: str) -> list[Any]:
    """The list under ``key`` (absent or not a list: empty)."""
    value = block.get(key)
    return list(value) if isinstance(value, list) else []
