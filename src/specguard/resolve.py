"""Resolver: the API engines call. For each runtime prefix: what is on disk,
what the config declares, what to build, what vLLM 0.33 would build, and why.

    r = Resolver.open("/ckpt")               # one header pass, memoized per process
    r.route("model.layers.43.ffn.experts")   # -> Route(stored=mxfp4, vllm=nvfp4, verdict="misrouted", ...)

A separate drafter checkpoint is opened on its own (``Resolver.open(draft)``)
and routes by its own disk and config, never by the target's.
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from itertools import repeat
from operator import attrgetter, itemgetter
from pathlib import Path
from typing import Any, ClassVar, NamedTuple

from specguard.checkpoint.errors import CheckpointError
from specguard.checkpoint.header import TensorInfo
from specguard.checkpoint.source import Checkpoint, gc_paused, open_checkpoint
from specguard.declared import FNMATCHCASE, DeclaredScheme, parse_declared
from specguard.declared.index import NameIndex
from specguard.engines import DSPARK_MODEL, EAGLE_MODEL, NO_PLAN, NOT_MODELLED, EngineChoice, EngineModel
from specguard.engines.registry import DEFAULT as DEFAULT_ENGINE
from specguard.engines.registry import engine as engine_of
from specguard.errors import ConfigError, LayoutError, UsageError
from specguard.formats import scheme as s
from specguard.formats.scheme import Scheme
from specguard.formats.settle import name_convention, settle
from specguard.formats.sniff import Sniff
from specguard.formats.table import Module, ModuleTable, classify
from specguard.layouts import Layout, Role, layer_index, layout_for
from specguard.layouts.registry import draft_kind_for, is_eagle_drafter
from specguard.layouts.roles import EAGLE, ModuleKind
from specguard.vocabulary import Vocabulary

_SCHEME, _MISSING, _PARAMS = attrgetter("scheme"), attrgetter("missing"), attrgetter("params")
_AFTER_SEP = itemgetter(1, 2)  # str.partition's separator (empty: absent) and what follows it


class Verdict(Vocabulary):
    """What specguard concludes for one runtime module."""

    OK = "ok"
    MISROUTED = "misrouted"  # the modelled engine builds a method that cannot read what is stored
    MISSING = "missing"  # nothing (or not everything the build needs) is stored
    REFUSED = "refused"  # the engine stops before serving (engines/vllm/startup.py; lint SG701)
    UNKNOWN = "unknown"  # specguard cannot say what the engine builds (no model of it): never ok (lint SG205)


OK, MISROUTED, MISSING = Verdict.OK, Verdict.MISROUTED, Verdict.MISSING
REFUSED, UNKNOWN = Verdict.REFUSED, Verdict.UNKNOWN
NO_QUANT_CONFIG = "built without a quant config by the model"


@dataclass(frozen=True)
class Route:
    """One runtime module: where it sits, what is stored, declared, and built."""

    prefix: str  # canonical runtime (quant) prefix
    role: Role
    kind: ModuleKind  # the layer class the engine builds (not the role: see ``role``)
    stored: Scheme | None  # None: nothing on disk behind this prefix
    declared: DeclaredScheme | None  # the config's claim for the runtime prefix
    vllm: EngineChoice | None  # what the modelled engine (vLLM 0.33) builds, and the rule that decided
    checkpoint_names: tuple[str, ...]  # checkpoint module names behind the prefix
    verdict: Verdict
    reason: str
    missing: tuple[str, ...] = ()  # tensors the build needs that the disk lacks
    unmatched: tuple[str, ...] = ()  # patterns that match this module's checkpoint names only
    shards: tuple[str, ...] = ()  # a fused layer's shard prefixes, as the engine tests exclusions on them
    sniff: Sniff | None = field(default=None, compare=False)

    @property
    def build(self) -> Scheme | None:
        """What specguard routes the module to: what is stored, always."""
        return self.stored


class Resolver:
    """Routes every runtime module of one checkpoint by what it stores."""

    _cache: ClassVar[dict[tuple, Resolver]] = {}
    _lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, checkpoint: Checkpoint, *, draft_method: str | None = None,
                 target: Resolver | None = None, platform: str = "cuda", own_draft: bool | None = None,
                 table: ModuleTable | None = None, _like: Resolver | None = None,
                 engine: str = DEFAULT_ENGINE) -> None:
        """``target``: for a separate drafter checkpoint (DSpark/EAGLE
        ``speculative_config.model``), the target it drafts for. The drafter's
        stored and declared schemes come from its own files; only vLLM's
        choice (which reuses the target's quant config) needs the target.
        ``own_draft``: whether this checkpoint's own draft layers (MTP/DSpark
        stored beside the target) are served; False when the draft comes from
        another checkpoint (an EAGLE head, ``--draft``): the target model skips
        them on load (deepseek_v2.py ``load_weights``: spec layers ``continue``)
        and no draft model is built from them. Default: False for a target
        served with ``draft_method="eagle"``, else True. ``_like``: the Resolver whose
        grouping ``with_configs`` reuses when the new configs give the same layout. ``engine``: the
        modelled engine version's key in engines/registry.py (``vllm-0.33``)."""
        with gc_paused():  # grouping builds a record per module, all kept (as classify does)
            self._init(checkpoint, draft_method, target, platform, own_draft, table, _like, engine)

    def _init(self, checkpoint: Checkpoint, draft_method: str | None, target: Resolver | None, platform: str,
              own_draft: bool | None, table: ModuleTable | None, _like: Resolver | None, engine: str) -> None:
        if own_draft is None:
            own_draft = not (draft_kind_for(draft_method) == EAGLE and target is None
                             and not is_eagle_drafter(checkpoint.config or {}))
        self.own_draft = own_draft
        self.draft_method = draft_method
        self.checkpoint = checkpoint
        self.table: ModuleTable = table if table is not None else classify(checkpoint)
        self.config: Mapping = checkpoint.config or {}
        self.target = target
        try:
            external = not own_draft and target is None  # laid out as itself, its draft served elsewhere
            self.layout: Layout = layout_for(
                dict(self.config), draft_method=None if external else draft_method,
                target_config=dict(target.config) if target is not None else None,
                engine=engine_of(engine).layout,  # the engine's own runtime prefixes
            )
        except LayoutError as e:  # too little said, or counts no model has
            what = str(e) if checkpoint.config else "no config.json beside the weights (routing needs its claims)"
            raise CheckpointError(f"{checkpoint.name} [config.json]", what) from e
        hf_quant = dict(checkpoint.hf_quant_config) if checkpoint.hf_quant_config else None
        try:
            self.declared_config = parse_declared(dict(self.config), hf_quant)
        except ConfigError as e:
            raise CheckpointError(f"{checkpoint.name} [config.json]", str(e)) from e
        self.platform = platform
        self.engine = engine
        model = engine_of(engine).model
        self.vllm: EngineModel  # the modelled engine: what it builds, for the verdicts
        if target is None:
            self.vllm = model(dict(self.config), hf_quant, platform=platform, draft_method=draft_method,
                              tensor_dtypes=_TensorDtypes(checkpoint.tensors))  # GPTQ/AWQ maybe_update_config
            self._vllm_model: str | None = None
        else:
            t_hf = dict(target.checkpoint.hf_quant_config) if target.checkpoint.hf_quant_config else None
            self.vllm = model(dict(target.config), t_hf, platform=platform, draft_method=draft_method,
                              draft_config=dict(self.config), draft_hf_quant_config=hf_quant)
            self._vllm_model = EAGLE_MODEL if draft_method and "eagle" in draft_method else DSPARK_MODEL
        self._groups: dict[str, list[str]]
        self._alias: dict[str, str]
        self._keys: list[str]  # each module's ``alike`` name, once
        # what a config cannot change, shared with ``with_configs``: by prefix its modules and the
        # tensors they lack, by (prefix, claim, stack) its stored scheme, the draft layers stored
        self._grouped: dict[object, Any]
        if _like is not None and _same_layout(_like.layout, self.layout):
            # a proposed fix (``with_configs``): same modules, same placements; lint re-routes each fix
            self.layout, self._groups, self._alias = _like.layout, _like._groups, _like._alias
            self._keys, self._grouped = _like._keys, _like._grouped  # same modules behind each prefix
        elif _like is not None and _places_alike(_like, self.layout):
            # a fix that changes only how many draft layers the config promises (SG301's, SG302's): the
            # stored modules are placed as before, the new layout says what the config now promises
            self._groups, self._alias, self._keys = _like._groups, _like._alias, _like._keys
            self._grouped = _like._grouped
        else:
            self._group()
            self._grouped = {}
        built = self.vllm.layout
        if built is not self.layout and _same_layout(built, self.layout):
            # the engine model laid the same config out alike (same family class, same settings: every
            # name places the same): one placement cache, so no runtime prefix is placed twice
            self.vllm.layout = self.layout
        self._routes: dict[str, Route] = {}
        # ``canonical`` by spelling asked: an answer reads only ``_alias`` and ``_groups``, so a re-route
        # sharing them shares the answers too
        self._canonical: dict[str, str | None] = self._grouped.setdefault("canonical spellings", {})
        self._refusals: list | None = None
        self._route_lock = threading.Lock()

    def _group(self) -> None:
        """Modules by canonical runtime prefix, and every spelling's canonical prefix."""
        # experts of a layer share their placement: each module's ``alike`` name, once
        groups, keys = self.layout.grouped(self.table.modules)
        self._keys = [k for ks in keys.values() for k in ks]  # every module's, dropped ones too
        if not self.own_draft:  # stored, never loaded: not part of what this serve builds
            groups = {p: ns for p, ns in groups.items() if not self.layout.role(ns[0]).is_draft}
        self._groups = groups
        self._alias = {}
        for prefix in groups:
            for key in keys[prefix]:
                for p in self.layout.runtime_prefixes(key):
                    self._alias.setdefault(p, prefix)

    # -- construction -------------------------------------------------------

    @classmethod
    def open(cls, source: str | os.PathLike[str], *, revision: str | None = None, remote: bool = False,
             draft_method: str | None = None, target: Resolver | None = None,
             platform: str = "cuda", cache_dir: str | os.PathLike[str] | None = None,
             follow_links: bool = False, own_draft: bool | None = None,
             engine: str = DEFAULT_ENGINE) -> Resolver:
        """One header pass per checkpoint per process (memoized, thread-safe).

        ``source``: a local directory or file, or a HF repo id resolved
        through the local HF cache (``cache_dir``: another one) or, with
        ``remote=True``, headers over HTTP. ``follow_links``: see ``open_checkpoint``."""
        p = Path(source)
        where = str(p.resolve()) if p.exists() else str(source)
        key = (where, revision, remote, draft_method, id(target), platform, str(cache_dir), follow_links, own_draft,
               engine)
        with cls._lock:
            hit = cls._cache.get(key)
            if hit is None:
                ckpt = open_checkpoint(source, revision=revision, remote=remote, cache_dir=cache_dir,
                                       follow_links=follow_links)
                hit = cls._cache[key] = cls(ckpt, draft_method=draft_method, target=target, platform=platform,
                                            own_draft=own_draft, engine=engine)
            return hit

    def with_configs(self, config: Mapping, hf_quant_config: Mapping | None) -> Resolver:
        """The same checkpoint routed under other config files (a proposed fix applied):
        the headers and their classification are shared, nothing is re-read."""
        ckpt = replace(self.checkpoint, config=config, hf_quant_config=hf_quant_config)
        return Resolver(ckpt, draft_method=self.draft_method, target=self.target, platform=self.platform,
                        own_draft=self.own_draft, table=self.table, _like=self, engine=self.engine)

    @classmethod
    def clear_cache(cls) -> None:
        with cls._lock:
            cls._cache.clear()

    # -- lookups ------------------------------------------------------------

    def prefixes(self) -> list[str]:
        """Every canonical runtime prefix with modules on disk, in checkpoint order."""
        return list(self._groups)

    def canonical(self, prefix: str) -> str | None:
        """The canonical prefix for any spelling, or None: DSpark aliases, an empty
        root (``layers.43...``), the V4.1 wrapper's ``language_model.`` root."""
        hit = self._canonical.get(prefix, "")
        if hit == "":  # every rule asks again for the prefixes it was given: each spelling once
            hit = self._canonical[prefix] = next(
                (h for p in _spellings(prefix) if (h := self._alias.get(p) or (p if p in self._groups else None))),
                None)
        return hit

    @property
    def alike_names(self) -> list[str]:
        """Every stored module's ``alike`` name (layouts/base.py), once each, draft modules this serve
        drops included: experts of a layer share their placement, so one question per projection."""
        return self._keys

    @functools.cached_property
    def stored_runtime_prefixes(self) -> list[str]:
        """Every runtime prefix some build uses for a stored module (draft modules this serve
        drops included), sorted: the names SG101 and the planner's dead-entry strategy test an
        exclusion entry against, found once (experts of a layer share their spellings: one
        lookup per ``alike`` name, not per module)."""
        place = self.layout.runtime_prefixes
        return sorted({p for k in self._keys for p in place(k)})

    def expert_parts(self, prefix: str) -> frozenset[tuple[str, str]]:
        """``name.partition(".experts")``'s separator and what follows, for each checkpoint module
        behind ``prefix``, distinct (a layer's experts: a few hundred ``.{e}.{proj}``, the same in every
        layer): what SG702 and the planner's expert-rename check ask of every routed-expert module
        (45,000 in a DeepSeek export), found once, shared like the grouping."""
        key = ("expert parts", prefix)
        hit = self._grouped.get(key)
        if hit is None:
            names = self._groups.get(prefix, ())
            hit = self._grouped[key] = frozenset(map(_AFTER_SEP, map(str.partition, names, repeat(".experts"))))
        return hit

    def route_params(self, rt: Route) -> list[Mapping[str, TensorInfo]]:
        """The parameters of each module behind one of this resolver's routes, in ``rt.checkpoint_names``'
        order: the routing's own list where it made one (read it, do not change it), else looked up."""
        hit = self._grouped.get(rt.prefix)
        if isinstance(hit, _Group) and len(hit.modules) == len(rt.checkpoint_names):
            return hit.params
        return [m.params for m in map(self.table.modules.get, rt.checkpoint_names) if m is not None]

    def checkpoint_index(self) -> NameIndex:
        """Every checkpoint module name, indexed for pattern scans (declared/index.py); what no
        config changes, so shared with the re-routes of proposed fixes like the grouping."""
        hit = self._grouped.get("checkpoint index")
        if hit is None:
            hit = self._grouped["checkpoint index"] = NameIndex(self.table.modules)
        return hit

    def modules(self, prefix: str) -> list[Module]:
        c = self.canonical(prefix)
        return [self.table[n] for n in self._groups.get(c, [])] if c else []

    def on_disk(self, prefix: str) -> Scheme | None:
        """The stored scheme behind a runtime prefix (None: nothing stored)."""
        r = self.route(prefix)
        return r.stored

    def declared(self, prefix: str) -> DeclaredScheme | None:
        """The config's claim for a runtime prefix (None: nothing stored behind it)."""
        return self.route(prefix).declared

    def route(self, prefix: str) -> Route:
        """The route of one runtime module: a runtime prefix in any root spelling, or a
        checkpoint-style name (``mtp.0.ffn.experts``) that names exactly one runtime module.

        A layer the model has but the disk lacks routes ``missing``; a prefix the
        model does not have raises UnknownPrefixError (a UsageError)."""
        c = self.canonical(prefix) or self._from_checkpoint_name(prefix) or self._in_model(prefix)
        hit = self._routes.get(c)
        if hit is None:
            with self._route_lock:
                hit = self._routes.get(c)
                if hit is None:
                    hit = self._routes[c] = self._make_route(c)
        return hit

    def _from_checkpoint_name(self, name: str) -> str | None:
        """The runtime prefix whose checkpoint modules ``name`` names (all of them, or a prefix of theirs)."""
        name = name.rstrip(".")
        hits = [p for p, names in self._groups.items()
                if any(n == name or n.startswith(name + ".") for n in names)]
        if len(hits) > 1:
            shown = ", ".join(hits[:6]) + (f" (+{len(hits) - 6} more)" if len(hits) > 6 else "")
            raise UnknownPrefixError(f"{name!r} names {len(hits)} runtime modules ({shown}); route one of them")
        return hits[0] if hits else None

    def _in_model(self, prefix: str) -> str:
        """``prefix`` itself when it is a layer the model has (nothing stored: ``missing``), else an error."""
        index = layer_index(prefix)
        n, drafts = self.layout.num_hidden_layers, list(self.layout.draft_layers)
        if index is not None and (index < n or index in drafts):
            return prefix
        where = f"layers 0-{n - 1}" + (f", draft layer(s) {', '.join(map(str, drafts))}" if drafts else "")
        raise UnknownPrefixError(
            f"{prefix!r} is not a module of {self.checkpoint.name} ({where}); "
            f"`specguard route --all` lists its runtime prefixes")

    def routes(self) -> list[Route]:
        """A route per runtime module on disk, plus draft layers the config promises but the disk lacks."""
        out = [self.route(p) for p in self._groups]
        out += [self._absent_draft(layer) for layer in self._missing_draft_layers]
        return out

    # -- internals ----------------------------------------------------------

    def _modules_of(self, prefix: str, names: list[str]) -> _Group:
        """The prefix's modules (``names``: at least one), the tensors they lack, its role and layer
        kind, and each module's stored scheme and parameters: what no config changes, shared like
        ``_stored``."""
        hit = self._grouped.get(prefix)
        if hit is None:  # C-level maps, one field each (45,000 modules in a DeepSeek export)
            mods = list(map(self.table.modules.__getitem__, names))
            lacking = set(map(_MISSING, mods))  # experts share one tuple (mostly the empty one: a cheap hash)
            hit = self._grouped[prefix] = _Group(mods, tuple(sorted({p for x in lacking for p in x})),
                                                 self.layout.role(names[0]), self.layout.module_kind(names[0]),
                                                 list(map(_SCHEME, mods)), list(map(_PARAMS, mods)))
        return hit

    def _stored(self, prefix: str, mods: list[Module], stored: list[Scheme],
                claim: Scheme | None) -> tuple[Scheme | None, Sniff | None]:
        """The stored scheme behind ``prefix``; shared with the re-routes of proposed fixes
        (``with_configs``), which change the claim or the stack only where they edit them."""
        key = (prefix, claim, self.declared_config.stack)
        hit = self._grouped.get(key)
        if hit is None:
            hit = self._grouped[key] = self._settle(mods, stored, claim)
        return hit

    def _settle(self, mods: list[Module], stored: list[Scheme],
                claim: Scheme | None) -> tuple[Scheme | None, Sniff | None]:
        stack = self.declared_config.stack
        # The modules of a prefix share few scheme objects (the 256 experts of a layer: one),
        # found with C-level maps and named once each; only an ambiguous one is settled
        # module by module (from its bytes).
        by_id = dict(zip(map(id, stored), stored, strict=True))
        sniff = None
        if any(sc.format == s.AMBIGUOUS for sc in by_id.values()):
            schemes = []
            for m, sc in zip(mods, stored, strict=True):
                if sc.format == s.AMBIGUOUS:
                    sc, sn = settle(self.checkpoint, m, claim)
                    sniff = sn if sniff is None else sniff
                schemes.append(name_convention(sc, stack))
            distinct: Iterable[Scheme] = schemes
        else:
            named = {k: name_convention(sc, stack) for k, sc in by_id.items()}
            if len({sc.format for sc in named.values()}) <= 1:  # one format (a layer's experts): its first
                return (named[id(stored[0])] if stored else None), sniff
            schemes = list(map(named.__getitem__, map(id, stored)))
            distinct = named.values()
        formats = {sc.format for sc in distinct}
        if len(formats) <= 1:
            return (schemes[0] if schemes else None), sniff
        common = sorted(f for f in formats if all(sc.fits(f) for sc in distinct))
        if common:  # shards stored alike under one of their readings (a one-block shard beside a wider one)
            return schemes[0].reading(common[0]), sniff
        parts = ", ".join(f"{m.name.rsplit('.', 1)[-1]}: {sc.format}" for m, sc in zip(mods, schemes, strict=True))
        return Scheme(s.MIXED, reason=parts), sniff

    def _make_route(self, prefix: str) -> Route:
        names = self._groups.get(prefix, [])
        if not names:
            return self._absent(prefix)
        mods, missing, role, kind, schemes, _ = self._modules_of(prefix, names)
        first = names[0]
        model = self._vllm_model if role.is_draft else None
        shards = self.vllm.fused_shards(prefix, model) if kind == "linear" else ()
        claims, key = self._claims, (prefix, kind, shards)
        declared = claims.get(key)
        if declared is None:
            declared = claims[key] = self.declared_config.scheme_for(prefix, kind=kind, shards=shards)
        stored, sniff = self._stored(prefix, mods, schemes, declared.scheme)
        if self.vllm.built_without_quant_config(prefix, kind):  # routers, V3 eh_proj: no config reaches them
            declared = DeclaredScheme(self.declared_config.unquantized, NO_QUANT_CONFIG)
        if stored is not None and not stored.quantized and not declared.quantized:
            declared = replace(declared, scheme=stored)  # "keep it unquantized" keeps its dtype: F32 stays F32
        vllm = self.vllm.not_built(prefix, model) or self.vllm.builds(prefix, kind=kind, model=model)
        if stored is not None and stored.readings:  # the bytes fit several schemes: the claim wins if among them
            stored = stored.reading(declared.scheme.format if stored.fits(declared.scheme.format)
                                    else vllm.scheme.format)
        # A dead pattern matters only where a config could quantize the module.
        quantizable = kind not in (ModuleKind.NORM, ModuleKind.OTHER) and declared.source != NO_QUANT_CONFIG
        unmatched = self._unmatched(first, kind, shards) if quantizable else ()
        verdict, reason = _verdict(stored, declared, vllm, missing, unmatched, engine=self.vllm.name)
        refusal = self._refusal(names)
        if refusal is not None:
            verdict, reason = REFUSED, f"{self.vllm.name} stops at {refusal.stage}: {refusal.raises}"
        return Route(prefix, role, kind, stored, declared, vllm, tuple(names), verdict, reason,
                     missing, unmatched, shards, sniff)

    @functools.cached_property
    def _claims(self) -> dict[tuple[str, str, tuple[str, ...]], DeclaredScheme]:
        """The config's claim by (prefix, kind, shards), shared with the re-routes of proposed fixes
        whose configs declare the same (a claim is a function of the declared config, compared
        field by field, and its arguments): a fix of the draft count re-asks none."""
        memos = self._grouped.setdefault("claims", [])
        hit = next((memo for declared, memo in memos if declared == self.declared_config), None)
        if hit is None:
            hit = {}
            memos.append((self.declared_config, hit))
        return hit

    def _refusal(self, names: list[str]):
        """The engine's refusal that concerns these modules: a start-up one concerns every
        module (nothing is built), a later one the modules it names."""
        if self._refusals is None:
            self._refusals = self.vllm.refusals(self.table.modules) if self.target is None else []
        if not self._refusals:
            return None
        hit = set(names)
        return next((x for x in self._refusals if not x.names or hit & set(x.names)), None)

    def _unmatched(self, name: str, kind: str, shards: tuple[str, ...]) -> tuple[str, ...]:
        """Exclusion patterns that match the checkpoint name but nothing the engine tests:
        no runtime spelling and, for a fused layer, no shard (the author meant this
        module, the engine will never see it matched)."""
        hits = self._exclusions_hitting.get(name)
        if not hits:  # most modules: no entry to test, no spelling to make
            return ()
        out = []
        spellings = list(self.layout.runtime_prefixes(name))
        v41 = [x for x in (self.vllm.v41_ignore_name(p, self.layout.num_hidden_layers) for p in spellings) if x]
        for pat in hits:
            if pat.semantics == FNMATCHCASE and kind != ModuleKind.ROUTED_EXPERTS:
                continue  # the V4.1 ``ignore`` list is consulted for routed experts only
            engine = v41 if pat.semantics == FNMATCHCASE else spellings
            if not any(pat.matches(p) for p in engine) and not any(pat.matches_shard(sh) for sh in shards):
                out.append(str(pat))
        return tuple(out)

    @functools.cached_property
    def _exclusion_hits(self) -> list[frozenset[str]]:
        """The routes' first checkpoint modules (all ``_unmatched`` asks about) each exclusion
        entry matches, found once per entry (declared/index.py) instead of once per entry
        per route; not all 45,000 modules of an export (benchmarks/lint_export.py)."""
        exclusions = self.declared_config.exclusions
        key = ("exclusion hits", exclusions)  # a re-routed fix that leaves the entries as they were shares them
        hit = self._grouped.get(key)
        if hit is None:
            index = NameIndex(names[0] for names in self._groups.values())
            hit = self._grouped[key] = [frozenset(index.matching(pat)) for pat in exclusions]
        return hit

    @functools.cached_property
    def _exclusions_hitting(self) -> dict[str, list]:
        """``_exclusion_hits`` turned round: by checkpoint module, the entries matching it, in order."""
        key = ("exclusions by module", self.declared_config.exclusions)
        hit = self._grouped.get(key)
        if hit is None:
            hit = self._grouped[key] = {}
            for pat, names in zip(self.declared_config.exclusions, self._exclusion_hits, strict=True):
                for name in names:
                    hit.setdefault(name, []).append(pat)
        return hit

    def _absent(self, prefix: str) -> Route:
        role = self.layout.role(prefix)
        return Route(prefix, role, ModuleKind.OTHER, None, None, None, (),
                     MISSING, "no tensor on disk maps to this runtime prefix")

    @functools.cached_property  # every lint rule asks for the routes
    def _missing_draft_layers(self) -> list[int]:
        if not self.own_draft:
            return []
        present = self._grouped.get("draft layers")
        if present is None:
            roles = map(self.layout.role, dict.fromkeys(self._keys))  # each module's ``alike`` name (_group)
            present = self._grouped["draft layers"] = {r.layer for r in roles if r.is_draft}
        return [layer for layer in self.layout.draft_layers if layer not in present]

    def _absent_draft(self, layer: int) -> Route:
        prefix = f"model.layers.{layer}"
        r = self._absent(prefix)
        return Route(**{**r.__dict__, "reason": (
            f"config promises draft layer {layer - self.layout.num_hidden_layers} "
            f"(runtime layer {layer}) but no tensor of it is stored: an engine would run it randomly initialised"
        )})


