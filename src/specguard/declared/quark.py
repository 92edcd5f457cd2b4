"""AMD Quark's ``quantization_config`` (``quant_method: quark``), as vLLM 0.33 reads it.

vllm/model_executor/layers/quantization/quark/quark.py:

- ``exclude``: ``should_ignore_layer`` -> ``find_matching_patterns``: an entry
  equal to the layer name, or ``re:`` + ``re.match`` (no fnmatch); a merged
  layer is excluded when every shard is; routed experts also when an entry
  names a child (``check_children``).
- per-layer config, ``_find_matched_config``: ``layer_quant_config`` (a key
  without ``*`` matches when the layer name is a *substring of the key*, a key
  with ``*`` by ``fnmatch``), then ``layer_type_quant_config`` (looked up by the
  Python layer class, so JSON string keys never match), then
  ``global_quant_config``.
- a config's ``weight`` spec names the scheme: int4/uint4 per_group (W4A16),
  int8 and fp8_e4m3 per_tensor / per_channel (/ per_block), OCP MX fp4/fp8
  per_group 32 with e8m0 scales, and the two-entry NVFP4 list.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from specguard.declared.model import CT_MATCH, Declared, DeclaredScheme, Pattern
from specguard.formats import scheme as s
from specguard.formats.scheme import Scheme
from specguard.layouts import roles as r

KEY = "quantization_config"


@dataclass(frozen=True, kw_only=True)
class QuarkDeclared(Declared):
    """``exclude`` entries are ``patterns``; the layer configs are kept as written."""

    global_config: Mapping[str, Any] = field(default_factory=dict)
    layer_configs: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def config_for(self, name: str) -> tuple[Mapping[str, Any], str]:
        """The layer config vLLM picks for ``name`` (``_find_matched_config``, one shard)."""
        for key, cfg in self.layer_configs.items():
            hit = fnmatch.fnmatch(name, key) if "*" in key else name in key
            if hit:
                return cfg, f"{KEY}.layer_quant_config[{key!r}]"
        return self.global_config, f"{KEY}.global_quant_config"

    def excluded(self, name: str, kind: str) -> Pattern | None:
        for pat in self.patterns:
            if pat.matches(name):
                return pat
            if kind == r.ROUTED_EXPERTS and not pat.text.startswith("re:") and pat.text.startswith(name + "."):
                return pat  # should_ignore_layer(check_children=True)
        return None

    def _scheme_for(self, name: str, kind: str) -> DeclaredScheme:
        if kind in (r.EMBEDDING_KIND, r.HEAD_KIND):
            return self._plain("QuarkConfig.get_quant_method: embeddings and ParallelLMHead get no method")
        hit = self.excluded(name, kind)
        if hit is not None:
            return self._plain("", hit)
        cfg, source = self.config_for(name)
        return DeclaredScheme(quark_scheme(cfg), source)


def quark_scheme(cfg: Mapping[str, Any]) -> Scheme:
    """The stored format a Quark layer config's ``weight`` spec describes."""
    weight = cfg.get("weight") if isinstance(cfg, Mapping) else None
    if isinstance(weight, list) and len(weight) == 2 and all(isinstance(w, Mapping) for w in weight):
        first, second = weight
        if (first.get("dtype"), first.get("group_size"), second.get("dtype")) == ("fp4", 16, "fp8_e4m3"):
            return Scheme(s.NVFP4, s.QUARK, group_size=16)
    if isinstance(weight, list) and len(weight) == 1:
        weight = weight[0]
    if not isinstance(weight, Mapping):
        return Scheme(s.UNKNOWN, s.QUARK, reason=f"quark weight spec {weight!r}")
    dtype, qscheme, group = weight.get("dtype"), weight.get("qscheme"), weight.get("group_size")
    if dtype in ("int4", "uint4") and qscheme == "per_group" and isinstance(group, int):
        return Scheme(s.INT4_GROUP, s.QUARK, group_size=group, zero_points=True)
    if dtype == "int8" and qscheme in ("per_tensor", "per_channel"):
        return Scheme(s.INT8_TENSOR if qscheme == "per_tensor" else s.INT8_CHANNEL, s.QUARK)
    if dtype == "fp8_e4m3" and qscheme in ("per_tensor", "per_channel"):
        return Scheme(s.FP8_TENSOR if qscheme == "per_tensor" else s.FP8_CHANNEL, s.QUARK)
    if dtype == "fp8_e4m3" and qscheme == "per_block" and isinstance(weight.get("block_size"), list):
        return Scheme(s.FP8_BLOCK, s.QUARK, block=tuple(weight["block_size"]))
    if qscheme == "per_group" and group == 32 and weight.get("scale_format") == "e8m0":
        fmt = {"fp4": s.MXFP4, "fp8_e4m3": s.MXFP8}.get(str(dtype))
        if fmt:
            return Scheme(fmt, s.QUARK, group_size=32)
    return Scheme(s.UNKNOWN, s.QUARK, reason=f"quark weight spec {dtype} {qscheme} group {group}")


def parse_quark(qc: Mapping[str, Any], *, origin: str) -> QuarkDeclared:
    exclude = [t for t in (qc.get("exclude") or []) if isinstance(t, str)]
    patterns = tuple(Pattern(t, CT_MATCH, f"{KEY}.exclude[{i}]") for i, t in enumerate(exclude))
    layers = qc.get("layer_quant_config") or {}
    glob = qc.get("global_quant_config") or {}
    return QuarkDeclared(
        stack=s.QUARK, quant_method="quark", origin=origin, patterns=patterns,
        global_config=glob if isinstance(glob, Mapping) else {},
        layer_configs={k: v for k, v in layers.items() if isinstance(k, str) and isinstance(v, Mapping)}
        if isinstance(layers, Mapping) else {},
    )
