"""One registered spec per (format, convention): the facts every stage reads about a
stored format, written once (docs/formats.md describes the layouts).

- ``needs``: the tensors the engine's method for the format reads, per tensor the
  suffixes that satisfy it (vLLM renames DeepSeek-V4's bare ``.scale`` into the
  scale slot, so it counts). lint SG202 reports the ones a module lacks.
- ``scale_element``: what the block/group scale's bytes hold (``E8M0`` powers of
  two, ``E4M3`` floats) whatever the label says; None for a float scale. lint SG402
  reads the claim from it, the codecs (codecs/packing.py) decode by it.

A scheme whose convention has no spec of its own falls back to the format's
convention-free spec (``convention=None``), except for the conventions that
name their tensors their own way (compressed-tensors, gpt-oss).
"""

from __future__ import annotations

from dataclasses import dataclass

from specguard.formats import scheme as s
from specguard.formats.scheme import Convention, Format, Scheme
from specguard.formats.sniff import E4M3, E8M0


@dataclass(frozen=True)
class FormatSpec:
    format: Format
    convention: Convention | None  # None: the format under any convention without its own spec
    needs: tuple[tuple[str, ...], ...] = ()  # () : the engine's tensors are not checked for it
    scale_element: str | None = None  # F8_E8M0 / F8_E4M3: what the 8-bit block scale holds

    @property
    def key(self) -> tuple[Format, Convention | None]:
        return (self.format, self.convention)


_SCALE = ("weight_scale", "scale")  # DeepSeek-V4's bare ``.scale`` lands in the scale slot
_FP8_BLOCK = (("weight",), ("weight_scale", "weight_scale_inv", "scale"))
SPECS: dict[tuple[Format, Convention | None], FormatSpec] = {spec.key: spec for spec in (
    FormatSpec(s.NVFP4, s.MODELOPT, (("weight",), _SCALE, ("weight_scale_2",), ("input_scale",)), E4M3),
    FormatSpec(s.NVFP4, s.COMPRESSED_TENSORS, (("weight_packed",), ("weight_scale",), ("weight_global_scale",)),
               E4M3),
    FormatSpec(s.NVFP4, None, (), E4M3),
    FormatSpec(s.MXFP4, s.DEEPSEEK, (("weight",), _SCALE), E8M0),
    FormatSpec(s.MXFP4, s.COMPRESSED_TENSORS, (("weight_packed",), ("weight_scale",)), E8M0),
    FormatSpec(s.MXFP4, s.GPT_OSS, (("blocks",), ("scales",)), E8M0),
    FormatSpec(s.MXFP4, None, (("weight",), _SCALE), E8M0),
    FormatSpec(s.MXFP8, s.COMPRESSED_TENSORS, (("weight",), ("weight_scale",)), E8M0),
    FormatSpec(s.MXFP8, None, (("weight",), _SCALE), E8M0),
    FormatSpec(s.FP8_BLOCK, s.DEEPSEEK, _FP8_BLOCK),
    FormatSpec(s.FP8_BLOCK, s.COMPRESSED_TENSORS),
    FormatSpec(s.FP8_BLOCK, None, _FP8_BLOCK),
    FormatSpec(s.FP8_TENSOR, s.MODELOPT),
    FormatSpec(s.FP8_TENSOR, s.COMPRESSED_TENSORS),
    FormatSpec(s.FP8_TENSOR, None),
    FormatSpec(s.FP8_CHANNEL, s.COMPRESSED_TENSORS),
    FormatSpec(s.FP8_CHANNEL, None),
    FormatSpec(s.INT4_GROUP, s.COMPRESSED_TENSORS, (("weight_packed",), ("weight_scale",))),
    FormatSpec(s.INT4_GROUP, s.GPTQ),
    FormatSpec(s.INT4_GROUP, None),
    FormatSpec(s.INT8_GROUP, None),
    FormatSpec(s.INT8_CHANNEL, None),
    FormatSpec(s.INT8_TENSOR, None),
    FormatSpec(s.NF4, s.BITSANDBYTES),
    FormatSpec(s.FP4, s.BITSANDBYTES),
)}

# Conventions whose tensor names are their own: no convention-free fallback for them.
_OWN_NAMES = (s.COMPRESSED_TENSORS, s.GPT_OSS)


def spec_for(scheme: Scheme) -> FormatSpec | None:
    """The registered spec of a scheme (None: the format has no quantized layout)."""
    hit = SPECS.get((scheme.format, scheme.convention))
    if hit is None and scheme.convention not in _OWN_NAMES:
        hit = SPECS.get((scheme.format, None))
    return hit


def needs(scheme: Scheme) -> tuple[tuple[str, ...], ...]:
    spec = spec_for(scheme)
    return spec.needs if spec is not None else ()


def scale_element(fmt: Format | str, convention: Convention | str | None = None) -> str | None:
    spec = SPECS.get((Format(fmt), Convention(convention) if convention else None)) or SPECS.get((Format(fmt), None))
    return spec.scale_element if spec is not None else None
