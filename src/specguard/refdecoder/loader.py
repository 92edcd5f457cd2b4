"""Reference MoE loader: what vLLM 0.33 does with DeepSeek-V4 routed experts.

For every routed-expert layer (main layers ``0..N-1`` and MTP draft layers
``N..N+k-1``) a routing policy picks a format from the layer's runtime prefix
(``model.layers.{i}.ffn.experts``); the layer then gets exactly the parameter
set vLLM's method for that format registers, allocated the way vLLM allocates
it, and the checkpoint's per-expert tensors are copied in with vLLM's
``RoutedExperts.weight_loader`` semantics (tensor parallel size 1, no expert
parallel, no padding). Read from vLLM 0.33.0's source:

* ``ModelOptNvFp4FusedMoE.create_weights`` (quantization/modelopt.py), all
  ``torch.empty``: ``w13_weight`` u8 [E, 2I, H/2], ``w2_weight`` u8 [E, H, I/2],
  ``w13_weight_scale`` f8e4m3 [E, 2I, H/16], ``w2_weight_scale`` f8e4m3
  [E, H, I/16], ``w13_weight_scale_2`` f32 [E, 2], ``w2_weight_scale_2`` f32 [E],
  ``w13_input_scale`` f32 [E, 2], ``w2_input_scale`` f32 [E].
* ``Mxfp4MoEMethod.create_weights`` (quantization/mxfp4.py), all
  ``torch.zeros``: ``w13_weight`` u8 [E, 2I, H/2], ``w13_weight_scale`` u8
  [E, 2I, H/32], ``w2_weight`` u8 [E, H, I/2], ``w2_weight_scale`` u8 [E, H, I/32].
* ``UnquantizedFusedMoEMethod``: ``w13_weight`` bf16 [E, 2I, H], ``w2_weight``
  bf16 [E, H, I], ``torch.empty``.
* Loading (fused_moe/routed_experts.py ``weight_loader``; models/deepseek_v4
  ``load_weights``): ``w1`` lands in the first half of ``w13``'s rows, ``w3`` in
  the second, ``w2`` in ``w2``; a stored tensor smaller than its slot narrows
  the slot (``_narrow_expert_data_for_padding``) and ``copy_`` converts values
  numerically — so MXFP4's E8M0 ``.scale`` [I, H/32] (reinterpreted as u8)
  lands as numbers in the left half of an E4M3 [I, H/16] slot, partly writing
  it; per-tensor scales go to ``[expert][shard]``; a checkpoint ``.scale`` of
  an FP4 expert is renamed ``weight_scale``; a checkpoint tensor with no
  matching parameter raises ``KeyError`` (``params_dict[name]``).

Routing is a parameter: ``global_routing(config)`` is vLLM 0.33's rule
(exact-match ``ignored_layers`` -> unquantized, else the global
``moe_quant_algo`` for every layer, draft included); specguard's Resolver
supplies routing by what is stored (``resolver_routing``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, cast

import torch
from safetensors import safe_open
from torch import nn

from specguard.formats.scheme import BF16, MXFP4, NVFP4
from specguard.guard import LoadGuard, LoadReport, Policy

Routing = Callable[[str], str]  # runtime prefix -> format (bf16 / mxfp4 / nvfp4)
METHODS = (NVFP4, MXFP4, BF16)
METHOD_CLASS: dict[str, str] = {  # the vLLM class each format stands for
    NVFP4: "ModelOptNvFp4FusedMoE",
    MXFP4: "Mxfp4MoEMethod",
    BF16: "UnquantizedFusedMoEMethod",
}
NVFP4_GROUP = 16
MXFP4_BLOCK = 32

# Checkpoint names of routed-expert tensors: native DeepSeek-V4 main layers
# (``layers.7.ffn.experts.3.w1.weight``) and MTP blocks (``mtp.0.ffn...``).
_EXPERT_NAME = re.compile(
    r"^(?:model\.)?(?P<stack>layers|mtp)\.(?P<layer>\d+)\.ffn\.experts\.(?P<expert>\d+)"
    r"\.(?P<shard>w[123])\.(?P<suffix>[A-Za-z0-9_]+)$"
)


@dataclass(frozen=True)
class ExpertConfig:
    """The config.json facts the expert layers need."""

    num_hidden_layers: int
    num_draft_layers: int
    num_experts: int
    hidden_size: int
    intermediate_size: int
    expert_dtype: str = "fp4"
    moe_quant_algo: str | None = None
    ignored_layers: tuple[str, ...] = ()

    @classmethod
    def from_dict(cls, cfg: Mapping[str, Any]) -> ExpertConfig:
        q = cfg.get("quantization_config") or {}
        return cls(
            num_hidden_layers=int(cfg["num_hidden_layers"]),
            num_draft_layers=int(cfg.get("num_nextn_predict_layers", 0) or 0),
            num_experts=int(cfg["n_routed_experts"]),
            hidden_size=int(cfg["hidden_size"]),
            intermediate_size=int(cfg["moe_intermediate_size"]),
            expert_dtype=str(cfg.get("expert_dtype", "fp4")),
            moe_quant_algo=q.get("moe_quant_algo"),
            ignored_layers=tuple(q.get("ignored_layers") or ()),
        )

    @classmethod
    def from_dir(cls, path: str | Path) -> ExpertConfig:
        return cls.from_dict(json.loads(Path(path, "config.json").read_text()))

    @property
    def layers(self) -> range:
        return range(self.num_hidden_layers + self.num_draft_layers)


def expert_prefix(layer: int) -> str:
    """The prefix vLLM 0.33's ``get_quant_method`` sees for a routed-expert layer."""
    return f"model.layers.{layer}.ffn.experts"


