"""Layout: one model family's naming rules, checkpoint names <-> runtime prefixes.

Words (docs/names.md): a *checkpoint name* is what the file calls a module
(``mtp.0.ffn.experts.7.w1``); a *runtime prefix* is the string an engine hands
to ``QuantizationConfig.get_quant_method`` for the layer it builds from it
(``model.layers.43.ffn.experts``); the *parameter prefix* is where that layer's
parameters live in ``named_parameters()`` (``model.layers.43.mtp_block.ffn.
experts.routed_experts``). The three differ for draft modules, which is why an
ignore pattern written against one of them silently misses the others.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from itertools import groupby
from operator import itemgetter

from specguard import plans
from specguard.errors import LayoutError
from specguard.layouts import roles as r
from specguard.layouts.names import layer_index, module_name

MAX_LAYERS = 100_000
VLLM = "vllm"
SGLANG = "sglang"
ENGINES = (VLLM, SGLANG)
# Per-expert checkpoint modules differ only in the expert index, which no rule
# reads: one placement per (layer, projection) serves every expert.
_EXPERT_INDEX = re.compile(r"\.experts\.\d+(?=\.|$)")
_FIRST, _SECOND = itemgetter(0), itemgetter(1)
# a Layout's memos and its record of what they read: not settings (two layouts with the same
# settings place every name alike)
LAYOUT_CACHES = ("_cache", "_roles", "_draft_count_reads", "_placed_by_draft_count")


@lru_cache(maxsize=1 << 18)  # a lint walks the names several times (grouping, aliases, SG101)
def alike(name: str) -> str:
    """``name`` with any expert index set to 0: every expert of a layer is placed alike
    (role, kind, runtime prefixes; only ``Placement.module`` differs), so a walk over
    45,000 expert modules asks ``place`` once per projection (benchmarks/lint_export.py)."""
    return _EXPERT_INDEX.sub(".experts.0", name) if ".experts." in name else name


@dataclass(frozen=True, slots=True)
class Placement:
    """Where one checkpoint module ends up inside an engine.

    ``runtime_prefix`` is the canonical quant prefix (``model.`` root);
    ``runtime_prefixes`` lists every quant prefix some build of the engine uses
    for it (the canonical one first; DSpark builds with an empty root; a DSpark
    ``attn.wkv`` also feeds ``context_wkv_proj``).
    """

    checkpoint_name: str
    role: r.Role
    kind: r.ModuleKind
    runtime_prefix: str
    runtime_prefixes: tuple[str, ...]
    parameter_prefix: str


class Layout:
    """Naming rules of one model family, for one engine.

    Subclasses implement ``_place`` (checkpoint module -> Placement) and may
    extend ``_runtime_role`` (roles of runtime-only names such as DSpark's
    ``model.main_proj``). Everything else is shared.
    """

    family = "generic"
    # SGLang builds a family's single NextN draft layer as ``model.decoder`` plus
    # these top-level modules (deepseek_nextn.py, deepseek_v4_nextn.py); () = no such tower.
    sglang_nextn_top: tuple[str, ...] = ()

    def __init__(
        self,
        num_hidden_layers: int,
        num_draft_layers: int = 0,
        draft_kind: str | None = None,
        *,
        engine: str = VLLM,
    ) -> None:
        if num_hidden_layers < 0 or num_draft_layers < 0:
            raise LayoutError("layer counts must be >= 0")
        if num_hidden_layers > MAX_LAYERS or num_draft_layers > MAX_LAYERS:
            # a hostile config must not make specguard enumerate a billion layers
            raise LayoutError(f"layer counts above {MAX_LAYERS} are not a model (config says "
                             f"{num_hidden_layers} main, {num_draft_layers} draft)")
        if engine not in ENGINES:
            raise ValueError(f"unknown engine {engine!r}; expected one of {ENGINES}")
        if draft_kind is not None and draft_kind not in r.DRAFT_KINDS:
            raise ValueError(f"unknown draft kind {draft_kind!r}; expected one of {r.DRAFT_KINDS}")
        self.num_hidden_layers = num_hidden_layers
        self._num_draft_layers = num_draft_layers
        # how often the draft count was read, and whether a placement or role read it: a layout that
        # differs only in that count answers alike for every name placed without reading it (``alike_but_draft_count``)
        self._draft_count_reads = 0
        self._placed_by_draft_count = False
        self.draft_kind = r.DraftKind(draft_kind) if draft_kind is not None else None
        self.engine = engine
        self._cache: dict[str, Placement] = {}
        self._roles: dict[str, r.Role] = {}  # ``role`` by name: a route asks for its prefix's five times

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(num_hidden_layers={self.num_hidden_layers}, "
            f"num_draft_layers={self.num_draft_layers}, draft_kind={self.draft_kind!r}, "
            f"engine={self.engine!r})"
        )

    # -- public API -------------------------------------------------------

    @property
    def num_draft_layers(self) -> int:
        """How many draft layers the config promises."""
        self._draft_count_reads += 1
        return self._num_draft_layers

    @property
    def draft_layers(self) -> range:
        """Runtime layer indices of the draft layers (``N .. N+K-1``)."""
        n = self.num_hidden_layers
        return range(n, n + self.num_draft_layers)

    def place(self, name: str) -> Placement:
        """Placement of a checkpoint module (a tensor name is reduced to its module)."""
        hit = self._cache.get(name)
        if hit is not None:
            return hit
        module = module_name(name)
        hit = self._cache.get(module)
        if hit is None:
            generic = _EXPERT_INDEX.sub(".experts.0", module)
            if generic == module:
                hit = self._placed(module)
            else:
                g = self._cache.get(generic) or self._placed(generic)
                self._cache[generic] = g
                hit = Placement(module, g.role, g.kind, g.runtime_prefix, g.runtime_prefixes, g.parameter_prefix)
            self._cache[module] = hit
        if name != module:
            self._cache[name] = hit
        return hit

    def role(self, name: str) -> r.Role:
        """Role of a checkpoint name *or* a runtime prefix.

        Both spellings answer the same: a runtime layer index >= N is draft,
        whatever root the prefix has.
        """
        hit = self._roles.get(name)
        if hit is None:
            reads = self._draft_count_reads
            role = self._runtime_role(name)
            if self._draft_count_reads != reads:
                self._placed_by_draft_count = True
            hit = self._roles[name] = role if role is not None else self.place(name).role
        return hit

    def _placed(self, module: str) -> Placement:
        """``_place``, noting whether the answer read the draft count."""
        reads = self._draft_count_reads
        hit = self._place(module)
        if self._draft_count_reads != reads:  # another thread's read only makes this cautious
            self._placed_by_draft_count = True
        return hit

    def alike_settings(self, other: Layout, *, draft_count: bool = True) -> bool:
        """Same family class and settings (``draft_count=False``: but for the draft count): every name
        ``place`` and ``role`` answer is a function of these and the name alone."""
        skip = LAYOUT_CACHES if draft_count else (*LAYOUT_CACHES, "_num_draft_layers")
        def settings(x: Layout) -> dict:
            return {k: v for k, v in vars(x).items() if k not in skip}
        return type(self) is type(other) and settings(self) == settings(other)

    def alike_but_draft_count(self, other: Layout) -> bool:
        """``other`` is this layout with another draft count and has every placement and role this
        one has answered so far (copied in): none of those answers read the count, and all else
        they read (the settings) is the same. False: nothing copied."""
        if self._placed_by_draft_count or not self.alike_settings(other, draft_count=False):
            return False
        other._cache = {**self._cache, **other._cache}
        other._roles = {**self._roles, **other._roles}
        return True

    def runtime_prefix(self, name: str) -> str:
        """Quant prefix the engine's ``get_quant_method`` sees for a checkpoint module.

        Routed experts collapse to the layer (``...ffn.experts``); fused shards
        to the fused module (``attn.wq_a`` -> ``attn.fused_wqa_wkv``).
        """
        return self.place(name).runtime_prefix

    def runtime_prefixes(self, name: str) -> tuple[str, ...]:
        """Every quant prefix some build uses for this checkpoint module."""
        return self.place(name).runtime_prefixes

    def parameter_prefix(self, name: str) -> str:
        """Module path of the engine parameters this checkpoint module loads into."""
        return self.place(name).parameter_prefix

    def module_kind(self, name: str) -> r.ModuleKind:
        """``routed_experts`` / ``linear`` / ``embedding`` / ``head`` / ``norm`` / ``other``."""
        return self.place(name).kind

    def checkpoint_names(
        self, runtime_prefix: str, available_names: Iterable[str], *, descendants: bool = False
    ) -> list[str]:
        """The available names (tensor or module names) behind a runtime prefix.

        Any root variant of the prefix is accepted. With ``descendants`` a
        parent prefix (``model.layers.43``) collects every module under it.
        """
        want = runtime_prefix
        out = []
        for name in available_names:
            prefixes = self.place(name).runtime_prefixes
            if want in prefixes or (
                descendants and any(p.startswith(want + ".") for p in prefixes)
            ):
                out.append(name)
        return out

    def group_by_runtime_prefix(self, names: Iterable[str]) -> dict[str, list[str]]:
        """Names grouped by canonical runtime prefix, in first-seen order."""
        return self.grouped(names)[0]

    def grouped(self, names: Iterable[str]) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
        """``group_by_runtime_prefix``, and by prefix the distinct ``alike`` names of its group
        in first-seen order (each name is made ``alike`` once: 45,000 in a DeepSeek export)."""
        names = list(names)
        alikes = list(map(alike, names))
        prefix_of = {key: self.place(key).runtime_prefix for key in dict.fromkeys(alikes)}
        # a prefix's names mostly come in one run (a layer's experts): grouped run by run, C-level maps
        groups: dict[str, list[str]] = {}
        for prefix, run in groupby(zip(map(prefix_of.__getitem__, alikes), names, strict=True), key=_FIRST):
            groups.setdefault(prefix, []).extend(map(_SECOND, run))
        keys: dict[str, list[str]] = {}
        for key, prefix in prefix_of.items():  # a key has one prefix: first seen in its group as overall
            keys.setdefault(prefix, []).append(key)
        return groups, keys

    def is_draft(self, name: str) -> bool:
        return self.role(name).is_draft

    def draft_checkpoint_prefixes(self) -> tuple[str, ...]:
        """Checkpoint-name prefixes under which draft tensors are expected."""
        return tuple(f"model.layers.{i}." for i in self.draft_layers)

    def draft_inputs(self) -> list[tuple[int | None, tuple[str, ...]]]:
        """Runtime prefixes the draft model of this layout's draft kind builds to take
        its inputs, per draft layer (``None``: once per drafter): a draft method whose
        inputs are not stored cannot load the stored draft. Empty where not modelled."""
        return []

    # -- family hooks -----------------------------------------------------

    def _place(self, module: str) -> Placement:  # pragma: no cover - abstract
        raise NotImplementedError

    def _runtime_role(self, name: str) -> r.Role | None:
        """Role decided from the runtime spelling alone, or None to ask ``_place``."""
        if self.sglang_nextn_top and self.engine == SGLANG and name.startswith("model."):
            head = name.removeprefix("model.")
            if head.split(".", 1)[0] == "decoder" or head.startswith(self.sglang_nextn_top):
                return r.Role(r.DRAFT, r.MTP, self.num_hidden_layers, 0)  # SGLang's one NextN layer
        idx = layer_index(name)
        if idx is not None and idx >= self.num_hidden_layers:
            return self._draft_role(idx - self.num_hidden_layers)
        return None

    # -- the recorded plan ---------------------------------------------------

    plan: plans.Plan | None = None  # the engine's recorded build plan, where the layout reads one

    def _plan_side(self, role: r.Role) -> plans.Side | None:
        """The plan's side that builds a module of ``role``: its draft where the plan records
        this layout's draft kind (an MTP plan says nothing of an EAGLE head), else its target."""
        if self.plan is None:
            return None
        if not role.is_draft:
            return self.plan.target
        method = self.plan.draft_method or ""
        return self.plan.draft if self.draft_kind and method.startswith(self.draft_kind) else None

    def _planned(self, p: Placement) -> Placement:
        """``p`` as the recorded plan has it: the module the hand-written naming put the
        checkpoint module in, found in the plan by its runtime prefix (else its parameter
        path), gives the quant prefix vLLM asks about, the layer class's kind and the real
        parameter path. A module the plan does not record keeps the hand-written answer."""
        side = self._plan_side(p.role)
        if side is None:
            return p
        concrete, row, by_path = p.runtime_prefix, side.by_quant_prefix(p.runtime_prefix), False
        if row is None:  # the parameter path's layer numbers are the draft's own ({d}), not runtime ones
            concrete, row, by_path = p.parameter_prefix, side.by_path(p.parameter_prefix), True
        if row is None:  # a shard the hand-written fusions leave alone: the loader's own renames
            concrete, row = _fused_row(side, p.parameter_prefix)
        if row is None:
            return p
        asked, path = row.at(concrete, self.num_hidden_layers, path=by_path)
        quant = asked or p.runtime_prefix  # never asked: specguard's own name for it stays
        kind = p.kind if row.kind == r.OTHER else row.kind
        if quant == p.runtime_prefix and kind == p.kind and path in (None, p.parameter_prefix):
            return p  # the hand-written naming already says what the plan records
        extra = tuple(x for x in p.runtime_prefixes if x not in (p.runtime_prefix, quant))
        return self._placement(p.checkpoint_name, p.role, kind, quant, path or p.parameter_prefix, extra)

    # -- helpers for subclasses -------------------------------------------

    def _draft_role(self, i: int | None) -> r.Role:
        layer = None if i is None else self.num_hidden_layers + i
        return r.Role(r.DRAFT, self.draft_kind or r.MTP, layer, i)

    @staticmethod
    def _placement(
        module: str,
        role: r.Role,
        kind: r.ModuleKind,
        prefix: str,
        parameter_prefix: str | None = None,
        extra: tuple[str, ...] = (),
    ) -> Placement:
        prefixes = (prefix, *(p for p in extra if p != prefix))
        return Placement(module, role, kind, prefix, prefixes, parameter_prefix or prefix)


def _fused_row(side: plans.Side, path: str) -> tuple[str, plans.ModuleRow | None]:
    """The module a shard loads into by the plan's stacked renames (vLLM's ``weight_name in
    name`` test on the tensor name), where the plan records it."""
    dotted = path + "."
    for shard, fused in side.shard_renames:
        if shard in dotted:
            candidate = dotted.replace(shard, fused, 1).rstrip(".")
            row = side.by_path(candidate)
            if row is not None:
                return candidate, row
    return path, None


def join(*parts: str) -> str:
    """Dotted join that skips empty parts (an empty root)."""
    return ".".join(p for p in parts if p)
