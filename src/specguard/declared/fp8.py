"""vLLM ``fp8`` and DeepSeek-V4 ``deepseek_v4_fp8`` configs.

Keys (vllm/model_executor/layers/quantization/fp8.py ``Fp8Config.from_config``;
vllm/models/deepseek_v4{,1}/quant_config.py): ``ignored_layers`` (falls back
to ``modules_to_not_convert`` when empty), ``weight_block_size``,
``activation_scheme``, ``scale_fmt``, ``store_dtype``; DeepSeek-V4 adds
config.json's ``expert_dtype`` (default ``fp4``) and
``quantization_config.moe_quant_algo``, and V4.1 honours a ModelOpt-style
``quantization_config.ignore`` list for routed experts (experts it matches keep
their native MXFP4 format).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from specguard.declared.model import (
    FNMATCHCASE,
    NATIVE,
    UNQUANTIZED,
    VLLM_EXACT,
    Declared,
    DeclaredScheme,
    Pattern,
)
from specguard.formats import scheme as s
from specguard.formats.scheme import Scheme
from specguard.layouts import roles as r

# deepseek_v41/quant_config.py ``_EXPERTS_LAYER_RE``.
_EXPERTS_LAYER_RE = re.compile(r"(?:^|\.)layers\.(\d+)\.ffn\.experts$")

NVFP4_MODELOPT = Scheme(s.NVFP4, s.MODELOPT, group_size=16, scale_dtype="F8_E4M3", weight_dtype="U8")
MXFP4_DEEPSEEK = Scheme(s.MXFP4, s.DEEPSEEK, group_size=32, scale_dtype="F8_E8M0")


def fp8_linear_scheme(block: tuple[int, int] | None, e8m0: bool, deepseek: bool) -> Scheme:
    """The FP8 layout of a linear under Fp8Config (block scales) or per-tensor."""
    scale = "F8_E8M0" if e8m0 else "F32"
    if block is None:
        return Scheme(s.FP8_TENSOR, scale_dtype="F32", weight_dtype="F8_E4M3")
    if deepseek and block == (32, 32) and e8m0:  # V4.1 MXFP8 linears (ModelOptLinearMethod)
        return Scheme(s.MXFP8, s.DEEPSEEK, group_size=32, scale_dtype=scale, weight_dtype="F8_E4M3")
    return Scheme(s.FP8_BLOCK, s.DEEPSEEK, block=block, scale_dtype=scale, weight_dtype="F8_E4M3")


@dataclass(frozen=True, kw_only=True)
class Fp8Declared(Declared):
    deepseek_v4: bool = False
    weight_block_size: tuple[int, int] | None = None
    scale_fmt: str | None = None
    expert_dtype: str = "fp4"
    moe_quant_algo: str = ""
    store_dtype: str | None = None
    num_hidden_layers: int | None = None

    @property
    def e8m0(self) -> bool:
        # DeepseekV4FP8Config.is_scale_e8m0: keyed on expert_dtype; plain Fp8Config
        # checkpoints say it with scale_fmt.
        if self.deepseek_v4:
            return self.expert_dtype == "fp4"
        return self.scale_fmt == "ue8m0"

    def linear_scheme(self) -> Scheme:
        return fp8_linear_scheme(self.weight_block_size, self.e8m0, self.deepseek_v4)

    def _scheme_for(self, name: str, kind: str) -> DeclaredScheme:
        if kind in (r.EMBEDDING_KIND, r.HEAD_KIND):
            return self._plain("Fp8Config quantizes linear layers and routed experts only")
        hit = self._first(name, None, (UNQUANTIZED,))
        if hit is not None:
            return self._plain("", hit)
        key = "quantization_config"
        if kind == r.LINEAR:
            why = f"{key}.weight_block_size={list(self.weight_block_size)}" if self.weight_block_size \
                else f"{key}.quant_method={self.quant_method} (per-tensor)"
            return DeclaredScheme(self.linear_scheme(), why)
        if not self.deepseek_v4:
            if self.store_dtype == "mxfp4":
                return DeclaredScheme(Scheme(s.MXFP4, group_size=32), f"{key}.store_dtype=mxfp4")
            return DeclaredScheme(self.linear_scheme(), f"{key}.quant_method={self.quant_method}")
        if self.expert_dtype == "fp8":
            return DeclaredScheme(self.linear_scheme(), "config.expert_dtype=fp8")
        native = self._native(name)
        if native is not None:
            return DeclaredScheme(MXFP4_DEEPSEEK, str(native), native)
        if self.moe_quant_algo == "NVFP4":
            return DeclaredScheme(NVFP4_MODELOPT, f"{key}.moe_quant_algo=NVFP4")
        return DeclaredScheme(MXFP4_DEEPSEEK, "config.expert_dtype=fp4")

    def _native(self, name: str) -> Pattern | None:
        """A V4 ``ignore`` entry matching the name, or the checkpoint-style name
        V4.1 derives from a runtime prefix (``mtp.{k}.ffn.experts``)."""
        ignore = [x for x in self.patterns if x.effect == NATIVE]
        if not ignore:
            return None
        spellings = [name]
        m = _EXPERTS_LAYER_RE.search(name)
        if m and self.num_hidden_layers is not None:
            idx, n = int(m.group(1)), self.num_hidden_layers
            spellings.append(f"mtp.{idx - n}.ffn.experts" if idx >= n else f"layers.{idx}.ffn.experts")
        return next((x for x in ignore for sp in spellings if x.matches(sp)), None)


def parse_fp8(qc: dict, config: dict, *, deepseek_v4: bool, origin: str) -> Fp8Declared:
    key = "quantization_config"
    ignored = qc.get("ignored_layers")
    ignore_key = "ignored_layers"
    if not ignored:  # Fp8Config.from_config falls back to modules_to_not_convert
        ignored, ignore_key = qc.get("modules_to_not_convert"), "modules_to_not_convert"
    patterns = [
        Pattern(t, VLLM_EXACT, f"{key}.{ignore_key}[{i}]")
        for i, t in enumerate(ignored or ()) if isinstance(t, str)
    ]
    notes: list[str] = []
    if deepseek_v4 and isinstance(qc.get("ignore"), list):
        patterns += [
            Pattern(t, FNMATCHCASE, f"{key}.ignore[{i}]", NATIVE)
            for i, t in enumerate(qc["ignore"]) if isinstance(t, str)
        ]
    block = qc.get("weight_block_size")
    if block is not None and not (isinstance(block, list) and len(block) == 2):
        notes.append(f"weight_block_size {block!r} is not two integers (vLLM raises)")
        block = None
    if "activation_scheme" not in qc:
        notes.append("quantization_config has no activation_scheme (vLLM's Fp8Config.from_config raises)")
    expert_dtype = str(config.get("expert_dtype") or "fp4")
    scale_fmt = qc.get("scale_fmt")
    if deepseek_v4 and scale_fmt and (scale_fmt == "ue8m0") != (expert_dtype == "fp4"):
        notes.append(f"scale_fmt={scale_fmt!r} but expert_dtype={expert_dtype!r}: vLLM keys the linear "
                     "scale dtype on expert_dtype (E8M0 iff fp4)")
    return Fp8Declared(
        stack="deepseek_v4_fp8" if deepseek_v4 else "fp8",
        quant_method=str(qc.get("quant_method")),
        origin=origin,
        patterns=tuple(patterns),
        notes=tuple(notes),
        deepseek_v4=deepseek_v4,
        weight_block_size=tuple(block) if block else None,
        scale_fmt=scale_fmt,
        expert_dtype=expert_dtype,
        moe_quant_algo=str(qc.get("moe_quant_algo") or "").upper(),
        store_dtype=qc.get("store_dtype"),
        num_hidden_layers=config.get("num_hidden_layers"),
    )