def global_routing(config: ExpertConfig) -> Routing:
    """vLLM 0.33 ``DeepseekV4FP8Config.get_quant_method`` for routed experts:
    exact-match ``ignored_layers`` first, then one global switch."""
    if config.expert_dtype != "fp4":
        raise NotImplementedError("expert_dtype fp8 (FP8 block experts) is not modelled")

    def route(prefix: str) -> str:
        if prefix in config.ignored_layers:
            return BF16
        return NVFP4 if config.moe_quant_algo == "NVFP4" else MXFP4

    return route


def resolver_routing(path: str | Path) -> Routing:
    """specguard's routing: each expert layer gets the method of the format it
    is stored in (``Resolver.route(prefix).build``). A prefix with nothing on
    disk keeps vLLM 0.33's choice, as an engine has nothing better to build."""
    from specguard.resolve import Resolver  # the header pass, only when asked for

    resolver = Resolver.open(path)
    fallback = global_routing(ExpertConfig.from_dir(path))

    def route(prefix: str) -> str:
        build = resolver.route(prefix).build
        if build is None:
            return fallback(prefix)
        if build.format not in METHODS:
            raise NotImplementedError(
                f"{prefix}: stored as {build.short()}, which this loader has no method for"
            )
        return build.format

    return route


def fixed_routing(fmt: str) -> Routing:
    """Every expert layer gets ``fmt`` (e.g. ``bf16`` for an unquantized reference)."""
    if fmt not in METHODS:
        raise ValueError(f"unsupported expert format {fmt!r}; one of {METHODS}")
    return lambda prefix: fmt


