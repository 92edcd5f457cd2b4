"""Export the trained model through the factory and load it back under a routing policy.

A routing policy decides, per runtime module, which format an engine builds:

- ``resolver``: what is stored on disk (``specguard.resolve.Resolver.route(...).build``);
- ``global``: what vLLM 0.33 builds (``Route.vllm``): for DeepSeek-V4 the one
  global ``moe_quant_algo`` for every expert layer, draft included, and a
  separate drafter built with the target's quant config;
- ``bf16``: every module BF16, on a BF16 checkpoint (the unquantized
  reference: S8 for the MTP scenarios; for S4, which has no BF16 twin in the
  factory, the shipped BF16 weights via :func:`reference`).

Routed experts load through the reference vLLM-style loader
(:mod:`specguard.refdecoder.loader`): it allocates the parameter set of the method
the policy picks (NVFP4 / MXFP4 / BF16, with vLLM's ``torch.empty`` /
``torch.zeros``) and copies checkpoint tensors in with vLLM's semantics, under
:class:`specguard.guard.LoadGuard` — so parameters the checkpoint never wrote
hold the guard's NaN poison (deterministic "hostile garbage") and are named
in the report. The expert parameters are then dequantized with
:mod:`specguard.codecs` (torch back end) by the method that was built — MXFP4
bytes in NVFP4 slots are decoded as NVFP4, as the engine would — and the model
computes in float32 (weight-only dequantization; activations are not quantized).

Every other module (attention, shared experts, e_proj/h_proj, main_proj, norms,
router, embedding, head) is dequantized by its stored scheme when the policy
builds that same format; a module whose built format differs from its stored
one is reported as a load failure, not guessed at (it does not occur in the
scenarios' non-expert modules except where the expert load fails first).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from specguard.codecs import LAYOUTS as CODEC_LAYOUTS
from specguard.codecs import torch_backend as tcodecs
from specguard.factory import ScenarioInfo, Sizes, write_scenario
from specguard.formats.scheme import BF16, COMPRESSED_TENSORS, MODELOPT, MXFP4, NVFP4, UNQUANTIZED, Scheme
from specguard.guard import LoadGuard, LoadReport
from specguard.refdecoder import loader as ld
from specguard.refdecoder.model import DSparkDrafter, Transformer
from specguard.refdecoder.specdec import Drafter, DSparkDraft, MTPDrafter
from specguard.refdecoder.weights import (
    bf16_state_dict,
    load_dspark,
    load_weights,
    packaged_weights,
    read_bf16_safetensors,
)
from specguard.resolve import Resolver, Route

POLICIES = ("resolver", "global", "bf16")
SCENARIOS = ("s1", "s2", "s4")  # the layouts the demo exports (plus s8, the BF16 reference)
DSPARK = "dspark"


class LoadFailure(RuntimeError):
    """The policy built a module the checkpoint cannot be loaded into."""


@dataclass
class Loaded:
    """A model (and its drafter) loaded from a checkpoint under one policy."""

    policy: str
    model: Transformer
    drafter: Drafter
    expert_routes: dict[str, str] = field(default_factory=dict)  # runtime prefix -> method built
    report: LoadReport | None = None  # LoadGuard's report of the routed-expert load


# ----------------------------------------------------------------------------- export

def _numpy(tensors: Mapping[str, torch.Tensor]) -> dict[str, np.ndarray]:
    return {k: v.float().numpy() for k, v in tensors.items()}


def export_scenario(name: str, outdir: Path, model_path: Path | None = None,
                    dspark_path: Path | None = None) -> ScenarioInfo:
    """Write scenario ``name`` from the trained BF16 weights (default: the packaged ones).

    MTP scenarios take the target + MTP tensors; S4 takes the target without MTP
    and the DSpark drafter's tensors for its separate drafter checkpoint.
    """
    cfg, tensors = bf16_state_dict(model_path)
    if name == "s4":
        drafter, _ = read_bf16_safetensors(dspark_path or packaged_weights("dspark.safetensors"))
        given = {k: v for k, v in tensors.items() if not k.startswith("mtp.")} | drafter
    else:
        given = dict(tensors)
    return write_scenario(name, outdir, size=cfg, weights=_numpy(given))


# ----------------------------------------------------------------------------- load

def model_config(config: Mapping[str, Any], base: Sizes) -> Sizes:
    """Structural sizes from config.json; RoPE/sequence settings from ``base``."""
    dspark = "dspark_target_layer_ids" in config
    return replace(
        base, vocab=config["vocab_size"], hidden=config["hidden_size"],
        layers=config["num_hidden_layers"], heads=config["num_attention_heads"],
        head_dim=config["head_dim"], q_lora=config["q_lora_rank"],
        o_lora=config["o_lora_rank"], o_groups=config["o_groups"],
        experts=config["n_routed_experts"], experts_per_token=config["num_experts_per_tok"],
        moe_inter=config["moe_intermediate_size"],
        shared_inter=config["n_shared_experts"] * config["moe_intermediate_size"],
        mtp_layers=0 if dspark else config.get("num_nextn_predict_layers", 0),
    )


def _read_config(path: Path) -> dict[str, Any]:
    return json.loads((path / "config.json").read_text())


def _by_checkpoint_name(resolver: Resolver) -> dict[str, Route]:
    return {name: route for route in resolver.routes() for name in route.checkpoint_names}


def built_format(route: Route, policy: str) -> str:
    """The format ``policy`` builds for the module behind ``route``."""
    if policy == "bf16":
        return BF16
    if policy == "resolver":
        scheme = route.build
    elif policy == "global":
        scheme = route.vllm.scheme if route.vllm is not None else None
    else:
        raise ValueError(f"unknown policy {policy!r}; one of {', '.join(POLICIES)}")
    if scheme is None:
        raise LoadFailure(f"{route.prefix}: {policy} routing has no scheme ({route.reason})")
    return BF16 if scheme.format in UNQUANTIZED else scheme.format


def _same(stored: Scheme, built: str) -> bool:
    return (stored.format in UNQUANTIZED and built == BF16) or stored.format == built


_CT_GLOBAL = {"weight_global_scale": "weight_scale_2", "input_global_scale": "input_scale"}


def _expert_tensors(
    tensors: Mapping[str, torch.Tensor], routes: Mapping[str, Route]
) -> Iterator[tuple[str, torch.Tensor]]:
    """Routed-expert tensors under the names the reference loader maps.

    compressed-tensors NVFP4 (``weight_packed``, reciprocal ``weight_global_scale``
    / ``input_global_scale``) is renamed to ModelOpt's equivalent, as vLLM's
    compressed-tensors NVFP4 MoE method holds the same bytes and inverts the
    global scales after loading.
    """
    for name, t in tensors.items():
        module, suffix = name.rsplit(".", 1)
        route = routes.get(module)
        if route is None or route.kind != "routed_experts":
            continue
        stored = route.stored
        if stored is not None and stored.format == NVFP4 and stored.convention == COMPRESSED_TENSORS:
            if suffix in _CT_GLOBAL:
                suffix, t = _CT_GLOBAL[suffix], (1.0 / t).reshape(())
            elif suffix == "weight_packed":
                suffix = "weight"
        yield f"{module}.{suffix}", t


def _dequant_experts(experts: ld.RoutedExperts) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """(w1, w2, w3) float32 per expert, decoded by the method the layer was built with."""
    inter = experts.w2_weight.shape[-1] * (2 if experts.method != BF16 else 1)
    out = []
    for e in range(experts.w13_weight.shape[0]):
        if experts.method == BF16:
            w13, w2 = experts.w13_weight[e].float(), experts.w2_weight[e].float()
            out.append((w13[:inter], w2, w13[inter:]))
            continue
        shards = []
        for rows, stem, idx in ((slice(0, inter), "w13", 0), (slice(None), "w2", None),
                                (slice(inter, None), "w13", 1)):
            weight = getattr(experts, f"{stem}_weight")[e][rows]
            scale = getattr(experts, f"{stem}_weight_scale")[e][rows]
            if experts.method == NVFP4:  # MXFP4 bytes here are read as NVFP4, as vLLM does
                s2 = getattr(experts, f"{stem}_weight_scale_2")[e]
                s2 = s2[idx] if idx is not None else s2
                shards.append(tcodecs.dequantize(NVFP4, {"weight": weight, "weight_scale": scale,
                                                         "weight_scale_2": s2}, convention=MODELOPT))
            else:
                shards.append(tcodecs.dequantize(MXFP4, {"weight": weight, "scale": scale},
                                                 convention="deepseek"))
        out.append((shards[0], shards[1], shards[2]))
    return out


def _read_all(path: Path) -> dict[str, torch.Tensor]:
    return dict(ld.read_tensors(path))


def _load_dir(
    path: Path,
    resolver: Resolver,
    policy: str,
    names: list[str],
    layer_of: Mapping[str, str],
    guard_include: list[str] | None,
    guard: bool = True,
) -> tuple[dict[str, torch.Tensor], dict[str, str], LoadReport | None]:
    """Float tensors for ``names`` (model state-dict names) from one checkpoint directory."""
    tensors = _read_all(path)
    routes = _by_checkpoint_name(resolver)
    expert_routes = {r.prefix: built_format(r, policy) for r in resolver.routes()
                     if r.kind == "routed_experts" and r.stored is not None}
    moe = ld.ReferenceMoE(ld.ExpertConfig.from_dir(path),
                          lambda prefix: expert_routes.get(resolver.canonical(prefix) or prefix, BF16))
    lg = LoadGuard(moe, policy="report", include=guard_include) if guard else contextlib.nullcontext()
    current: list[str] = []

    def feed() -> Iterator[tuple[str, torch.Tensor]]:
        for name, t in _expert_tensors(tensors, routes):
            current[:] = [name]
            yield name, t

    try:
        with lg:
            moe.load_weights(feed())
    except (KeyError, RuntimeError, ValueError) as exc:
        at = f" loading {current[0]}" if current else ""
        raise LoadFailure(f"{policy} routing{at}: {type(exc).__name__}: {exc}") from exc
    report = lg.report if isinstance(lg, LoadGuard) else None
    out: dict[str, torch.Tensor] = {}
    for layer, stack in layer_of.items():
        for e, (w1, w2, w3) in enumerate(_dequant_experts(moe.experts(int(layer)))):
            for shard, w in (("w1", w1), ("w2", w2), ("w3", w3)):
                out[f"{stack}.ffn.experts.{e}.{shard}.weight"] = w
    for name in names:
        if name in out:
            continue
        module, suffix = name.rsplit(".", 1)
        route = routes.get(module)
        if route is None or route.stored is None:
            raise LoadFailure(f"{path.name}: no stored tensors for {module}")
        if suffix != "weight":  # router bias: stored F32 beside a BF16 weight
            out[name] = tensors[name].float()
            continue
        built = built_format(route, policy)
        if not _same(route.stored, built):
            raise LoadFailure(f"{path.name}: {module} stored {route.stored.short()}, "
                              f"{policy} routing builds {built}")
        out[name] = _dequant_module(module, route.stored, tensors)
    return out, expert_routes, report


def _dequant_module(module: str, stored: Scheme, tensors: Mapping[str, torch.Tensor]) -> torch.Tensor:
    parts = {n[len(module) + 1 :]: t for n, t in tensors.items() if n.startswith(module + ".")}
    if stored.format in UNQUANTIZED:
        return parts["weight"].float()
    return tcodecs.dequantize(stored.format, parts, convention=_convention(stored, parts))


def _convention(stored: Scheme, parts: Mapping[str, torch.Tensor]) -> str:
    """The stored convention; where the classifier leaves it open (FP8 block with a
    plain ``weight_scale`` is written by more than one producer), the codec layout
    whose scale name the module holds -- they decode identically."""
    if stored.convention:
        return stored.convention
    for (fmt, convention), lay in CODEC_LAYOUTS.items():
        if fmt == stored.format and any(name in parts for name in lay.scale):
            return convention
    raise LoadFailure(f"no codec layout for {stored.short()} with tensors {sorted(parts)}")


def _expert_layers(stack: str, n: int, first_runtime_layer: int) -> dict[str, str]:
    """{runtime layer index as str: checkpoint stack prefix} for ``n`` blocks."""
    return {str(first_runtime_layer + i): f"{stack}.{i}" for i in range(n)}


def load_policy(
    target: Path,
    policy: str,
    drafter: Path | None = None,
    base: Sizes | None = None,
    device: str | torch.device = "cpu",
    guard: bool = True,
) -> Loaded:
    """Load a factory checkpoint (and S4's separate drafter) under ``policy``.

    Raises :class:`LoadFailure` where the engine could not load it (vLLM fails
    the same way: a KeyError or a shape mismatch at load). ``guard=False``
    loads without LoadGuard: parameters never written then keep whatever
    ``torch.empty`` returned, so results depend on the allocator (seed 001).
    """
    if policy not in POLICIES:
        raise ValueError(f"unknown policy {policy!r}; one of {', '.join(POLICIES)}")
    base = base or load_weights().cfg
    cfg = model_config(_read_config(target), base)
    model = Transformer(cfg)
    r_target = Resolver.open(target)
    main = {str(i): f"layers.{i}" for i in range(cfg.layers)}
    mtp = _expert_layers("mtp", cfg.mtp_layers, cfg.layers)
    names = list(model.state_dict())
    state, routes, report = _load_dir(target, r_target, policy, names, main | mtp, None, guard)
    model.load_state_dict(state)
    model = model.to(device).eval()
    if drafter is None:
        return Loaded(policy, model, MTPDrafter(model), routes, report)

    dcfg = _read_config(drafter)
    d_model = DSparkDrafter(cfg, dcfg["n_mtp_layers"], tuple(dcfg["dspark_target_layer_ids"]))
    r_drafter = Resolver.open(drafter, draft_method=DSPARK, target=r_target)
    d_layers = _expert_layers("mtp", len(d_model.mtp), cfg.layers)
    include = [f"model.layers.{layer}.*" for layer in d_layers]  # the drafter file holds no main layers
    d_state, d_routes, d_report = _load_dir(drafter, r_drafter, policy, list(d_model.state_dict()),
                                            d_layers, include, guard)
    d_model.load_state_dict(d_state)
    d_model = d_model.to(device).eval()
    merged = None
    if report is not None and d_report is not None:
        merged = LoadReport(report.findings + d_report.findings, report.checked + d_report.checked)
    return Loaded(policy, model, DSparkDraft(model, d_model), routes | d_routes, merged)


def reference(dspark: bool = False, device: str | torch.device = "cpu") -> Loaded:
    """The trained BF16 weights as shipped (the ``bf16`` policy where no BF16 scenario exists)."""
    model = load_weights(device=device)
    if dspark:
        model = _without_mtp(model)
        return Loaded("bf16", model, DSparkDraft(model, load_dspark(device=device)))
    return Loaded("bf16", model, MTPDrafter(model))


def _without_mtp(model: Transformer) -> Transformer:
    model.mtp = torch.nn.ModuleList()
    return model
