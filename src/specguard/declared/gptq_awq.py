"""GPTQ and AWQ configs (integer weights in groups) as vLLM 0.33 reads them."""

from __future__ import annotations

from dataclasses import dataclass, field

from specguard.declared.model import (
    GPTQ_DYNAMIC,
    GPTQ_IN_BLOCK,
    QUANTIZED,
    UNQUANTIZED,
    VLLM_SUBSTRING,
    Declared,
    DeclaredScheme,
    Pattern,
)
from specguard.errors import ConfigError
from specguard.formats import scheme as s
from specguard.formats.scheme import Convention, Scheme
from specguard.layouts import roles as r


@dataclass(frozen=True, kw_only=True)
class IntGroupDeclared(Declared):
    """GPTQ (``bits``, ``group_size``, ``dynamic``, ``modules_in_block_to_quantize``,
    ``lm_head``) and AWQ (``w_bit``/``bits``, ``q_group_size``/``group_size``,
    ``modules_to_not_convert`` substring, ``lm_head``) as vLLM 0.33 reads them
    (auto_gptq.py / utils/gptq_utils.py, auto_awq.py)."""

    bits: int = 4
    group_size: int | None = 128
    lm_head: bool = False
    dynamic: dict[str, dict] = field(default_factory=dict)

    def scheme_of(self, bits: int, group: int | None) -> Scheme:
        """The scheme ``bits``-bit groups of ``group`` are stored in by this stack."""
        return self._scheme(bits, group)

    def _scheme(self, bits: int, group: int | None) -> Scheme:
        fmt = {4: s.INT4_GROUP, 8: s.INT8_GROUP}.get(bits)
        if fmt is None:
            return Scheme(s.UNKNOWN, Convention(self.stack), reason=f"{bits}-bit {self.stack} has no format name")
        group = None if group in (None, -1) else group
        return Scheme(fmt, Convention(self.stack), group_size=group, weight_dtype="I32",
                      pack_axis=0 if self.stack == s.GPTQ else 1)

    def _scheme_for(self, name: str, kind: str) -> DeclaredScheme:
        key = "quantization_config"
        if kind == r.EMBEDDING_KIND:
            return self._plain(f"{self.stack} does not quantize embeddings")
        if kind == r.HEAD_KIND and not self.lm_head:
            return self._plain(f"{key}.lm_head is false")
        # gptq_utils.get_dynamic_override: the first rule (dict order) that matches decides
        first = next((x for x in self.patterns if x.semantics == GPTQ_DYNAMIC and x.matches(name)), None)
        if first is not None and first.text.startswith("-:"):
            return self._plain("", first)
        skip = next((x for x in self.patterns if x.effect == UNQUANTIZED and x.semantics != GPTQ_DYNAMIC
                     and x.matches(name)), None)
        if skip is not None:
            return self._plain("", skip)
        in_block = [x for x in self.patterns if x.semantics == GPTQ_IN_BLOCK]
        if in_block and kind == r.LINEAR and not any(x.matches(name) for x in in_block):
            return self._plain(f"{key}.modules_in_block_to_quantize does not list it")
        pos = first
        if pos is not None:
            override = self.dynamic.get(pos.text, {})
            bits = override.get("bits", self.bits)
            group = override.get("group_size", self.group_size)
            return DeclaredScheme(self._scheme(bits, group), str(pos), pos)
        return DeclaredScheme(self._scheme(self.bits, self.group_size),
                              f"{key}.bits={self.bits}, group_size={self.group_size}")


def parse_gptq(qc: dict, *, origin: str) -> IntGroupDeclared:
    key = "quantization_config"
    raw = qc.get("dynamic") or {}
    if not isinstance(raw, dict):  # gptq.py get_dynamic_override calls .items() on it
        raise ConfigError(f"{key}.dynamic", "must be an object")
    dynamic = {k: v for k, v in raw.items() if isinstance(k, str)}
    patterns = [Pattern(k, GPTQ_DYNAMIC, f"{key}.dynamic", UNQUANTIZED if k.startswith("-:") else QUANTIZED)
                for k in dynamic]
    block = qc.get("modules_in_block_to_quantize") or []
    flat = [t for item in block for t in (item if isinstance(item, list) else [item]) if isinstance(t, str)]
    patterns += [Pattern(t, GPTQ_IN_BLOCK, f"{key}.modules_in_block_to_quantize", QUANTIZED) for t in flat]
    notes = []
    if qc.get("checkpoint_format") == "gptq_v2":
        notes.append("checkpoint_format gptq_v2: zeros stored exact (v1 stores zero-1)")
    return IntGroupDeclared(
        stack=s.GPTQ, quant_method="gptq", origin=origin, patterns=tuple(patterns), notes=tuple(notes),
        bits=_bits(qc, "bits"), group_size=qc.get("group_size", 128), lm_head=bool(qc.get("lm_head")),
        dynamic=dynamic,
    )


def parse_awq(qc: dict, *, origin: str) -> IntGroupDeclared:
    keys = qc.get("modules_to_not_convert") or ()
    patterns = tuple(Pattern(t, VLLM_SUBSTRING, f"quantization_config.modules_to_not_convert[{i}]")
                     for i, t in enumerate(keys) if isinstance(t, str))
    return IntGroupDeclared(
        stack=s.AWQ, quant_method="awq", origin=origin, patterns=patterns,
        bits=_bits(qc, "w_bit" if "w_bit" in qc else "bits"),
        group_size=qc.get("q_group_size", qc.get("group_size", 128)), lm_head=bool(qc.get("lm_head")),
    )


def _bits(qc: dict, key: str) -> int:
    """The bit width (default 4); a null one is bad input (vLLM's from_config cannot use it either)."""
    bits = qc.get(key, 4)
    if not isinstance(bits, int) or isinstance(bits, bool):
        raise ConfigError(f"quantization_config.{key}", "must be an integer")
    return bits
