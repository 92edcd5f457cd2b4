"""Small but real checkpoints in each publisher's layout, one per scenario.

``write_scenario("s1", outdir)`` writes config.json (plus hf_quant_config.json
where ModelOpt writes one), sharded safetensors and model.safetensors.index.json
from seeded BF16 weights (or given ones) through :mod:`specguard.codecs`, and
returns a :class:`ScenarioInfo` whose ``expected`` map says, for every
checkpoint module, which format is stored and which role it plays. That map is
recorded while building, so tests assert against how the module was made.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from specguard.errors import UsageError
from specguard.factory.build import ExpectedModule, Storage, write_checkpoint
from specguard.factory.models import SIZES, ModuleSpec, Sizes, modules
from specguard.factory.scenarios import ALIASES, SCENARIO_TABLE, Recipe, Scenario

__all__ = [
    "FACTORY_VERSION", "SCENARIOS", "SIZES", "ExpectedModule", "ScenarioInfo", "Sizes",
    "Storage", "sample_checkpoint", "weight_shapes", "write_scenario",
]

# Bump when the bytes a scenario writes change (keys the sample-checkpoint cache).
FACTORY_VERSION = "2"

SCENARIOS: dict[str, str] = {name: sc.title for name, sc in SCENARIO_TABLE.items()}


@dataclass(frozen=True)
class ScenarioInfo:
    """Where a scenario was written and the right answer for each module.

    ``expected`` covers the checkpoint at ``path``; S4 also has a drafter
    checkpoint at ``drafter_path`` with its own ``drafter_expected``. ``facts``
    holds scenario-level truths (draft kind, declared vs stored draft layers,
    ``num_hidden_layers``).
    """

    name: str
    title: str
    path: Path
    expected: Mapping[str, ExpectedModule]
    drafter_path: Path | None = None
    drafter_expected: Mapping[str, ExpectedModule] = field(default_factory=dict)
    facts: Mapping[str, Any] = field(default_factory=dict)
    tensors: tuple[str, ...] = ()  # tensor names written at ``path``

    def draft_modules(self) -> list[str]:
        """Checkpoint modules of the draft role (target and drafter together)."""
        both = {**self.expected, **self.drafter_expected}
        return sorted(m for m, e in both.items() if e.role == "draft")


def scenario_name(name: str) -> str:
    """The canonical name of a scenario: case-insensitive, aliases resolved (``S8-BF16`` -> ``s8``)."""
    key = name.strip().lower()
    key = ALIASES.get(key, key)
    if key not in SCENARIO_TABLE:
        raise UsageError(f"unknown scenario {name!r}; one of {', '.join(SCENARIOS)} "
                         f"(case-insensitive; aliases: {', '.join(f'{a} = {c}' for a, c in ALIASES.items())})")
    return key


def _scenario(name: str) -> Scenario:
    return SCENARIO_TABLE[scenario_name(name)]


def _sizes(size: str | Sizes) -> Sizes:
    if isinstance(size, Sizes):
        if size.layers < 2 or size.experts < 4:  # the scenarios' layouts need them
            raise ValueError("the factory needs at least 2 main layers and 4 experts")
        return size
    try:
        return SIZES[size]
    except KeyError:
        raise ValueError(f"unknown size {size!r}; one of {', '.join(SIZES)}") from None


def _specs(recipe: Recipe, s: Sizes) -> list[ModuleSpec]:
    specs = modules(recipe.family, recipe.draft, s, recipe.draft_layers, recipe.expert_names)
    if not recipe.main:
        specs = [m for m in specs if m.role == "draft"]
    return specs


def weight_shapes(name: str, size: str | Sizes = "tiny") -> dict[str, tuple[int, ...]]:
    """Float tensors a scenario takes (``weights=`` keys) and their shapes:
    ``{module}.weight`` for every module, plus router biases."""
    sc, s = _scenario(name), _sizes(size)
    out: dict[str, tuple[int, ...]] = {}
    for recipe in (sc.target, sc.drafter):
        if recipe is None:
            continue
        for m in _specs(recipe, s):
            out[f"{m.name}.weight"] = m.shape
            out.update({f"{m.name}.{suffix}": shape for suffix, shape, _ in m.extras})
    return out


def write_scenario(
    name: str,
    outdir: str | Path,
    *,
    seed: int = 0,
    size: str | Sizes = "tiny",
    weights: Mapping[str, np.ndarray] | None = None,
) -> ScenarioInfo:
    """Write scenario ``name`` under ``outdir`` (S4: ``outdir/target`` and ``outdir/drafter``).

    ``weights`` maps float tensor names (see :func:`weight_shapes`) to arrays;
    they are rounded to BF16 and stored through the scenario's formats; the
    rest are seeded. The caller owns ``outdir`` (the CLI refuses non-empty ones).
    """
    sc, s = _scenario(name), _sizes(size)
    outdir = Path(outdir)
    given = dict(weights or {})
    if given:
        _check_given(given, name, s)
    target_dir = outdir / "target" if sc.drafter else outdir
    target = _write(sc.target, target_dir, s, seed, given)
    drafter = _write(sc.drafter, outdir / "drafter", s, seed, given) if sc.drafter else None
    facts = {"num_hidden_layers": s.layers, **sc.facts}
    return ScenarioInfo(
        name=name, title=sc.title, path=target_dir, expected=target.expected,
        drafter_path=drafter.path if drafter else None,
        drafter_expected=drafter.expected if drafter else {},
        facts=facts, tensors=tuple(target.tensor_names),
    )


def _check_given(given: Mapping[str, np.ndarray], name: str, s: Sizes) -> None:
    shapes = weight_shapes(name, s)
    unknown = sorted(set(given) - set(shapes))
    if unknown:
        more = f" (+{len(unknown) - 5} more)" if len(unknown) > 5 else ""
        raise ValueError(f"given weights not in scenario {name}: {', '.join(unknown[:5])}{more}")
    for key, arr in given.items():
        if tuple(np.shape(arr)) != shapes[key]:
            raise ValueError(f"{key}: given shape {tuple(np.shape(arr))}, "
                             f"scenario {name} needs {shapes[key]}")


def _write(recipe: Recipe, path: Path, s: Sizes, seed: int,
           given: Mapping[str, np.ndarray]):
    specs = _specs(recipe, s)
    extra = {"hf_quant_config.json": recipe.hf_quant_config(s)} if recipe.hf_quant_config else None
    mine = {k: v for k, v in given.items() if k.rsplit(".", 1)[0] in {m.name for m in specs}}
    return write_checkpoint(path, specs, recipe.storage, recipe.config(s), seed=seed,
                            given=mine, shard_bytes=s.shard_bytes,
                            draft_shard=recipe.draft_shard,
                            draft_shard_indexed=recipe.draft_shard_indexed, extra_files=extra)


def sample_checkpoint() -> Path:
    """The embedded sample (scenario S1), generated on first use into the user cache.

    Generated rather than shipped: it is exactly what ``specguard factory s1``
    writes (~2 MB, deterministic), keeps the wheel small and never goes stale;
    the cache directory is keyed by FACTORY_VERSION.
    """
    from specguard.factory.sample import ensure_sample

    return ensure_sample()
