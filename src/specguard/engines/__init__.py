"""Engine models: what a given engine version builds for a runtime prefix, and why.

An engine model restates one engine version's routing from that version's
source (each module cites the files and functions it restates), so specguard
can say where the engine goes wrong. It is not a config claim (``declared/``
parses those) and not what specguard routes to (``resolve.py`` routes by the
disk). A new engine version is a new module beside the old one
(``engines/vllm/v0_34.py``), not an edit of it.

The one model today is ``engines.vllm.v0_33.Vllm033``; its ``ENGINE`` constant
("vLLM 0.33") is the name every message uses.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from specguard.formats.scheme import Scheme
from specguard.formats.table import Module

if TYPE_CHECKING:
    from specguard.layouts import Layout

NOT_MODELLED = "unknown"  # EngineChoice.method where specguard has no model of what the engine builds
NO_PLAN = "no plan"  # EngineChoice.method where no plan or family model says what is built
# Which of an engine's models builds a module: the target, or the draft model of one method.
TARGET_MODEL, MTP_MODEL, DSPARK_MODEL, EAGLE_MODEL = "target", "mtp", "dspark", "eagle"


@dataclass(frozen=True)
class EngineChoice:
    """The quant method an engine builds for one layer, as a Scheme, and why."""

    scheme: Scheme
    method: str  # the engine's class name of the quant method
    reason: str  # the rule that decided, citing the engine's file:function
    quant_config: str | None  # the engine's quant-config class path, None without quantization

    @property
    def quantized(self) -> bool:
        return self.scheme.quantized


@dataclass(frozen=True)
class Refusal:
    """The engine stops at ``stage`` raising ``raises``, because ``because`` (cited from
    its source); ``names``: the checkpoint modules concerned (none: all of them)."""

    stage: str
    raises: str
    because: str
    names: tuple[str, ...] = ()


class EngineModel(Protocol):
    """One engine version's routing for one target checkpoint (and its draft), under its config."""

    name: str  # the modelled engine and version, as messages print it ("vLLM 0.33")
    platforms: tuple[str, ...]  # the platform classes that pick what it builds ("cuda", "rocm", "cpu")
    # how it lays the config out (the Resolver hands it its own where the two are the same: one cache)
    layout: Layout

    # Name facts other stages ask the engine (they import no engine module). An engine
    # without DeepSeek-V4.1's ``ignore`` reading answers None; without renames, the pattern.
    def v41_ignore_name(self, prefix: str, num_hidden_layers: int) -> str | None:
        """The name DeepSeek-V4.1's quant config matches its ``ignore`` list against for ``prefix``."""
        ...

    def exclusion_rename(self, pattern: str, *, v41: bool = False) -> str:
        """An exclusion entry as the engine renames it before matching."""
        ...

    def gptq_dynamic_fix(self, dynamic: dict, prefixes: list[str], quantized: Sequence[str] = ()) -> dict | None:
        """A GPTQ ``dynamic`` map that builds exactly ``prefixes`` unquantized (None: none does)."""
        ...

    def builds(self, runtime_prefix: str, *, kind: str, model: str | None = None) -> EngineChoice:
        """What the engine builds for the layer at ``runtime_prefix`` of module kind ``kind``
        (``model``: which of the engine's models builds it; default from the prefix's role)."""
        ...

    def refusals(self, modules: Mapping[str, Module]) -> list[Refusal]:
        """Why the engine will not start on this checkpoint (empty: it starts)."""
        ...

    def built_without_quant_config(self, prefix: str, kind: str) -> bool:
        """Whether the model class builds this layer with no quant config at all."""
        ...

    def fused_shards(self, prefix: str, model: str | None = None) -> tuple[str, ...]:
        """The shard prefixes the engine tests exclusions against for a fused layer (empty: unfused)."""
        ...

    def not_built(self, prefix: str, model: str | None = None) -> EngineChoice | None:
        """What stands in for ``builds`` when the served model does not build this stored
        module at all (None: it does): no claim is made for it."""
        ...


__all__ = ["DSPARK_MODEL", "EAGLE_MODEL", "MTP_MODEL", "NOT_MODELLED", "NO_PLAN", "TARGET_MODEL", "EngineChoice",
           "EngineModel", "Refusal"]
