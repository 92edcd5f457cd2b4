"""Turn a module list and a storage recipe into real safetensors shards.

Weights are BF16 (seeded, or given); each module is stored through the codecs
in the format its recipe picks, and its ``ExpectedModule`` is recorded from
what was actually written: the expected map is a by-product of building the
checkpoint, never a second table.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np

from specguard import codecs
from specguard.checkpoint.dtypes import FROM_NUMPY
from specguard.checkpoint.writer import save_file, save_index
from specguard.factory.models import EMBED, LM_HEAD, NORM, ModuleSpec
from specguard.formats.modules import split_name
from specguard.formats.scheme import BF16, FP8_BLOCK, FP32, NVFP4, PLAIN, UNQUANTIZED, Convention, Format, Scheme
from specguard.layouts import layout_for
from specguard.layouts.roles import LINEAR, ROUTED_EXPERTS


@dataclass(frozen=True)
class Storage:
    """How one module is stored: a format as a convention writes it, plus codec options.

    ``drop`` names tensor suffixes the publisher left out (S5's missing
    per-tensor scales); they are recorded as ``missing`` in the expected map.
    """

    format: Format
    convention: Convention = PLAIN
    opts: Mapping[str, Any] = field(default_factory=dict)
    drop: tuple[str, ...] = ()


PLAIN_BF16 = Storage(BF16)


@dataclass(frozen=True)
class ExpectedModule:
    """The right answer for one checkpoint module, from how the factory built it."""

    format: str  # scheme constant of what is stored
    role: str  # main / draft / embedding / head
    scheme: Scheme  # format, convention, group/block, scale and weight dtypes as written
    tensors: Mapping[str, tuple[str, tuple[int, ...]]]  # suffix -> (safetensors dtype, shape)
    missing: tuple[str, ...] = ()  # suffixes the format needs but the files lack
    kind: str = ""  # factory module kind (attn, expert, shared, proj, gate, norm, ...)
    draft_index: int | None = None

    @property
    def convention(self) -> str | None:
        return self.scheme.convention

    @property
    def quantized(self) -> bool:
        return self.format not in UNQUANTIZED


def tensor_seed(seed: int, name: str) -> np.random.Generator:
    """Per-tensor generator: a module's weights do not depend on which others exist."""
    return np.random.default_rng([seed, zlib.crc32(name.encode())])


def initial_weight(spec: ModuleSpec, seed: int) -> np.ndarray:
    """Seeded BF16 weight (returned as float32 holding BF16 values).

    Norms are ones; matrices are N(0, 1/in) with a per-row log-normal spread, so
    block scales vary the way trained weights' do.
    """
    if spec.kind == NORM:
        return np.ones(spec.shape, np.float32)
    rng = tensor_seed(seed, spec.name)
    w = rng.standard_normal(spec.shape, dtype=np.float32) / np.float32(np.sqrt(spec.shape[-1]))
    if spec.kind not in (EMBED, LM_HEAD):
        w *= rng.lognormal(0.0, 0.5, (spec.shape[0], 1)).astype(np.float32)
    return to_bf16_values(w)


def to_bf16_values(w: np.ndarray) -> np.ndarray:
    return np.asarray(w, np.float32).astype(ml_dtypes.bfloat16).astype(np.float32)


def _extra(spec: ModuleSpec, suffix: str, shape: tuple[int, ...], dtype: str,
           seed: int, given: Mapping[str, np.ndarray]) -> np.ndarray:
    name = f"{spec.name}.{suffix}"
    if name in given:
        arr = np.asarray(given[name], np.float32)
    else:
        arr = tensor_seed(seed, name).standard_normal(shape).astype(np.float32) * np.float32(0.01)
    if arr.shape != shape:
        raise ValueError(f"{name}: given shape {arr.shape}, the scenario needs {shape}")
    return arr.astype(np.float32) if dtype == "F32" else arr.astype(ml_dtypes.bfloat16)


def module_weight(spec: ModuleSpec, seed: int, given: Mapping[str, np.ndarray]) -> np.ndarray:
    """The module's BF16 weight (as float32): given, or seeded."""
    wname = f"{spec.name}.weight"
    if wname not in given:
        return initial_weight(spec, seed)
    w = to_bf16_values(given[wname])
    if w.shape != spec.shape:
        raise ValueError(f"{wname}: given shape {w.shape}, the scenario needs {spec.shape}")
    return w


def input_amax(spec: ModuleSpec, seed: int) -> float:
    """Seeded calibration amax of the module's input activations."""
    return float(tensor_seed(seed, spec.name + "#act").uniform(1.0, 8.0))


