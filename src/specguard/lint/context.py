"""What every rule sees: the resolvers (target, and a separate drafter) and their routes."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from specguard.layouts.runs import describe as describe  # one definition; rules import it from here
from specguard.resolve import Resolver, Route

if TYPE_CHECKING:
    from specguard.lint.content import ScaleSamples
    from specguard.repair.plan import Plan


@dataclass(frozen=True)
class QuantFiles:
    """config.json's quantization_config against hf_quant_config.json, route by route."""

    differ: tuple[str, ...]  # runtime prefixes the two files claim different schemes for
    explained: frozenset[str]  # prefixes misrouted under config.json's claim, ok under hf_quant_config.json's


@dataclass
class LintContext:
    resolvers: list[Resolver]
    _routes: dict[int, list[Route]] = field(default_factory=dict)
    _scales: dict[int, ScaleSamples] = field(default_factory=dict)
    _files: dict[int, QuantFiles | None] = field(default_factory=dict)
    _plan: Plan | None = None  # the repair planner's plan (lint/fixes.py ``plan``)
    _rerouted: dict[tuple[int, str], Resolver | None] = field(default_factory=dict)  # lint/fixes.py ``checked``

    @property
    def engine_name(self) -> str:
        """The modelled engine every finding names ("vLLM 0.33"): one per lint run."""
        return self.resolvers[0].vllm.name if self.resolvers else "the engine"

    @property
    def has_plugin(self) -> bool:
        """specguard has a load-time plugin for the engine (vLLM's); for SGLang it has none, so no fix
        text offers one (docs/engines.md)."""
        return bool(self.resolvers) and self.resolvers[0].engine.startswith("vllm")

    def quant_files(self, r: Resolver) -> QuantFiles | None:
        """Where config.json's quantization_config and hf_quant_config.json claim different
        schemes (None: one file, or they agree). Shared by SG103 and the SG2xx rules, which
        leave the modules it explains to SG103."""
        from specguard.lint.fixes import quant_files

        key = id(r)
        if key not in self._files:
            self._files[key] = quant_files(self, r)
        return self._files[key]

    def explained(self, r: Resolver) -> frozenset[str]:
        """Runtime prefixes whose misrouting SG103 reports as one cause."""
        qf = self.quant_files(r)
        return qf.explained if qf else frozenset()

    def scales(self, r: Resolver) -> ScaleSamples:
        """Scale samples (lint/content.py), read once per lint run and shared by the rules."""
        from specguard.lint.content import read_scales

        key = id(r)
        if key not in self._scales:
            self._scales[key] = read_scales(r)
        return self._scales[key]

    def routes(self, r: Resolver) -> list[Route]:
        key = id(r)
        if key not in self._routes:
            self._routes[key] = r.routes()
        return self._routes[key]

    def all_routes(self) -> Iterator[tuple[Resolver, Route]]:
        for r in self.resolvers:
            for rt in self.routes(r):
                yield r, rt