class _Group(NamedTuple):
    """A runtime prefix's stored modules and what no config changes about them (``_modules_of``)."""

    modules: list[Module]
    missing: tuple[str, ...]  # the tensors some of them lack
    role: Role
    kind: ModuleKind
    schemes: list[Scheme]  # each module's stored scheme, in ``modules`` order
    params: list[Mapping[str, TensorInfo]]  # each module's parameters, in ``modules`` order


def _same_layout(a: Layout, b: Layout) -> bool:
    """Two layouts that place every name alike: same family class, same settings."""
    return a.alike_settings(b)


def _places_alike(like: Resolver, layout: Layout) -> bool:
    """``layout`` differs from ``like``'s only in its draft layer count, and places every module
    ``like`` stores as it does (same role, kind, runtime prefixes): its grouping holds as it is."""
    old = like.layout
    for k in like._keys:  # answered by ``old`` (its placements are memoized: mostly lookups)
        old.role(k)
    if old.alike_but_draft_count(layout):  # none of them read the count: ``layout`` has them as they are
        return True
    if not old.alike_settings(layout, draft_count=False):
        return False
    return all(layout.place(k) == old.place(k) and layout.role(k) == old.role(k) for k in like._keys)


class _TensorDtypes(Mapping[str, str]):
    """Tensor name -> dtype, read through the headers when asked (GPTQ/AWQ configs only):
    a copy cost every Resolver, and every fix lint re-routes, a pass over 180,000 tensors."""

    def __init__(self, tensors: Mapping[str, TensorInfo]) -> None:
        self._tensors = tensors

    def __getitem__(self, name: str) -> str:
        return self._tensors[name].dtype

    def __iter__(self) -> Iterator[str]:
        return iter(self._tensors)

    def __len__(self) -> int:
        return len(self._tensors)


