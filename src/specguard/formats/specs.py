"""One registered spec per (format, convention): the facts every stage reads about a
stored format, written once (docs/formats.md describes the layouts).

- ``needs``: the tensors the engine's method for the format reads, per tensor the
  suffixes that satisfy it (vLLM renames DeepSeek-V4's bare ``.scale`` into the
  scale slot, so it counts). lint SG202 reports the ones a module lacks.
- ``scale_element``: what the block/group scale's bytes hold (``E8M0`` powers of
  two, ``E4M3`` floats) whatever the label says; None for a float scale. lint SG402
  reads the claim from it, the codecs (codecs/packing.py) decode by it.
- ``identity``: what identifies the format in a module's header (formats/classify.py
  measures the shapes and asks ``identify``); None where a stack wraps the weight in
  names of its own (formats/families.py reads those).

A scheme whose convention has no spec of its own falls back to the format's
convention-free spec (``convention=None``), except for the conventions that
name their tensors their own way (compressed-tensors, gpt-oss).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from specguard.formats import scheme as s
from specguard.formats.scheme import Convention, Format, Scheme
from specguard.formats.sniff import E4M3, E8M0


@dataclass(frozen=True)
class Identity:
    """A format's header signature: the dtypes of its weight and of its block scale, and
    the weight elements one scale covers along the reduction dim. A ``U8`` scale carries
    no label: its bytes may hold either 8-bit element, so a module whose header fits
    stays ``ambiguous`` until its bytes are read (formats/settle.py), unless a ``marks``
    tensor names the format."""

    weight: str  # the parameter holding the elements: weight, weight_packed, blocks
    weight_dtypes: frozenset[str]
    scale_dtypes: frozenset[str]  # labels the block scale may carry; empty: any
    group: int | None  # weight elements per scale along the reduction dim; None: any (the config says)
    scale_params: tuple[str, ...] = ()  # the scale's parameter names in this convention; (): any
    requires: frozenset[str] = frozenset()  # tensors only this convention stores
    marks: frozenset[str] = frozenset()  # tensors that name the format whatever the scale's label
    companions: tuple[str, ...] = ()  # tensors stored beside weight and scale, reported missing when absent
    unlabeled: frozenset[str] = frozenset({"U8"})  # scale labels that leave the element to the bytes

    def fits(self, dtypes: Mapping[str, str], scale: str, group: int | None) -> bool:
        """``dtypes``: the module's parameters and their dtypes; ``scale``: its scale parameter."""
        w, sc = dtypes.get(self.weight), dtypes.get(scale)
        return (w in self.weight_dtypes and sc is not None and self.requires <= dtypes.keys()
                and (not self.scale_params or scale in self.scale_params)
                and (self.group is None or group == self.group)
                and (not self.scale_dtypes or sc in self.scale_dtypes or self.named(dtypes)))

    def named(self, dtypes: Mapping[str, str]) -> bool:
        return bool(self.marks) and self.marks <= dtypes.keys()


@dataclass(frozen=True)
class FormatSpec:
    format: Format
    convention: Convention | None  # None: the format under any convention without its own spec
    needs: tuple[tuple[str, ...], ...] = ()  # () : the engine's tensors are not checked for it
    scale_element: str | None = None  # F8_E8M0 / F8_E4M3: what the 8-bit block scale holds
    identity: Identity | None = None

    @property
    def key(self) -> tuple[Format, Convention | None]:
        return (self.format, self.convention)


_SCALE = ("weight_scale", "scale")  # DeepSeek-V4's bare ``.scale`` lands in the scale slot
_FP8_BLOCK = (("weight",), ("weight_scale", "weight_scale_inv", "scale"))
_FP4_BYTES = frozenset({"U8", "I8", "F4"})  # two FP4 codes per byte, or F4 elements
_FP8 = frozenset({"F8_E4M3", "F8_E5M2"})
_E4M3, _E8M0 = frozenset({"F8_E4M3", "U8"}), frozenset({"F8_E8M0", "U8"})
_NOT_BARE = ("weight_scale", "weight_scale_inv")
SPECS: dict[tuple[Format, Convention | None], FormatSpec] = {spec.key: spec for spec in (
    FormatSpec(s.NVFP4, s.MODELOPT, (("weight",), _SCALE, ("weight_scale_2",), ("input_scale",)), E4M3,
               Identity("weight", _FP4_BYTES, _E4M3, 16, marks=frozenset({"weight_scale_2"}),
                        companions=("weight_scale_2", "input_scale"))),
    # AMD Quark writes ModelOpt's tensors and names the activations' global scale ``input_scale_2``
    # (quark's ScaleQuantSpec export).
    FormatSpec(s.NVFP4, s.QUARK, (), E4M3,
               Identity("weight", _FP4_BYTES, _E4M3, 16, requires=frozenset({"input_scale_2"}),
                        marks=frozenset({"weight_scale_2"}), companions=("weight_scale_2",))),
    FormatSpec(s.NVFP4, s.COMPRESSED_TENSORS, (("weight_packed",), ("weight_scale",), ("weight_global_scale",)),
               E4M3, Identity("weight_packed", frozenset({"U8"}), frozenset({"F8_E4M3"}), None, ("weight_scale",),
                              marks=frozenset({"weight_global_scale"}), companions=("weight_global_scale",))),
    FormatSpec(s.NVFP4, None, (), E4M3),
    FormatSpec(s.MXFP4, s.DEEPSEEK, (("weight",), _SCALE), E8M0,
               Identity("weight", _FP4_BYTES, _E8M0, 32, ("scale",))),
    FormatSpec(s.MXFP4, s.COMPRESSED_TENSORS, (("weight_packed",), ("weight_scale",)), E8M0,
               Identity("weight_packed", frozenset({"U8"}), _E8M0, None, ("weight_scale",), unlabeled=frozenset())),
    FormatSpec(s.MXFP4, s.GPT_OSS, (("blocks",), ("scales",)), E8M0,
               Identity("blocks", frozenset({"U8"}), frozenset(), 32, ("scales",), unlabeled=frozenset())),
    FormatSpec(s.MXFP4, None, (("weight",), _SCALE), E8M0,
               Identity("weight", _FP4_BYTES, _E8M0, 32, _NOT_BARE)),
    FormatSpec(s.MXFP8, s.COMPRESSED_TENSORS, (("weight",), ("weight_scale",)), E8M0),
    FormatSpec(s.MXFP8, None, (("weight",), _SCALE), E8M0, Identity("weight", _FP8, _E8M0, 32, unlabeled=frozenset())),
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


def identify(dtypes: Mapping[str, str], scale: str, group: int | None) -> tuple[FormatSpec | None, bool]:
    """The spec whose identity a module's header fits, and whether the header settles it.

    ``dtypes``: the module's parameters and their dtypes; ``scale``: its scale parameter;
    ``group``: weight elements per scale along the reduction dim. A spec named by its marks
    beats one that only fits, and the convention that requires more tensors beats the one
    it extends (Quark over ModelOpt). Unsettled (False): the scale's label leaves the element
    to its bytes (formats/settle.py sniffs them)."""
    found = [spec for spec in SPECS.values() if spec.identity is not None and spec.identity.fits(dtypes, scale, group)]
    named = [spec for spec in found if spec.identity and spec.identity.named(dtypes)]
    found = named or found
    if not found:
        return None, False
    best = max(found, key=lambda spec: len(spec.identity.requires) if spec.identity else 0)
    assert best.identity is not None
    return best, bool(named) or dtypes[scale] not in best.identity.unlabeled