def module_tensors(spec: ModuleSpec, storage: Storage, seed: int,
                   given: Mapping[str, np.ndarray],
                   stored: Mapping[str, np.ndarray] | None = None,
                   ) -> tuple[dict[str, np.ndarray], ExpectedModule]:
    """The tensors (suffix -> on-disk array) of one module and its expected entry.

    ``stored``: the module's quantized tensors when they were made together with
    its fused siblings (see :func:`quantize_fused`); otherwise it is quantized alone.
    """
    lay = None if storage.format == BF16 else codecs.layout(storage.format, storage.convention)
    if stored is not None:
        tensors = dict(stored)
    elif lay is None:
        tensors = {"weight": module_weight(spec, seed, given).astype(ml_dtypes.bfloat16)}
    else:
        opts = dict(storage.opts)
        if lay.input_scale and "input_amax" not in opts:
            opts["input_amax"] = input_amax(spec, seed)
        tensors = codecs.quantize(storage.format, module_weight(spec, seed, given),
                                  convention=storage.convention, **opts)
    for suffix, shape, dtype in spec.extras:
        tensors[suffix] = _extra(spec, suffix, shape, dtype, seed, given)
    missing = tuple(s for s in storage.drop if s in tensors)
    if len(missing) != len(storage.drop):
        raise ValueError(f"{spec.name}: cannot drop {storage.drop}; it has {sorted(tensors)}")
    for s in missing:
        del tensors[s]
    return tensors, _expected(spec, storage, lay, tensors, missing)


# Checkpoint names of the gate and up projections vLLM loads into one ``w13``
# per expert (fused_moe ``make_expert_params_mapping`` ckpt_gate/up_proj_name).
_EXPERT_GATE_UP = ("w1", "w3", "gate_proj", "up_proj")


def fusion_groups(specs: list[ModuleSpec], config: Mapping[str, Any]) -> list[list[ModuleSpec]]:
    """Modules vLLM loads into one fused layer, as the checkpoint's own layout places
    them (:mod:`specguard.layouts.fusions`): the shards of a fused linear
    (``wq_a``/``wkv``, gate/up) share a runtime prefix; an expert's gate and up
    projections fuse into its ``w13``."""
    layout = layout_for(config)
    groups: dict[str, list[ModuleSpec]] = {}
    for spec in specs:
        place = layout.place(spec.name)
        if place.kind == ROUTED_EXPERTS and spec.name.rsplit(".", 1)[-1] in _EXPERT_GATE_UP:
            key = spec.name.rsplit(".", 1)[0]  # the expert
        elif place.kind == LINEAR:
            key = place.runtime_prefix
        else:
            continue
        groups.setdefault(key, []).append(spec)
    return [g for g in groups.values() if len(g) > 1]


def shares_global_scale(storage: Storage) -> bool:
    """Formats with a per-tensor global scale, which fused shards must share."""
    return storage.format == NVFP4


def quantize_fused(group: list[ModuleSpec], storage: Storage, seed: int,
                   given: Mapping[str, np.ndarray]) -> dict[str, dict[str, np.ndarray]]:
    """Quantize fused shards against one global scale, as the publishers do before export.

    ModelOpt (``quant_utils.preprocess_linear_fusion``) sets every shard's weight
    and input amax to the group's max; llm-compressor
    (``update_fused_layer_weight_global_scales``) sets every ``weight_global_scale``
    to the group's min, i.e. the max amax. Quantizing the shards stacked along the
    output dim is exactly that: NVFP4 block scales are per row, and the global
    scale comes from the amax of the whole stack. Returns name -> tensors.
    """
    weights = [module_weight(m, seed, given) for m in group]
    opts = dict(storage.opts)
    lay = codecs.layout(storage.format, storage.convention)
    if lay.input_scale and "input_amax" not in opts:
        opts["input_amax"] = max(input_amax(m, seed) for m in group)
    stacked = codecs.quantize(storage.format, np.concatenate(weights, axis=0),
                              convention=storage.convention, **opts)
    rows = sum(w.shape[0] for w in weights)
    out: dict[str, dict[str, np.ndarray]] = {}
    start = 0
    for m, w in zip(group, weights, strict=True):
        stop = start + w.shape[0]
        out[m.name] = {k: _rows(a, rows, start, stop, k) for k, a in stacked.items()}
        start = stop
    return out


def _rows(a: np.ndarray, rows: int, start: int, stop: int, suffix: str) -> np.ndarray:
    """One shard's slice of a stacked tensor; per-tensor scales are shared whole."""
    if a.size == 1:
        return a.copy()
    if a.ndim == 0 or a.shape[0] != rows:
        raise ValueError(f"{suffix}: shape {a.shape} is neither per-row nor per-tensor")
    return np.ascontiguousarray(a[start:stop])


def _dtype(a: np.ndarray) -> str:
    return FROM_NUMPY[a.dtype]


