"""compressed-tensors configs: ``config_groups`` (targets + weight args + format),
top-level ``format`` and ``ignore``.

Targets and ignores use compressed-tensors' own matching
(compressed_tensors/utils/match.py ``match_name`` / ``_match_class``): an exact
module name, ``re:`` + ``re.match`` (anchored at the start, not a full match),
or a torch class name (``Linear``; experts and lm_head are ``nn.Linear`` in the
model llm-compressor walks). Targets are tried in ``match_targets`` order:
exact names, then regexes, then class names.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from specguard.declared.model import (
    CT_MATCH,
    TARGET,
    UNQUANTIZED,
    Declared,
    DeclaredScheme,
    Pattern,
)
from specguard.formats import scheme as s
from specguard.formats.scheme import Scheme
from specguard.layouts.roles import ROUTED_EXPERTS

CT = s.COMPRESSED_TENSORS


def weights_scheme(weights: dict | None, fmt: str | None) -> Scheme:
    """Scheme of one group's ``weights`` QuantizationArgs (as JSON) and format."""
    if not weights:
        return Scheme(s.BF16, s.PLAIN, reason="group quantizes activations only")
    bits, typ = weights.get("num_bits"), str(weights.get("type", "int")).lower()
    strategy = str(weights.get("strategy") or "").lower()
    group = weights.get("group_size")
    if typ == "float" and bits == 4:
        if group == 16 or strategy == "tensor_group" or fmt == "nvfp4-pack-quantized":
            return Scheme(s.NVFP4, CT, group_size=group or 16, scale_dtype="F8_E4M3", weight_dtype="U8")
        if group == 32 or fmt == "mxfp4-pack-quantized":
            return Scheme(s.MXFP4, CT, group_size=32, scale_dtype="U8", weight_dtype="U8")
    if typ == "float" and bits == 8:
        fp8 = {"tensor": s.FP8_TENSOR, "channel": s.FP8_CHANNEL}.get(strategy)
        if fp8:
            return Scheme(fp8, CT, scale_dtype="F32", weight_dtype="F8_E4M3")
        if strategy == "block":
            block = weights.get("block_structure") or [128, 128]
            return Scheme(s.FP8_BLOCK, CT, block=(int(block[0]), int(block[1])), scale_dtype="F32",
                          weight_dtype="F8_E4M3")
        if strategy == "group" and group == 32:
            return Scheme(s.MXFP8, CT, group_size=32, scale_dtype="U8", weight_dtype="F8_E4M3")
    if typ == "int" and bits in (4, 8):
        if strategy == "channel":
            fmt_name = s.INT8_CHANNEL if bits == 8 else s.INT4_GROUP
            return Scheme(fmt_name, CT, weight_dtype="I32" if fmt == "pack-quantized" else "I8", pack_axis=1)
        if strategy == "group":
            fmt_name = s.INT4_GROUP if bits == 4 else s.INT8_GROUP
            return Scheme(fmt_name, CT, group_size=group, weight_dtype="I32", pack_axis=1)
    return Scheme(s.UNKNOWN, CT, reason=f"no specguard format for weights {weights} with format {fmt!r}")


@dataclass(frozen=True, kw_only=True)
class CompressedTensorsDeclared(Declared):
    group_schemes: dict[str, Scheme] = field(default_factory=dict)

    def _scheme_for(self, name: str, kind: str) -> DeclaredScheme:
        hit = self._first(name, kind, (UNQUANTIZED,))
        if hit is not None:
            return self._plain("", hit)
        target = self._target(name, kind)
        if target is None:
            return self._plain("quantization_config: no config group targets it")
        return DeclaredScheme(self.group_schemes[target.group or ""], str(target), target)

    def _target(self, name: str, kind: str) -> Pattern | None:
        targets = [x for x in self.patterns if x.effect == TARGET]
        exact = [x for x in targets if not x.text.startswith("re:") and not x.is_class_target]
        regex = [x for x in targets if x.text.startswith("re:")]
        classes = [x for x in targets if x.is_class_target]
        names = [name]
        if kind == ROUTED_EXPERTS and not re.search(r"\.\d+\.[^.]+$", name):
            # a routed-experts layer prefix: look its experts up the way vLLM does
            # (compressed_tensors_moe.py: ``{prefix}.0.{w1|gate_proj}``)
            names += [f"{name}.0.w1", f"{name}.0.gate_proj"]
        return (next((x for x in exact + regex for n in names if x.matches(n)), None)
                or next((x for x in classes if x.matches_kind(kind)), None))


def parse_compressed_tensors(qc: dict, *, origin: str) -> CompressedTensorsDeclared:
    key = "quantization_config"
    fmt = qc.get("format")
    patterns = [Pattern(t, CT_MATCH, f"{key}.ignore[{i}]")
                for i, t in enumerate(qc.get("ignore") or ()) if isinstance(t, str)]
    schemes: dict[str, Scheme] = {}
    notes: list[str] = []
    for gname, group in (qc.get("config_groups") or {}).items():
        if not isinstance(group, dict):
            notes.append(f"config group {gname!r} is not an object")
            continue
        schemes[gname] = weights_scheme(group.get("weights"), group.get("format") or fmt)
        patterns += [Pattern(t, CT_MATCH, f"{key}.config_groups.{gname}.targets[{i}]", TARGET, gname)
                     for i, t in enumerate(group.get("targets") or ()) if isinstance(t, str)]
    if not schemes:
        notes.append("compressed-tensors config without config_groups: nothing is declared quantized")
    return CompressedTensorsDeclared(
        stack="compressed-tensors", quant_method="compressed-tensors", origin=origin,
        patterns=tuple(patterns), notes=tuple(notes), group_schemes=schemes,
    )
