"""torchao's ``quantization_config`` (``quant_method: torchao``), as vLLM 0.33 reads it.

vllm/model_executor/layers/quantization/torchao.py ``TorchAOConfig``:
``quant_type.default`` is a serialized torchao config (``_type`` and ``_data``);
``modules_to_not_convert`` (and ``module_fqn_to_config`` entries set to null)
are skipped with ``should_skip``: the prefix itself, or the entry as a run of
whole dotted components (``o_proj``, ``layers.1``). ``get_quant_method`` gives
every LinearBase a TorchAOLinearMethod and nothing else a method (MoE experts,
embeddings and ParallelLMHead stay unquantized).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from specguard.declared.model import Declared, DeclaredScheme
from specguard.formats import scheme as s
from specguard.formats.scheme import Scheme
from specguard.layouts import roles as r

# torchao config class -> (per-tensor, per-row, per-group) format of its weight.
_WEIGHT = {
    "Int8WeightOnlyConfig": (s.INT8_TENSOR, s.INT8_CHANNEL, s.INT8_GROUP),
    "Int8DynamicActivationInt8WeightConfig": (s.INT8_TENSOR, s.INT8_CHANNEL, s.INT8_GROUP),
    "Float8WeightOnlyConfig": (s.FP8_TENSOR, s.FP8_CHANNEL, None),
    "Float8DynamicActivationFloat8WeightConfig": (s.FP8_TENSOR, s.FP8_CHANNEL, None),
    "Int4WeightOnlyConfig": (None, None, s.INT4_GROUP),
}


def should_skip(prefix: str, skip: tuple[str, ...]) -> bool:
    """torchao.py ``should_skip``."""
    return any(prefix == x or f".{x}." in f".{prefix}." for x in skip)


@dataclass(frozen=True, kw_only=True)
class TorchAODeclared(Declared):
    weight: Scheme = field(default_factory=lambda: Scheme(s.UNKNOWN))
    skip: tuple[str, ...] = ()

    def _scheme_for(self, name: str, kind: str) -> DeclaredScheme:
        if kind != r.LINEAR:
            return self._plain("TorchAOConfig.get_quant_method: only LinearBase layers get a method")
        hit = next((x for x in self.skip if should_skip(name, (x,))), None)
        if hit is not None:
            return self._plain(f"quantization_config.modules_to_not_convert {hit!r} (should_skip)")
        return DeclaredScheme(self.weight, "quantization_config.quant_type.default")


def torchao_scheme(quant_type: Any) -> Scheme:
    """The stored format a serialized torchao config describes (granularity PerRow by default)."""
    if not isinstance(quant_type, Mapping):
        return Scheme(s.UNKNOWN, s.TORCHAO, reason="quant_type.default is not a torchao config")
    cls = str(quant_type.get("_type") or "")
    raw = quant_type.get("_data")
    data: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
    fmts = _WEIGHT.get(cls)
    if fmts is None or data.get("module_fqn_to_config"):
        return Scheme(s.UNKNOWN, s.TORCHAO, reason=f"torchao {cls or 'config'} is not modelled")
    gran = data.get("granularity")
    gran = gran.get("_type") if isinstance(gran, Mapping) else None
    group = data.get("group_size")
    if cls == "Int4WeightOnlyConfig" or isinstance(group, int):
        fmt, size = fmts[2], group if isinstance(group, int) else 128
        return Scheme(fmt, s.TORCHAO, group_size=size) if fmt else Scheme(s.UNKNOWN, s.TORCHAO, reason=cls)
    fmt = fmts[0] if gran == "PerTensor" else fmts[1]
    return Scheme(fmt, s.TORCHAO) if fmt else Scheme(s.UNKNOWN, s.TORCHAO, reason=cls)


def parse_torchao(qc: Mapping[str, Any], *, origin: str) -> TorchAODeclared:
    quant_type = qc.get("quant_type")
    default = quant_type.get("default") if isinstance(quant_type, Mapping) else None
    skip = [x for x in (qc.get("modules_to_not_convert") or []) if isinstance(x, str)]
    data = default.get("_data") if isinstance(default, Mapping) else None
    fqn = data.get("module_fqn_to_config") if isinstance(data, Mapping) else None
    if isinstance(fqn, Mapping):
        skip += [k for k, v in fqn.items() if v is None]
    return TorchAODeclared(stack=s.TORCHAO, quant_method="torchao", origin=origin,
                           weight=torchao_scheme(default), skip=tuple(skip))