def _expected(spec: ModuleSpec, storage: Storage, lay: codecs.PackLayout | None,
              tensors: Mapping[str, np.ndarray], missing: tuple[str, ...]) -> ExpectedModule:
    written = {k: (_dtype(v), tuple(v.shape)) for k, v in tensors.items()}
    if lay is None:
        scheme = Scheme(BF16, PLAIN, weight_dtype="BF16")
    else:
        scale = next(n for n in (storage.opts.get("scale_name"), *lay.scale) if n is not None and n in tensors)
        group = storage.opts.get("group_size") or lay.group_size
        scheme = Scheme(
            storage.format, storage.convention,
            group_size=None if storage.format == FP8_BLOCK else group,
            block=tuple(storage.opts.get("block", lay.block)) if storage.format == FP8_BLOCK
            else None,
            scale_dtype=_dtype(tensors[scale]), weight_dtype=_dtype(tensors[lay.weight]),
        )
    return ExpectedModule(storage.format, spec.role, scheme, written, missing, spec.kind,
                          spec.draft_index)


def _split_modules(spec: ModuleSpec, exp: ExpectedModule) -> dict[str, ExpectedModule]:
    """Key the expected map by checkpoint module as specguard's reader groups tensors:
    an extra whose suffix is not a parameter suffix there (DeepSeek-V3's
    ``mlp.gate.e_score_correction_bias``) is a module of its own."""
    out = {spec.name: exp}
    for suffix, _, dtype in spec.extras:
        module, param = split_name(f"{spec.name}.{suffix}")
        if module == spec.name:
            continue
        dt_shape = exp.tensors[suffix]
        fmt = FP32 if dtype == "F32" else BF16
        out[module] = ExpectedModule(fmt, exp.role, Scheme(fmt, PLAIN, weight_dtype=dtype),
                                     {param: dt_shape}, (), spec.kind, spec.draft_index)
        out[spec.name] = replace(out[spec.name], tensors={
            k: v for k, v in out[spec.name].tensors.items() if k != suffix})
    return out


@dataclass
class Written:
    """What ``write_checkpoint`` put on disk."""

    path: Path
    expected: dict[str, ExpectedModule]
    tensor_names: list[str]
    total_size: int


def write_checkpoint(
    path: Path,
    specs: list[ModuleSpec],
    storage_of: Callable[[ModuleSpec], Storage],
    config: Mapping[str, Any],
    *,
    seed: int,
    given: Mapping[str, np.ndarray],
    shard_bytes: int,
    draft_shard: str | None = None,
    extra_files: Mapping[str, Mapping[str, Any]] | None = None,
) -> Written:
    """Write config.json (+ extra JSON files), sharded safetensors and the index."""
    expected: dict[str, ExpectedModule] = {}
    ordered: list[tuple[str, np.ndarray, bool]] = []  # (tensor name, array, in draft shard)
    fused: dict[str, dict[str, np.ndarray]] = {}
    for group in fusion_groups(specs, config):
        storage = storage_of(group[0])
        if shares_global_scale(storage) and all(storage_of(m) == storage for m in group[1:]):
            fused |= quantize_fused(group, storage, seed, given)
    for spec in specs:
        storage = storage_of(spec)
        tensors, exp = module_tensors(spec, storage, seed, given, fused.get(spec.name))
        lay = codecs.layout(storage.format, storage.convention) if storage.format != BF16 else None
        to_draft = draft_shard is not None and exp.role == "draft"
        for suffix, arr in tensors.items():
            name = lay.tensor_name(spec.name, suffix) if lay else f"{spec.name}.{suffix}"
            ordered.append((name, arr, to_draft))
        expected.update(_split_modules(spec, exp))
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    for fname, content in (extra_files or {}).items():
        (path / fname).write_text(json.dumps(content, indent=2) + "\n")
    shards = _shard(ordered, shard_bytes, draft_shard)
    weight_map: dict[str, str] = {}
    total = 0
    for fname, items in shards.items():
        save_file(dict(items), path / fname, {"format": "pt"})
        for name, arr in items:
            weight_map[name] = fname
            total += arr.nbytes
    save_index(weight_map, path, total)
    return Written(path, expected, [n for n, _, _ in ordered], total)


def _shard(ordered: list[tuple[str, np.ndarray, bool]], budget: int,
           draft_shard: str | None) -> dict[str, list[tuple[str, np.ndarray]]]:
    """HF-style shards in write order, cut when a shard would pass ``budget`` bytes;
    draft tensors go to ``draft_shard`` when given (compressed-tensors' MTP export)."""
    groups: list[list[tuple[str, np.ndarray]]] = [[]]
    size = 0
    extra: list[tuple[str, np.ndarray]] = []
    for name, arr, to_draft in ordered:
        if to_draft:
            extra.append((name, arr))
            continue
        if groups[-1] and size + arr.nbytes > budget:
            groups.append([])
            size = 0
        groups[-1].append((name, arr))
        size += arr.nbytes
    n = len(groups)
    shards = {f"model-{i + 1:05d}-of-{n:05d}.safetensors": g for i, g in enumerate(groups)}
    if extra:
        shards[draft_shard] = extra  # type: ignore[index]
    return shards
