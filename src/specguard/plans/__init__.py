"""Build plans recorded from an engine's own model construction (docs/architecture.md "Plans").

A plan is data: ``plans/<engine>/<name>.json``, written by scripts/record_plans.py
(engines/vllm/recorder.py) and re-recorded by CI (tests/plans/test_recorded.py).
This stage only reads them: no torch, no vLLM, each file parsed once per process.

Templates in a plan's module paths and quant prefixes: ``{L}`` a target layer
index, ``{D}`` a draft layer's runtime index (``start + d``), ``{d}`` the draft's
own 0-based index (a ModuleList the draft numbers from 0).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache, cached_property, lru_cache
from importlib import resources
from typing import Any

from specguard.vocabulary import Vocabulary

SCHEMA = 1
DEFAULT_ENGINE = "vllm-0.33"
_INDEX = re.compile(r"((?:^|\.)layers\.)(?:\d+|\{[LDd]\})(?=\.|$)")


class LayerClass(Vocabulary):
    """What class of engine layer a module becomes (layouts.roles.ModuleKind is this one
    vocabulary). The declared stage keys its rules on these (a global MoE switch applies to
    routed experts only; ModelOpt quantizes heads; Fp8Config never does). ``embedding``/``head``
    here name layer classes, not the roles of the same words."""

    ROUTED_EXPERTS = "routed_experts"
    LINEAR = "linear"
    EMBEDDING = "embedding"
    HEAD = "head"
    NORM = "norm"
    OTHER = "other"


def layer_class_kind(name: str) -> LayerClass:
    """The kind of an engine layer class by its name (vLLM's class names)."""
    if name in ("RoutedExperts", "FusedMoE", "SharedFusedMoE") or name.endswith("FusedMoE"):
        return LayerClass.ROUTED_EXPERTS
    if name == "ParallelLMHead":
        return LayerClass.HEAD
    if "Embedding" in name:
        return LayerClass.EMBEDDING
    if "Norm" in name:
        return LayerClass.NORM
    if name.endswith("Linear"):
        return LayerClass.LINEAR
    return LayerClass.OTHER


@lru_cache(maxsize=1 << 16)  # routing asks about each prefix from the layout and the engine model
def shape(name: str) -> str:
    """A prefix with every layer index (or template) as ``#``: the key plans are looked up by."""
    return _INDEX.sub(r"\1#", name)


_PLACEHOLDER = re.compile(r"\{[LDd]\}")
_NUMBERS = re.compile(r"(?:^|\.)layers\.(\d+)(?=\.|$)")


def instantiate(template: str, like: str) -> str:
    """``template`` with its layer placeholders set to the layer numbers of ``like``, in order
    (a quant-prefix template filled from the concrete parameter path it was found by)."""
    numbers = iter(_NUMBERS.findall(like))
    return _PLACEHOLDER.sub(lambda m: next(numbers, m.group(0)), template)


_LITERAL_INDEX = re.compile(r"\.\d+(?=\.|$)")


def fill(template: str, values: Mapping[str, int]) -> str | None:
    """``template`` with its ``{L}``/``{D}``/``{d}`` set from ``values``; None where one is unknown."""
    try:
        return _PLACEHOLDER.sub(lambda m: str(values[m.group(0)[1]]), template)
    except KeyError:
        return None


def layer_values(template: str, concrete: str, start: int) -> dict[str, int]:
    """The layer placeholders of ``template`` read off ``concrete`` (the same shape), with
    ``D = start + d`` completed both ways (``start``: the first draft layer's runtime index)."""
    names = [m.group(0)[1] for m in _PLACEHOLDER.finditer(template)]
    values = dict(zip(names, map(int, _NUMBERS.findall(concrete)), strict=False))
    if "d" in values:
        values.setdefault("D", start + values["d"])
    if "D" in values:
        values.setdefault("d", values["D"] - start)
    return values


@lru_cache(maxsize=4096)
def _literal_index(template: str) -> bool:
    """Whether a recorded path holds a layer number no placeholder stands for."""
    return _LITERAL_INDEX.search(_PLACEHOLDER.sub("", template)) is not None


@dataclass(frozen=True, slots=True)
class ModuleRow:
    """One module the engine builds: its parameter path, layer class, and the prefix the
    quant config is asked about (None: built with ``quant_config=None``, never asked)."""

    path: str
    layer_class: str
    quant_prefix: str | None

    @property
    def kind(self) -> LayerClass:
        return layer_class_kind(self.layer_class)

    @property
    def asks_quant_config(self) -> bool:
        return self.quant_prefix is not None

    def at(self, prefix: str, start: int, *, path: bool = False) -> tuple[str | None, str | None]:
        """This row for the real layer ``prefix`` names (its quant prefix, or with ``path``
        its parameter path): its quant prefix (None: never asked) and its parameter path
        (None where the recorded path holds a layer number no template stands for: MiMo's
        ``model.mtp_layers.4``)."""
        like = self.path if path or self.quant_prefix is None else self.quant_prefix
        values = layer_values(like, prefix, start)
        quant = fill(self.quant_prefix, values) if self.quant_prefix is not None else None
        where = fill(self.path, values)
        if where is not None and _literal_index(self.path):
            where = None
        return quant, where


@dataclass(frozen=True)
class Side:
    """The target or the draft model of a plan: its modules and its loader's name mapping."""

    architecture: str
    model_class: str
    modules: tuple[ModuleRow, ...]
    loader: Mapping[str, Any]
    _by_quant: dict[str, ModuleRow] = field(default_factory=dict, repr=False, compare=False)
    _by_path: dict[str, ModuleRow] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        for row in self.modules:
            self._by_path.setdefault(shape(row.path), row)
            if row.quant_prefix is not None:
                self._by_quant.setdefault(shape(row.quant_prefix), row)

    def by_quant_prefix(self, prefix: str) -> ModuleRow | None:
        """The module the quant config is asked about under ``prefix`` (any layer index)."""
        return self._by_quant.get(shape(prefix))

    def by_path(self, path: str) -> ModuleRow | None:
        """The module at parameter path ``path`` (any layer index)."""
        return self._by_path.get(shape(path))

    def find(self, prefix: str) -> ModuleRow | None:
        """The module a runtime prefix names: as a quant prefix first, else as a parameter path."""
        return self.by_quant_prefix(prefix) or self.by_path(prefix)

    @property
    def packed_modules_mapping(self) -> dict[str, list[str]]:
        return dict(self.loader.get("packed") or {})

    @property
    def mapper(self) -> Mapping[str, Any]:
        """The model's ``hf_to_vllm_mapper`` (prefix / substr / suffix / regex / stacked tables)."""
        return self.loader.get("mapper") or {}

    @cached_property
    def shard_renames(self) -> tuple[tuple[str, str], ...]:
        """(shard, fused) substrings the loader renames a checkpoint name by: its
        ``load_weights``' ``stacked_params_mapping`` and the mapper's ``stacked`` table
        (``.q_proj`` -> ``.qkv_proj``; DeepSeek-V2-style ``q_a_proj`` -> ``fused_qkv_a_proj``)."""
        out = {(str(shard), str(fused)): None for fused, shard, *_ in self.loader.get("stacked") or ()}
        out.update({(str(shard), str(v[0])): None for shard, v in (self.mapper.get("stacked") or {}).items()})
        return tuple(out)

    def layer_renames(self) -> tuple[tuple[str, str], ...]:
        """The mapper's substring/prefix renames that put a checkpoint name under a draft
        layer (``model.mtp_block.0.`` -> ``model.layers.{D}.mtp_block.``), templates kept."""
        out = []
        for table in ("prefix", "substr"):
            for old, new in (self.mapper.get(table) or {}).items():
                if new is not None and "{D}" in new:
                    out.append((old, new))
        return tuple(out)


@dataclass(frozen=True)
class Plan:
    """One recorded (engine, architecture): what the target builds and, where served, its draft."""

    engine: str
    name: str
    target: Side
    draft: Side | None
    draft_method: str | None
    draft_start: int | None  # runtime index of the first draft layer, as recorded
    draft_count: int | None  # draft layers built, as recorded
    draft_count_keys: tuple[str, ...]  # config keys the built count equals (empty: a constant)
    draft_count_default: int | None  # built without those keys (None: the engine requires one)
    recorded_with: Mapping[str, Any]
    device: str | None = None  # "cuda": recorded as a CUDA server builds it (nvidia/ classes); None: any

    def answers_for(self, platform: str) -> bool:
        """Whether this plan describes what the engine builds on ``platform`` (cuda/rocm/cpu)."""
        return self.device is None or self.device == platform

    def draft_layers(self, config: Mapping[str, Any]) -> int | None:
        """How many draft layers the engine builds for ``config`` (its text config):
        the recorded key's value, or the recorded constant where no key gave it."""
        if self.draft is None or self.draft_count is None:
            return None
        for key in self.draft_count_keys:
            value = config.get(key)
            if isinstance(value, int) and not isinstance(value, bool):
                return value
        return self.draft_count_default if self.draft_count_keys else self.draft_count


def _side(raw: Mapping[str, Any]) -> Side:
    rows = tuple(ModuleRow(str(p), str(c), None if q is None else str(q)) for p, c, q in raw["modules"])
    return Side(str(raw["architecture"]), str(raw["class"]), rows, raw.get("loader") or {})


def _read(engine: str, file: str) -> Any:
    node = resources.files(__package__).joinpath(engine, file)
    if not node.is_file():
        return None
    return json.loads(node.read_text())


@cache
def plan(name: str, engine: str = DEFAULT_ENGINE) -> Plan | None:
    """The plan recorded as ``name`` (a target architecture; ``Target+Drafter`` for an
    EAGLE drafter over it) for ``engine``, or None where none is recorded."""
    if "/" in name or name.startswith((".", "_")):
        return None
    raw = _read(engine, f"{name}.json")
    if raw is None or raw.get("schema") != SCHEMA:
        return None
    d = raw.get("draft")
    return Plan(
        engine=str(raw["engine"]), name=name, target=_side(raw["target"]),
        draft=_side(d) if d else None, draft_method=d.get("method") if d else None,
        draft_start=d.get("start") if d else None, draft_count=d.get("count") if d else None,
        draft_count_keys=tuple(d.get("count_keys") or ()) if d else (),
        draft_count_default=d.get("count_default") if d else None,
        recorded_with=raw.get("recorded_with") or {},
        device=(raw.get("platform") or {}).get("device"),
    )


@cache
def supported_architectures(engine: str = DEFAULT_ENGINE) -> frozenset[str] | None:
    """Every architecture the engine's model registry lists (None: not recorded)."""
    raw = _read(engine, "_registry.json")
    return frozenset(raw["architectures"]) if raw else None


@cache
def transformers_backend(engine: str = DEFAULT_ENGINE) -> frozenset[str]:
    """Generative classes the engine's pinned transformers exports (its Transformers-backend
    fallback for an architecture its own registry lacks); empty where not recorded."""
    raw = _read(engine, "_registry.json")
    return frozenset(raw.get("transformers_backend") or ()) if raw else frozenset()


@cache
def recorded(engine: str = DEFAULT_ENGINE) -> tuple[str, ...]:
    """Names of every plan recorded for ``engine``."""
    root = resources.files(__package__).joinpath(engine)
    if not root.is_dir():
        return ()
    return tuple(sorted(p.name.removesuffix(".json") for p in root.iterdir()
                        if p.name.endswith(".json") and not p.name.startswith("_")))


def plan_for_config(config: Mapping[str, Any], engine: str = DEFAULT_ENGINE,
                    drafter: Mapping[str, Any] | None = None) -> Plan | None:
    """The plan of the architecture ``config.json`` names (its first ``architectures``
    entry), with a separate drafter's architecture appended where one is given."""
    arch = _first_arch(config)
    if arch is None:
        return None
    if drafter is not None:
        d = _first_arch(drafter)
        return plan(f"{arch}+{d}", engine) if d else None
    return plan(arch, engine)


def _first_arch(config: Mapping[str, Any]) -> str | None:
    archs = config.get("architectures")
    if isinstance(archs, list) and archs and isinstance(archs[0], str):
        return archs[0]
    return None


__all__ = [
    "DEFAULT_ENGINE",
    "SCHEMA",
    "LayerClass",
    "ModuleRow",
    "Plan",
    "Side",
    "fill",
    "instantiate",
    "layer_class_kind",
    "layer_values",
    "plan",
    "plan_for_config",
    "recorded",
    "shape",
    "supported_architectures",
    "transformers_backend",
]
