"""A quantization scheme is data: format, convention, group size, scale dtype.

The same vocabulary is used for what is stored on disk, what a config
declares and what an engine builds, so the three compare with ``==`` on
``format`` (and ``group_size`` where it matters).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from specguard.vocabulary import Vocabulary


class Format(Vocabulary):
    """How a weight is stored, in the field's words. ``ambiguous``: the header alone
    cannot decide (a U8 scale may hold E8M0 or E4M3 bytes); ``unknown`` carries a reason."""

    BF16 = "bf16"
    FP16 = "fp16"
    FP32 = "fp32"
    FP8_TENSOR = "fp8_tensor"
    FP8_CHANNEL = "fp8_channel"
    FP8_BLOCK = "fp8_block"
    NVFP4 = "nvfp4"
    MXFP4 = "mxfp4"
    MXFP8 = "mxfp8"
    INT4_GROUP = "int4_group"
    INT8_GROUP = "int8_group"
    INT8_CHANNEL = "int8_channel"
    INT8_TENSOR = "int8_tensor"
    NF4 = "nf4"  # bitsandbytes NormalFloat4, blockwise absmax
    FP4 = "fp4"  # bitsandbytes FP4 (E2M1 codebook), blockwise absmax
    FP8_KV = "fp8_kv"  # attention-cache scales only (k_scale / v_scale)
    PLAIN_TENSOR = "integer"  # a non-float standalone tensor (ids, masks, expert maps), shown with its dtype
    MIXED = "mixed"  # one runtime module built from checkpoint modules stored differently
    UNKNOWN = "unknown"
    AMBIGUOUS = "ambiguous"


class Convention(Vocabulary):
    """Who wrote the tensors, which decides their names and what a scale means."""

    MODELOPT = "modelopt"  # weight/weight_scale/weight_scale_2/input_scale
    COMPRESSED_TENSORS = "compressed-tensors"  # weight_packed/weight_global_scale (reciprocal)
    DEEPSEEK = "deepseek"  # bare `.scale` (V4 native) or weight_scale_inv (V3)
    GPT_OSS = "gpt-oss"  # *_blocks / *_scales
    GPTQ = "gptq"
    AWQ = "awq"
    BITSANDBYTES = "bitsandbytes"  # weight.absmax/quant_map/quant_state.* (4-bit), SCB (int8)
    QUANTO = "quanto"  # weight._data[._data]/weight._scale/weight._shift
    TORCHAO = "torchao"  # _weight_qdata/_weight_scale/_weight_zero_point
    QUARK = "quark"  # AMD Quark: weight/weight_scale/weight_zero_point, input_scale_2
    PLAIN = "plain"  # unquantized


# The members under the short names the stages use (``s.MXFP4``, ``s.DEEPSEEK``).
BF16, FP16, FP32 = Format.BF16, Format.FP16, Format.FP32
FP8_TENSOR, FP8_CHANNEL, FP8_BLOCK = Format.FP8_TENSOR, Format.FP8_CHANNEL, Format.FP8_BLOCK
NVFP4, MXFP4, MXFP8 = Format.NVFP4, Format.MXFP4, Format.MXFP8
INT4_GROUP, INT8_GROUP, INT8_CHANNEL = Format.INT4_GROUP, Format.INT8_GROUP, Format.INT8_CHANNEL
INT8_TENSOR, NF4, FP4 = Format.INT8_TENSOR, Format.NF4, Format.FP4
FP8_KV, PLAIN_TENSOR, MIXED = Format.FP8_KV, Format.PLAIN_TENSOR, Format.MIXED
UNKNOWN, AMBIGUOUS = Format.UNKNOWN, Format.AMBIGUOUS
MODELOPT, COMPRESSED_TENSORS, DEEPSEEK = Convention.MODELOPT, Convention.COMPRESSED_TENSORS, Convention.DEEPSEEK
GPT_OSS, GPTQ, AWQ, PLAIN = Convention.GPT_OSS, Convention.GPTQ, Convention.AWQ, Convention.PLAIN
BITSANDBYTES, QUANTO, TORCHAO, QUARK = Convention.BITSANDBYTES, Convention.QUANTO, Convention.TORCHAO, Convention.QUARK

UNQUANTIZED = frozenset({BF16, FP16, FP32, PLAIN_TENSOR})


@dataclass(frozen=True)
class Scheme:
    """How one module's weight is stored (or declared, or built)."""

    format: Format
    convention: Convention | None = None
    group_size: int | None = None  # elements per scale along the reduction dim
    block: tuple[int, int] | None = None  # 2-D block for fp8_block
    scale_dtype: str | None = None  # safetensors dtype of the block/group scale
    weight_dtype: str | None = None  # safetensors dtype of the stored weight
    pack_axis: int | None = None  # int group formats: axis the ints are packed along
    zero_points: bool | None = None  # True: zero points stored beside the scales (asymmetric capable)
    candidates: tuple[Scheme, ...] = ()  # ambiguous: the schemes the header fits (settle.py picks one)
    reason: str | None = None  # why unknown/ambiguous, or a note
    # Other schemes the same tensors fit (a 128x128 FP8 weight with a [1, 1] scale is
    # per-tensor and one 128x128 block alike): a claim among them is not contradicted.
    readings: tuple[Scheme, ...] = field(default=(), compare=False, repr=False)

    def fits(self, fmt: str) -> bool:
        """Is ``fmt`` this scheme's format or one of its other readings'?"""
        return fmt == self.format or any(r.format == fmt for r in self.readings)

    def reading(self, fmt: str) -> Scheme:
        """This storage read as ``fmt`` (itself when ``fmt`` is no reading of it); the
        other readings stay attached."""
        if fmt == self.format:
            return self
        hit = next((r for r in self.readings if r.format == fmt), None)
        if hit is None:
            return self
        return replace(hit, readings=(replace(self, readings=()),
                                      *(r for r in self.readings if r is not hit)))

    @property
    def quantized(self) -> bool:
        return self.format not in UNQUANTIZED

    def short(self) -> str:
        """Compact human label, e.g. ``nvfp4 (modelopt, g16)``."""
        parts: list[str] = []
        if self.convention and self.convention != PLAIN:
            parts.append(self.convention)
        if self.scale_dtype and self.format in (MXFP4, MXFP8, FP8_BLOCK, AMBIGUOUS):
            parts.append(self.scale_dtype.lower().removeprefix("f8_"))
        if self.format == PLAIN_TENSOR and self.weight_dtype:
            parts.append(self.weight_dtype.lower())
        if self.block:
            parts.append(f"{self.block[0]}x{self.block[1]}")
        elif self.group_size:
            parts.append(f"g{self.group_size}")
        label = str(self.format)
        return f"{label} ({', '.join(parts)})" if parts else label
