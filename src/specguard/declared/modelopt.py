"""ModelOpt configs: hf_quant_config.json (``quantization.{quant_algo,
exclude_modules, group_size, quantized_layers}``) or config.json
(``quantization_config.{quant_method: modelopt, quant_algo, ignore|exclude_modules}``).

Parsing follows vllm/model_executor/layers/quantization/modelopt.py
``ModelOptQuantConfigBase.from_config`` (both forms) and
``ModelOptMixedPrecisionConfig._resolve_quant_algo`` for MIXED_PRECISION.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from fnmatch import translate
from functools import cached_property

from specguard.declared.model import (
    MODELOPT_EXCLUDE,
    QUANTIZED,
    UNQUANTIZED,
    VLLM_EXACT,
    Declared,
    DeclaredScheme,
    Pattern,
)
from specguard.formats import scheme as s
from specguard.formats.scheme import Scheme
from specguard.layouts import roles as r

_FUSED_SHARDS = {"qkv_proj": ("q_proj", "k_proj", "v_proj"), "gate_up_proj": ("gate_proj", "up_proj")}


def modelopt_algo_scheme(algo: str, group_size: int | None = None) -> Scheme:
    """Scheme of a ModelOpt quant_algo (modelopt.py ``LINEAR_ALGOS`` + the AWQ algos
    ModelOpt exports but vLLM 0.33 does not load)."""
    a = algo.upper()
    if a == "FP8":
        return Scheme(s.FP8_TENSOR, s.MODELOPT, scale_dtype="F32", weight_dtype="F8_E4M3")
    if a == "FP8_PER_CHANNEL_PER_TOKEN":
        return Scheme(s.FP8_CHANNEL, s.MODELOPT, scale_dtype="F32", weight_dtype="F8_E4M3")
    if a in ("FP8_PB_WO", "FP8_BLOCK_SCALES"):
        g = group_size or 128
        return Scheme(s.FP8_BLOCK, s.MODELOPT, block=(g, g), scale_dtype="F32", weight_dtype="F8_E4M3")
    if a in ("NVFP4", "W4A16_NVFP4"):
        return Scheme(s.NVFP4, s.MODELOPT, group_size=group_size or 16, scale_dtype="F8_E4M3", weight_dtype="U8")
    if a == "MXFP8":
        return Scheme(s.MXFP8, s.MODELOPT, group_size=32, scale_dtype="U8", weight_dtype="F8_E4M3")
    if a in ("INT4_AWQ", "W4A8_AWQ"):
        return Scheme(s.INT4_GROUP, s.MODELOPT, group_size=group_size or 128, weight_dtype="U8", pack_axis=0)
    return Scheme(s.UNKNOWN, s.MODELOPT, reason=f"ModelOpt quant_algo {algo!r} is not known to specguard")


@dataclass(frozen=True, kw_only=True)
class ModelOptDeclared(Declared):
    quant_algo: str = ""
    group_size: int | None = None
    quantized_layers: dict[str, dict] = field(default_factory=dict)

    def _excluding(self, name: str) -> Pattern | None:
        """The first exclusion entry matching ``name``. One combined scan rules out the
        common case, a name no entry matches, before 100+ entries are asked in turn
        (benchmarks/lint_export.py)."""
        if self._exclusion_scan is not None:
            scan, experts = self._exclusion_scan
            if scan.search(name) is None and not ("experts" in name and any(name in e for e in experts)):
                return None
        return self._first(name, None, (UNQUANTIZED,))

    @cached_property
    def _exclusion_scan(self) -> tuple[re.Pattern[str], tuple[str, ...]] | None:
        """``Pattern._modelopt_matches`` over every exclusion entry at once: a regex for an
        entry as a substring or a glob (``fnmatch``, POSIX: case-sensitive) over the whole
        name, and the entries naming ``experts`` for the reverse-substring rule."""
        excludes = [x for x in self.patterns if x.effect == UNQUANTIZED]
        if any(x.semantics != MODELOPT_EXCLUDE for x in excludes):
            return None
        entries = [e for x in excludes for e in x.modelopt_entries[0]]
        globs = [g for x in excludes for g in x.modelopt_entries[1]]
        scan = re.compile("|".join([re.escape(e) for e in entries] + [rf"\A{translate(g)}" for g in globs]))
        return scan, tuple(e for e in entries if "experts" in e)

    def _scheme_for(self, name: str, kind: str) -> DeclaredScheme:
        if kind == r.EMBEDDING_KIND:
            return self._plain("ModelOpt does not quantize embeddings")
        hit = self._excluding(name)
        if hit is not None:
            return self._plain("", hit)
        if self.quant_algo != "MIXED_PRECISION":
            return DeclaredScheme(
                modelopt_algo_scheme(self.quant_algo, self.group_size),
                f"{self.origin}: quant_algo={self.quant_algo}"
                + (" (ModelOpt quantizes lm_head unless excluded)" if kind == r.HEAD_KIND else ""),
            )
        key = self._quantized_layer(name, kind)
        if key is None:
            return self._plain(f"{self.origin}: MIXED_PRECISION, not in quantized_layers")
        info = self.quantized_layers[key]
        algo = str(info.get("quant_algo", ""))
        pattern = next((x for x in self.patterns if x.effect == QUANTIZED and x.text == key), None)
        return DeclaredScheme(
            modelopt_algo_scheme(algo, info.get("group_size") or self.group_size),
            f"{self.origin}: quantized_layers[{key!r}].quant_algo={algo}", pattern,
        )

    def _quantized_layer(self, name: str, kind: str) -> str | None:
        """``_resolve_quant_algo``: direct, fused shards, children, ``.experts`` parent."""
        ql = self.quantized_layers
        candidates = [name, "lm_head"] if name.endswith(".lm_head") else [name]
        for c in candidates:
            if c in ql:
                return c
        parent, _, proj = name.rpartition(".")
        for shard in _FUSED_SHARDS.get(proj, ()):
            if f"{parent}.{shard}" in ql:
                return f"{parent}.{shard}"
        child = next((k for k in ql if k.startswith(name + ".")), None)
        if child is not None:
            return child
        if name.endswith(".experts") or kind == r.ROUTED_EXPERTS:
            stem = name.rsplit(".experts", 1)[0] + "."
            return next((k for k in ql if k.startswith(stem)), None)
        return None


def parse_modelopt(cfg: dict, *, origin: str) -> ModelOptDeclared:
    """``cfg`` is either hf_quant_config.json or config.json's quantization_config."""
    if isinstance(cfg.get("quantization"), dict):
        q, key = cfg["quantization"], "hf_quant_config.json:quantization"
        excludes, ex_key = q.get("exclude_modules") or [], "exclude_modules"
    else:
        q, key = cfg, "quantization_config"
        ex_key = "ignore" if "ignore" in cfg else "exclude_modules"
        excludes = cfg.get(ex_key) or []
    notes: list[str] = []
    algo = str(q.get("quant_algo") or "").upper()
    if not algo:
        notes.append("ModelOpt config without quant_algo (vLLM raises)")
    quantized_layers = q.get("quantized_layers") or {}
    patterns = [Pattern(t, MODELOPT_EXCLUDE, f"{key}.{ex_key}[{i}]")
                for i, t in enumerate(excludes) if isinstance(t, str)]
    patterns += [Pattern(k, VLLM_EXACT, f"{key}.quantized_layers", QUANTIZED) for k in quantized_layers]
    if algo == "MIXED_PRECISION" and not quantized_layers:
        notes.append("MIXED_PRECISION without quantized_layers (vLLM raises)")
    group = q.get("group_size")
    return ModelOptDeclared(
        stack="modelopt", quant_method="modelopt", origin=origin, patterns=tuple(patterns),
        notes=tuple(notes), quant_algo=algo, group_size=int(group) if isinstance(group, int | str) and
        str(group).isdigit() else None, quantized_layers=dict(quantized_layers),
    )
