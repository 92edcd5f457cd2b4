"""How each producer stores each format: tensor suffixes, dtypes, scale shapes.

A layout is data. ``quantize`` writes the first name of each tuple;
``dequantize`` accepts any of them (DeepSeek writes ``weight_scale_inv`` in
V3 and a bare ``scale`` in V4 native checkpoints).
"""

from __future__ import annotations

from dataclasses import dataclass

from specguard.formats.scheme import (
    COMPRESSED_TENSORS,
    DEEPSEEK,
    FP8_BLOCK,
    FP8_CHANNEL,
    FP8_TENSOR,
    GPT_OSS,
    GPTQ,
    INT4_GROUP,
    MODELOPT,
    MXFP4,
    MXFP8,
    NVFP4,
)
from specguard.formats.sniff import E8M0
from specguard.formats.specs import scale_element

# Scale shape kinds.
SCALAR = "scalar"  # shape []
ONE = "one"  # shape [1]
COLUMN = "column"  # shape [out, 1]
BLOCKS = "blocks"  # shape [..., ceil(out/br), ceil(in/bc)]

# Element packings.
NONE = "none"  # one element per stored item
FP4 = "fp4"  # two E2M1 codes per byte along the input dim, low nibble first
FP4_GPT_OSS = "fp4-blocks"  # as FP4, reshaped [..., in/32, 16]
INT4_ROWS = "int4-rows"  # 8 int4 per int32 along the input dim (compressed-tensors)
INT4_GPTQ = "int4-gptq"  # transposed [in/8, out] int32, qzeros [in/g, out/8]


@dataclass(frozen=True)
class PackLayout:
    """The on-disk shape of one format as one producer writes it."""

    format: str
    convention: str
    weight: str  # suffix of the stored elements
    weight_dtype: str  # safetensors dtype of the stored elements
    scale: tuple[str, ...]  # accepted suffixes of the block/group scale
    scale_dtype: str  # default safetensors dtype of that scale
    block: tuple[int, int]  # elements per scale (rows, cols); 0 = the whole dim
    scale_shape: str = BLOCKS
    packing: str = NONE
    global_scale: str | None = None  # second-level per-tensor scale (NVFP4)
    global_reciprocal: bool = False  # compressed-tensors stores 1/scale
    global_shape: str = SCALAR
    input_scale: str | None = None  # activation scale, written when input_amax is given
    input_shape: str = SCALAR
    extras: tuple[str, ...] = ()  # other tensors the layout writes
    separator: str = "."  # between module name and suffix ("_" for gpt-oss)

    @property
    def e8m0_scale(self) -> bool:
        """The scale holds E8M0 exponents whatever its dtype (the format's spec says: formats/specs.py)."""
        return scale_element(self.format, self.convention) == E8M0

    def tensor_name(self, module: str, suffix: str) -> str:
        return f"{module}{self.separator}{suffix}"

    @property
    def group_size(self) -> int | None:
        return self.block[1] if self.block[0] == 1 and self.block[1] else None


_E4M3 = "F8_E4M3"

LAYOUTS: dict[tuple[str, str], PackLayout] = {
    (FP8_TENSOR, MODELOPT): PackLayout(
        FP8_TENSOR, MODELOPT, "weight", _E4M3, ("weight_scale",), "F32", (0, 0),
        scale_shape=SCALAR, input_scale="input_scale"),
    (FP8_TENSOR, COMPRESSED_TENSORS): PackLayout(
        FP8_TENSOR, COMPRESSED_TENSORS, "weight", _E4M3, ("weight_scale",), "F32", (0, 0),
        scale_shape=ONE, input_scale="input_scale", input_shape=ONE),
    (FP8_CHANNEL, COMPRESSED_TENSORS): PackLayout(
        FP8_CHANNEL, COMPRESSED_TENSORS, "weight", _E4M3, ("weight_scale",), "F32", (1, 0),
        scale_shape=COLUMN),
    (FP8_BLOCK, DEEPSEEK): PackLayout(
        FP8_BLOCK, DEEPSEEK, "weight", _E4M3, ("weight_scale_inv", "scale"), "F32", (128, 128)),
    (FP8_BLOCK, COMPRESSED_TENSORS): PackLayout(
        FP8_BLOCK, COMPRESSED_TENSORS, "weight", _E4M3, ("weight_scale",), "F32", (128, 128)),
    (NVFP4, MODELOPT): PackLayout(
        NVFP4, MODELOPT, "weight", "U8", ("weight_scale",), _E4M3, (1, 16), packing=FP4,
        global_scale="weight_scale_2", input_scale="input_scale"),
    (NVFP4, COMPRESSED_TENSORS): PackLayout(
        NVFP4, COMPRESSED_TENSORS, "weight_packed", "U8", ("weight_scale",), _E4M3, (1, 16),
        packing=FP4, global_scale="weight_global_scale", global_reciprocal=True,
        global_shape=ONE, input_scale="input_global_scale", input_shape=ONE),
    (MXFP4, DEEPSEEK): PackLayout(
        MXFP4, DEEPSEEK, "weight", "I8", ("scale",), "F8_E8M0", (1, 32), packing=FP4),
    (MXFP4, COMPRESSED_TENSORS): PackLayout(
        MXFP4, COMPRESSED_TENSORS, "weight_packed", "U8", ("weight_scale",), "U8", (1, 32),
        packing=FP4),
    (MXFP4, GPT_OSS): PackLayout(
        MXFP4, GPT_OSS, "blocks", "U8", ("scales",), "U8", (1, 32), packing=FP4_GPT_OSS,
        separator="_"),
    (MXFP8, COMPRESSED_TENSORS): PackLayout(
        MXFP8, COMPRESSED_TENSORS, "weight", _E4M3, ("weight_scale",), "U8", (1, 32)),
    (INT4_GROUP, COMPRESSED_TENSORS): PackLayout(
        INT4_GROUP, COMPRESSED_TENSORS, "weight_packed", "I32", ("weight_scale",), "BF16",
        (1, 128), packing=INT4_ROWS, extras=("weight_shape",)),
    (INT4_GROUP, GPTQ): PackLayout(
        INT4_GROUP, GPTQ, "qweight", "I32", ("scales",), "F16", (1, 128), packing=INT4_GPTQ,
        extras=("qzeros", "g_idx")),
}


def layout(fmt: str, convention: str) -> PackLayout:
    """The layout of ``fmt`` as ``convention`` writes it; ValueError names the known ones."""
    try:
        return LAYOUTS[(fmt, convention)]
    except KeyError:
        known = ", ".join(f"{f}/{c}" for f, c in LAYOUTS)
        raise ValueError(f"no layout for format {fmt!r} with convention {convention!r}; "
                         f"known: {known}") from None


def conventions(fmt: str) -> tuple[str, ...]:
    """Conventions that have a layout for ``fmt``."""
    return tuple(c for f, c in LAYOUTS if f == fmt)
