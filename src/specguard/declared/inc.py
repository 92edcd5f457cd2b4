"""INC / auto-round configs (``quant_method: auto-round``, claimed by vLLM's ``INCConfig``).

Restates vLLM 0.33's ``quantization/inc/inc.py`` (``INCConfig.from_config``,
``get_quant_method``) and ``inc/config_parser.py`` (``INCConfigParser.resolve``)
per layer prefix:

1. ``get_quant_method``: an ``extra_config`` key equal to the prefix (or to
   ``model.`` + prefix) with ``bits >= 16`` keeps the layer unquantized.
2. ``resolve``: an exact ``extra_config`` key, then a key the prefix ends with
   (``.key``), decides; else the layer is quantized unless it is an LM head,
   and, with ``block_name_to_quantize``, only if its prefix starts with one of
   the blocks; a fused layer (``qkv_proj``) whose shards an ``extra_config`` key
   names takes their (equal) config, a different one raises ValueError; then the
   first ``extra_config`` key with a regex character that ``re.search``-es the
   prefix decides (a key without ``bits`` keeps the default: ``bits`` when
   quantized, 16 when not).
3. ``bits < 16`` is quantized, in the scheme the data type gives: ``int`` packed
   as ``packing_format`` says (``auto_round:auto_gptq`` / ``auto_round:auto_awq``),
   ``fp`` 8-bit with a 2-D ``group_size`` block FP8, ``mx_fp`` MXFP4/MXFP8.

``apply_vllm_mapper`` renames the block names and ``extra_config`` keys through
the model's ``hf_to_vllm_mapper``; specguard keeps checkpoint roots in the
runtime prefixes of the families it models (layouts/qwen3_5.py), so both sides
are compared unrenamed. The config parser's FusedMoE branch tests
``"fusedmoe" in class name``, which vLLM 0.33's ``RoutedExperts`` never is.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from specguard.declared.model import INC_BLOCK, INC_EXTRA, QUANTIZED, UNQUANTIZED, Declared, DeclaredScheme, Pattern
from specguard.declared.patterns import inc_extra_regex
from specguard.errors import ConfigError
from specguard.formats import scheme as s
from specguard.formats.scheme import Scheme
from specguard.layouts import roles as r

KEY = "quantization_config"
INC = "inc"  # the stack name (quant_method auto-round or inc)


@dataclass(frozen=True)
class LayerConfig:
    """``INCLayerConfig``: what one layer is built with, and which entry decided."""

    bits: int
    group_size: int | tuple[int, int]
    source: str

    @property
    def quantized(self) -> bool:
        return self.bits < 16


@dataclass(frozen=True, kw_only=True)
class IncDeclared(Declared):
    bits: int = 4
    group_size: int | tuple[int, int] = 128
    data_type: str = "int"
    packing_format: str = "auto_round:auto_gptq"
    blocks: tuple[str, ...] | None = None  # block_name_to_quantize, split on ","
    extra_config: dict[str, dict] = field(default_factory=dict)

    def layer_config(self, prefix: str, kind: str,
                     packed: Mapping[str, Sequence[str]] | None = None) -> LayerConfig:
        """What ``INCConfig.get_quant_method`` decides for the layer at ``prefix``;
        raises ValueError where vLLM raises (a fused layer's shards configured apart)."""
        extra = self.extra_config
        for key in (prefix, f"model.{prefix}"):  # get_quant_method's own early exit
            if key in extra and extra[key].get("bits", 16) >= 16:
                return LayerConfig(16, -1, f"{KEY}.extra_config[{key!r}] bits >= 16")
        if prefix in extra:
            return self._entry(prefix, True)
        for key in extra:  # short keys (``lm_head``) of a nested model's prefix
            if prefix.endswith(f".{key}"):
                return self._entry(key, True)
        quantized = kind != r.HEAD_KIND
        why = "an LM head is not quantized by default" if not quantized else f"{KEY}.bits={self.bits}"
        if self.blocks:
            hit = next((b for b in self.blocks if prefix.startswith(b)), None)
            quantized = hit is not None
            why = (f"{KEY}.block_name_to_quantize {hit!r}" if hit
                   else f"{KEY}.block_name_to_quantize {list(self.blocks)} holds no prefix of it")
        leaf = prefix.rsplit(".", 1)[-1]
        if extra and packed and leaf in packed and prefix.count(leaf) == 1:
            shards = [prefix.replace(leaf, sub) for sub in packed[leaf]]
            if any(self._configured(n) for n in shards):
                found = {self._get(n, quantized, why) for n in shards}
                if len({(c.bits, c.group_size) for c in found}) > 1:
                    raise ValueError(f"Fused module '{prefix}' requires consistent quant config for {shards}")
                return found.pop()
        return self._get(prefix, quantized, why)

    def _configured(self, name: str) -> bool:
        return name in self.extra_config or any(
            _regex_hit(k, name) for k in self.extra_config)

    def _get(self, name: str, quantized: bool, why: str) -> LayerConfig:
        """config_parser.py ``get_config``: exact key, then the first regex key that matches."""
        if name in self.extra_config:
            return self._entry(name, quantized)
        for key in self.extra_config:
            if _regex_hit(key, name):
                return self._entry(key, quantized)
        return LayerConfig(self.bits if quantized else 16, self.group_size if quantized else -1, why)

    def _entry(self, key: str, quantized: bool) -> LayerConfig:
        cfg = self.extra_config[key]
        bits = cfg.get("bits", self.bits if quantized else 16)
        group = _group(cfg.get("group_size", self.group_size if quantized else -1))
        return LayerConfig(int(bits), group, f"{KEY}.extra_config[{key!r}] (bits {bits})")

    def scheme_of(self, lc: LayerConfig) -> Scheme:
        """The stored layout INC's scheme for ``lc`` loads (inc/schemes/factory.py ``resolve_scheme``)."""
        if not lc.quantized:
            return self.unquantized
        group = lc.group_size
        if self.data_type == "int":
            fmt = {4: s.INT4_GROUP, 8: s.INT8_GROUP}.get(lc.bits)
            awq = "awq" in self.packing_format
            conv = s.AWQ if awq else s.GPTQ
            if fmt is None:
                return Scheme(s.UNKNOWN, conv, reason=f"{lc.bits}-bit INC int has no format name")
            size = group if isinstance(group, int) and group != -1 else None
            return Scheme(fmt, conv, group_size=size, weight_dtype="I32", pack_axis=1 if awq else 0)
        if self.data_type == "fp" and lc.bits == 8 and isinstance(group, tuple):
            return Scheme(s.FP8_BLOCK, block=group, scale_dtype="F32", weight_dtype="F8_E4M3")
        if "mx_fp" in self.data_type and lc.bits in (4, 8):
            return Scheme(s.MXFP4 if lc.bits == 4 else s.MXFP8, group_size=32)
        return Scheme(s.UNKNOWN, reason=f"INC {self.data_type} {lc.bits}-bit has no scheme in vLLM 0.33")

    def _scheme_for(self, name: str, kind: str) -> DeclaredScheme:
        if kind == r.EMBEDDING_KIND:  # get_quant_method returns None for a VocabParallelEmbedding
            return self._plain("INCConfig.get_quant_method: no method for embeddings")
        try:
            lc = self.layer_config(name, kind)
        except ValueError:
            return DeclaredScheme(Scheme(s.UNKNOWN, reason="shards configured apart"), f"{KEY}.extra_config")
        pattern = next((x for x in self.patterns if x.text in lc.source), None)
        return DeclaredScheme(self.scheme_of(lc), lc.source, pattern)


def _regex_hit(key: str, name: str) -> bool:
    return inc_extra_regex(key, name)


def _group(value: Any) -> int | tuple[int, int]:
    """``INCConfigParser._normalize_group_size``."""
    if isinstance(value, (list, tuple)):
        if len(value) != 2 or not all(isinstance(v, int) for v in value):
            raise ConfigError(f"{KEY}.group_size", f"a block group_size must be two integers, not {value!r}")
        return (value[0], value[1])
    if not isinstance(value, int) or isinstance(value, bool):
        raise ConfigError(f"{KEY}.group_size", f"must be an integer or two, not {value!r}")
    return value


def parse_inc(qc: dict, *, origin: str) -> IncDeclared:
    """``INCConfig.from_config`` (its start-up checks are engines/vllm/startup.py's)."""
    data_type = str(qc.get("data_type") or "int")
    data_type = "fp" if data_type == "fp8" else data_type
    bits = qc.get("bits", 4)
    if not isinstance(bits, int) or isinstance(bits, bool):
        raise ConfigError(f"{KEY}.bits", "must be an integer")
    group = _group(qc.get("group_size", 128))
    fmt = qc.get("packing_format")
    if fmt is None:
        fmt = ("auto_round:fp8" if data_type == "fp" and bits == 8 and isinstance(group, tuple)
               else "auto_round:llm_compressor" if "mx_fp" in data_type else "auto_round:auto_gptq")
    raw = qc.get("block_name_to_quantize", qc.get("to_quant_block_names"))
    blocks = tuple(raw.split(",")) if isinstance(raw, str) else tuple(x for x in raw or () if isinstance(x, str))
    extra_raw = qc.get("extra_config") or {}
    if not isinstance(extra_raw, dict):
        raise ConfigError(f"{KEY}.extra_config", "must be an object")
    extra = {k: v for k, v in extra_raw.items() if isinstance(k, str) and isinstance(v, dict)}
    patterns = [Pattern(k, INC_EXTRA, f"{KEY}.extra_config", UNQUANTIZED if v.get("bits", 16) >= 16 else QUANTIZED)
                for k, v in extra.items()]
    patterns += [Pattern(b, INC_BLOCK, f"{KEY}.block_name_to_quantize", QUANTIZED) for b in blocks]
    method = str(qc.get("quant_method") or "auto-round").lower()
    return IncDeclared(stack=INC, quant_method=method, origin=origin, patterns=tuple(patterns), bits=bits,
                       group_size=group, data_type=data_type, packing_format=str(fmt), blocks=blocks or None,
                       extra_config=extra)