class RoutedExperts(nn.Module):
    """One routed-expert layer with the parameters of one vLLM MoE method."""

    # every method has these two (registered in __init__ from _param_specs); typed for mypy
    w13_weight: nn.Parameter
    w2_weight: nn.Parameter

    def __init__(
        self,
        method: str,
        num_experts: int,
        hidden_size: int,
        intermediate_size: int,
        *,
        device: torch.device | str | None = None,
        params_dtype: torch.dtype = torch.bfloat16,
    ) -> None:
        super().__init__()
        if method not in METHODS:
            raise ValueError(f"unsupported MoE method {method!r}; one of {METHODS}")
        self.method = method
        e, h, i = num_experts, hidden_size, intermediate_size
        for name, (shape, dtype, alloc) in _param_specs(method, e, h, i, params_dtype).items():
            data = alloc(shape, dtype=dtype, device=device)
            self.register_parameter(name, nn.Parameter(data, requires_grad=False))

    def weight_loader(
        self, param_name: str, loaded_weight: torch.Tensor, shard_id: str, expert_id: int
    ) -> None:
        """``RoutedExperts.weight_loader`` of vLLM 0.33 for this layer's method."""
        param: nn.Parameter = getattr(self, param_name)
        if self.method == MXFP4 and param_name.endswith("weight_scale"):
            loaded_weight = _encode_mxfp4_weight_scale(loaded_weight)
        shard_dim = {"w1": 0, "w2": 1, "w3": 0}[shard_id]
        if loaded_weight.ndim == 3:  # fused checkpoint: all experts at once
            shard_dim += 1
            expert_data = param.data
        else:
            expert_data = param.data[expert_id]

        if "input_scale" in param_name:
            loaded_weight = loaded_weight.to(param.device)
            if self.method == NVFP4 and param.data.ndim == 2 and shard_id in ("w1", "w3"):
                param.data[expert_id][0 if shard_id == "w1" else 1] = loaded_weight.reshape(())
                return
            param.data[expert_id] = loaded_weight
            return
        if self.method == NVFP4 and "weight_scale_2" in param_name:
            _load_per_tensor(param, loaded_weight, shard_id, expert_id)
            return
        if (
            self.method == NVFP4
            and "w13_weight_scale" in param_name
            and loaded_weight.shape[-2] == param.data.shape[-2]
        ):  # w1 and w3 scales stored in one tensor
            size = expert_data.shape[shard_dim]
            expert_data.copy_(loaded_weight.narrow(shard_dim, 0, size))
            return
        if shard_id == "w2":
            _load_w2(expert_data, shard_dim, loaded_weight)
        else:
            _load_w13(expert_data, shard_dim, shard_id, loaded_weight)