class UnknownPrefixError(UsageError):
    """A prefix that names no module of the model (Resolver.route)."""


ROOTS = ("language_model.model.", "language_model.", "model.")


def _spellings(prefix: str) -> list[str]:
    """The prefix as given, then with its root swapped for ``model.`` and for none."""
    bare = prefix
    for root in ROOTS:
        if prefix.startswith(root):
            bare = prefix[len(root):]
            break
    return list(dict.fromkeys([prefix, f"model.{bare}", bare]))


def _unquantized(scheme: Scheme | None) -> bool:
    return scheme is None or not scheme.quantized


def same_build(stored: Scheme | None, built: Scheme | None) -> bool:
    """Does an engine method built for ``built`` read storage ``stored`` correctly?
    Float dtypes count as one: an unquantized method loads any of them."""
    if _unquantized(stored) and _unquantized(built):
        return True
    return stored is not None and built is not None and stored.format == built.format


def _verdict(stored: Scheme | None, declared: DeclaredScheme, vllm: EngineChoice, missing: tuple[str, ...],
             unmatched: tuple[str, ...], *, engine: str) -> tuple[Verdict, str]:
    if stored is None:
        return MISSING, "nothing stored"
    if stored.format in (s.UNKNOWN, s.AMBIGUOUS, s.MIXED):
        return MISSING, f"stored scheme is {stored.format}: {stored.reason}"
    pattern_note = f"; {', '.join(unmatched)} matches checkpoint names only" if unmatched else ""
    if vllm.method == NO_PLAN:  # no recorded plan: what the engine builds is not known, so not ok
        return UNKNOWN, f"stored {stored.short()}; {vllm.reason}"
    if vllm.method == NOT_MODELLED:  # a quant stack specguard does not model: it cannot vouch either way
        return UNKNOWN, f"stored {stored.short()}; what {engine} builds is not modelled: {vllm.reason}"
    if vllm.scheme.format == s.UNKNOWN:  # the engine raises, or does not build the module: no claim either way
        return OK, f"stored {stored.short()}; {engine}: {vllm.method} ({vllm.reason})"
    if not same_build(stored, vllm.scheme):
        return MISROUTED, f"stored {stored.short()}, {engine} builds {vllm.method} ({vllm.reason}){pattern_note}"
    if missing:
        return MISSING, f"stored {stored.format} lacks {', '.join(missing)}"
    if unmatched:  # it builds as stored: the dead entry is lint SG101's to report, not a misroute
        return OK, (f"stored {stored.short()}, built as stored; {', '.join(unmatched)} meant for this module "
                    "matches nothing at runtime (SG101)")
    return OK, f"stored {stored.short()}, built as stored"