def _param_specs(
    method: str, e: int, h: int, i: int, params_dtype: torch.dtype
) -> dict[str, tuple[tuple[int, ...], torch.dtype, Callable[..., torch.Tensor]]]:
    u8, e4m3, f32 = torch.uint8, torch.float8_e4m3fn, torch.float32
    if method == NVFP4:
        g = NVFP4_GROUP
        return {
            "w13_weight": ((e, 2 * i, h // 2), u8, torch.empty),
            "w2_weight": ((e, h, i // 2), u8, torch.empty),
            "w13_weight_scale": ((e, 2 * i, h // g), e4m3, torch.empty),
            "w2_weight_scale": ((e, h, i // g), e4m3, torch.empty),
            "w13_weight_scale_2": ((e, 2), f32, torch.empty),
            "w2_weight_scale_2": ((e,), f32, torch.empty),
            "w13_input_scale": ((e, 2), f32, torch.empty),
            "w2_input_scale": ((e,), f32, torch.empty),
        }
    if method == MXFP4:
        b = MXFP4_BLOCK
        return {
            "w13_weight": ((e, 2 * i, h // 2), u8, torch.zeros),
            "w13_weight_scale": ((e, 2 * i, h // b), u8, torch.zeros),
            "w2_weight": ((e, h, i // 2), u8, torch.zeros),
            "w2_weight_scale": ((e, h, i // b), u8, torch.zeros),
        }
    return {
        "w13_weight": ((e, 2 * i, h), params_dtype, torch.empty),
        "w2_weight": ((e, h, i), params_dtype, torch.empty),
    }


def _encode_mxfp4_weight_scale(w: torch.Tensor) -> torch.Tensor:
    """``Mxfp4MoEMethod._encode_mxfp4_weight_scale``."""
    if w.dtype == torch.uint8:
        return w
    if w.dtype == torch.float8_e8m0fnu:
        return w.view(torch.uint8)
    if w.is_floating_point():
        return w.to(torch.float8_e8m0fnu).view(torch.uint8)
    return w


def _load_per_tensor(param: nn.Parameter, w: torch.Tensor, shard_id: str, expert_id: int) -> None:
    """``_load_per_tensor_weight_scale``: w1/w3 into [expert][0/1], w2 into [expert]."""
    if shard_id in ("w1", "w3"):
        param.data[expert_id][0 if shard_id == "w1" else 1] = w.reshape(())
    else:
        param.data[expert_id] = w.reshape(())


def _narrow_for_padding(
    expert_data: torch.Tensor, loaded: torch.Tensor, hidden_dim: int, shard_dim: int
) -> torch.Tensor:
    """``_narrow_expert_data_for_padding``: a slot larger than the stored tensor
    is narrowed to it, so the remainder is silently left as allocated."""
    if loaded.ndim > 0:
        for dim in (hidden_dim, shard_dim):
            if (
                0 <= dim < expert_data.ndim
                and dim < loaded.ndim
                and expert_data.shape[dim] > loaded.shape[dim]
            ):
                expert_data = expert_data.narrow(dim, 0, loaded.shape[dim])
    return expert_data


def _hidden_dim(shard_dim: int, ndim: int) -> int:
    if ndim < 2:
        return 0
    return ndim - 1 if shard_dim == ndim - 2 else ndim - 2


def _load_w13(expert_data: torch.Tensor, shard_dim: int, shard_id: str, w: torch.Tensor) -> None:
    shard_size = expert_data.shape[shard_dim] // 2
    start = 0 if shard_id == "w1" else shard_size
    expert_data = expert_data.narrow(shard_dim, start, shard_size)
    expert_data = _narrow_for_padding(
        expert_data, w, _hidden_dim(shard_dim, expert_data.ndim), shard_dim
    )
    expert_data.copy_(w)


def _load_w2(expert_data: torch.Tensor, shard_dim: int, w: torch.Tensor) -> None:
    expert_data = _narrow_for_padding(
        expert_data, w, _hidden_dim(shard_dim, expert_data.ndim), shard_dim
    )
    expert_data.copy_(w)


class _FFN(nn.Module):
    def __init__(self, routed: RoutedExperts) -> None:
        super().__init__()
        self.experts = nn.Module()
        self.experts.routed_experts = routed


class _Layer(nn.Module):
    def __init__(self, routed: RoutedExperts, draft: bool) -> None:
        super().__init__()
        if draft:  # vLLM's MTP layer wraps its decoder block as ``mtp_block``
            self.mtp_block = nn.Module()
            self.mtp_block.ffn = _FFN(routed)
        else:
            self.ffn = _FFN(routed)


class ReferenceMoE(nn.Module):
    """Routed-expert layers under vLLM's parameter paths:
    ``model.layers.7.ffn.experts.routed_experts.w13_weight`` (main) and
    ``model.layers.{N+i}.mtp_block.ffn.experts.routed_experts.w13_weight`` (MTP i)."""

    def __init__(self, config: ExpertConfig, routing: Routing, device: Any = None) -> None:
        super().__init__()
        self.config = config
        self.routes: dict[str, str] = {}
        self.model = nn.Module()
        self.model.layers = nn.ModuleDict()
        for layer in config.layers:
            fmt = routing(expert_prefix(layer))
            self.routes[expert_prefix(layer)] = fmt
            routed = RoutedExperts(
                fmt, config.num_experts, config.hidden_size, config.intermediate_size,
                device=device,
            )
            self.model.layers[str(layer)] = _Layer(routed, layer >= config.num_hidden_layers)

    def experts(self, layer: int) -> RoutedExperts:
        block: Any = cast(nn.ModuleDict, self.model.layers)[str(layer)]  # a _Layer: built at runtime
        ffn = block.mtp_block.ffn if layer >= self.config.num_hidden_layers else block.ffn
        return cast(RoutedExperts, ffn.experts.routed_experts)

    def param_prefix(self, layer: int) -> str:
        mid = ".mtp_block" if layer >= self.config.num_hidden_layers else ""
        return f"model.layers.{layer}{mid}.ffn.experts.routed_experts"

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> LoadResult:
        """Copy routed-expert tensors in; other tensors are skipped (not modelled)."""
        loaded: set[str] = set()
        skipped: list[str] = []
        for name, tensor in weights:
            target = self.target(name)
            if target is None:
                skipped.append(name)
                continue
            layer, param_name, shard, expert = target
            routed = self.experts(layer)
            if not hasattr(routed, param_name):
                raise KeyError(
                    f"{name}: {METHOD_CLASS[routed.method]} at {expert_prefix(layer)} "
                    f"has no parameter {param_name} (vLLM fails here the same way)"
                )
            if "weight_scale" in param_name and tensor.dtype == torch.float8_e8m0fnu:
                tensor = tensor.view(torch.uint8)  # both V4 loaders keep E8M0 bytes raw
            routed.weight_loader(param_name, tensor, shard, expert)
            loaded.add(f"{self.param_prefix(layer)}.{param_name}")
        return LoadResult(tuple(sorted(loaded)), tuple(skipped))

    def target(self, name: str) -> tuple[int, str, str, int] | None:
        """(runtime layer, parameter name, shard, expert) for a checkpoint name."""
        m = _EXPERT_NAME.match(name)
        if m is None:
            return None
        layer = int(m["layer"])
        if m["stack"] == "mtp":
            if layer >= self.config.num_draft_layers:
                return None
            layer += self.config.num_hidden_layers
        elif layer >= self.config.num_hidden_layers:
            return None
        expert = int(m["expert"])
        if expert >= self.config.num_experts:
            return None
        suffix = m["suffix"]
        if suffix == "scale":  # V4 native FP4 expert scale -> weight_scale
            suffix = "weight_scale" if self.config.expert_dtype == "fp4" else "weight_scale_inv"
        stem = "w2_" if m["shard"] == "w2" else "w13_"
        return layer, stem + suffix, m["shard"], expert


@dataclass(frozen=True)
class LoadResult:
    loaded: tuple[str, ...]  # parameters written at least once
    skipped: tuple[str, ...]  # checkpoint tensors that are not routed-expert tensors
    report: LoadReport | None = None  # LoadGuard's, when the load was guarded


def checkpoint_files(path: str | Path) -> list[Path]:
    """Shards named by the index, else every ``*.safetensors`` in the folder."""
    root = Path(path)
    index = root / "model.safetensors.index.json"
    if index.exists():
        files = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        return [root / f for f in files]
    return sorted(root.glob("*.safetensors"))


def read_tensors(
    path: str | Path, wanted: Callable[[str], bool] | None = None
) -> Iterator[tuple[str, torch.Tensor]]:
    """(name, CPU tensor) in file then name order, read with safetensors'
    ``safe_open``; names ``wanted`` rejects are not read at all."""
    for file in checkpoint_files(path):
        with safe_open(str(file), framework="pt") as f:
            for name in sorted(f.keys()):
                if wanted is None or wanted(name):
                    yield name, f.get_tensor(name)


def load_checkpoint(
    path: str | Path,
    routing: Routing | str = "global",
    device: Any = None,
    guard: Policy | None = None,
) -> tuple[ReferenceMoE, LoadResult]:
    """Build the expert layers for the checkpoint at ``path`` and load them.

    ``routing`` is a callable (runtime prefix -> format), ``"global"`` (vLLM
    0.33's rule), ``"resolver"`` (by what is stored) or a format name for
    every layer (``"bf16"``).
    ``guard`` wraps the copy in ``LoadGuard(model, policy=guard)``; its report
    is ``result.report`` (with ``"raise"`` the error carries it instead).
    """
    config = ExpertConfig.from_dir(path)
    if routing == "global":
        routing = global_routing(config)
    elif routing == "resolver":
        routing = resolver_routing(path)
    elif isinstance(routing, str):
        routing = fixed_routing(routing)
    model = ReferenceMoE(config, routing, device=device)
    weights = read_tensors(path, wanted=lambda n: model.target(n) is not None)
    if guard is None:
        return model, model.load_weights(weights)
    lg = LoadGuard(model, policy=guard)
    with lg:
        result = model.load_weights(weights)
    return model, replace(result, report=lg.report)
