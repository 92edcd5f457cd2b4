"""nvidia-modelopt fixtures: mtq.quantize on CPU, then the unified HF export
(export_hf_checkpoint), which writes hf_quant_config.json.

The expected format of a module follows ModelOpt's own config semantics: the
quant_cfg entries are applied in order, each an fnmatch pattern over quantizer
names (``<module>.weight_quantizer``); the last matching entry wins.
"""

from __future__ import annotations

import copy
from fnmatch import fnmatch
from pathlib import Path
from typing import Any

import common

# FP8 per-tensor weight/input quantizer, as in ModelOpt's FP8_DEFAULT_CFG.
_FP8 = {"num_bits": (4, 3), "axis": None}

# name -> (preset config name, extra quant_cfg entries appended after it)
FIXTURES: dict[str, tuple[str, list[dict[str, Any]]]] = {
    "mo_nvfp4": ("NVFP4_DEFAULT_CFG", []),
    "mo_fp8": ("FP8_DEFAULT_CFG", []),
    "mo_mxfp4": ("MXFP4_DEFAULT_CFG", []),
    "mo_mxfp8": ("MXFP8_DEFAULT_CFG", []),
    "mo_fp8_block": ("FP8_2D_BLOCKWISE_WEIGHT_ONLY_CFG", []),
    # Dense variant: ModelOpt 0.47's INT4-AWQ export cannot walk transformers
    # 5's fused experts (README.md has the error line).
    "mo_int4_awq_dense": ("INT4_AWQ_CFG", []),
    # Mixed precision: NVFP4 MLPs/experts, FP8 attention, layer 1's o_proj left
    # in BF16 -> hf_quant_config.json quant_algo MIXED_PRECISION.
    "mo_mixed": ("NVFP4_DEFAULT_CFG", [
        {"quantizer_name": "*self_attn*weight_quantizer", "cfg": _FP8},
        {"quantizer_name": "*self_attn*input_quantizer", "cfg": _FP8},
        {"quantizer_name": "*layers.1.self_attn.o_proj*", "enable": False},
    ]),
}


def quant_config(name: str) -> dict[str, Any]:
    import modelopt.torch.quantization as mtq

    preset, extra = FIXTURES[name]
    cfg = copy.deepcopy(getattr(mtq, preset))
    cfg["quant_cfg"] = [*cfg["quant_cfg"], *copy.deepcopy(extra)]
    return cfg


def weight_quantizer(rules: list[dict[str, Any]], module: str, cls: str) -> dict[str, Any] | None:
    """The cfg ModelOpt gives ``<module>.weight_quantizer`` (None when disabled)."""
    qname = f"{module}.weight_quantizer"
    enabled, cfg = False, None
    for rule in rules:
        parent = rule.get("parent_class")
        if parent is not None and parent.split(".")[-1] != cls:
            continue
        if not fnmatch(qname, rule["quantizer_name"]):
            continue
        if "cfg" in rule:
            cfg = rule["cfg"]
        enabled = rule.get("enable", True if "cfg" in rule else enabled)
    return cfg if enabled else None


def scheme_entry(cfg: dict[str, Any]) -> dict[str, Any]:
    """Map a ModelOpt weight-quantizer cfg onto specguard's vocabulary."""
    mo = "modelopt"
    bits, blocks = cfg.get("num_bits"), cfg.get("block_sizes") or {}
    bits = tuple(bits) if isinstance(bits, (tuple, list)) else bits  # (E, M) for floats
    scale_bits = tuple(blocks.get("scale_bits", ()))
    if bits == (2, 1):
        if blocks.get(-1) == 16 and scale_bits == (4, 3):
            return common.entry("nvfp4", mo, 16)
        if blocks.get(-1) == 32 and scale_bits == (8, 0):
            return common.entry("mxfp4", mo, 32)
    if bits == (4, 3):
        if blocks.get(-1) == 32 and scale_bits == (8, 0):
            return common.entry("mxfp8", mo, 32)
        if -1 in blocks and -2 in blocks:
            return common.entry("fp8_block", mo, block=[blocks[-2], blocks[-1]])
        if not blocks and cfg.get("axis") is None:
            return common.entry("fp8_tensor", mo)
        if not blocks and cfg.get("axis") == 0:
            return common.entry("fp8_channel", mo)
    if bits == 4 and blocks.get(-1):
        return common.entry("int4_group", mo, blocks[-1])
    if bits == 8 and not blocks:
        return common.entry("int8_channel", mo)
    raise ValueError(f"no specguard format for ModelOpt cfg {cfg}")


def arch(name: str) -> dict[str, Any]:
    return common.TINY_DENSE if name.endswith("_dense") else common.TINY


def expected_modules(rules: list[dict[str, Any]], arch: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, cls in common.arch_modules(arch).items():
        cfg = weight_quantizer(rules, name, cls) if cls == "Linear" else None
        out[name] = scheme_entry(cfg) if cfg else common.BF16
    return out


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    return obj


def build(name: str, dest: Path) -> None:
    import modelopt.torch.quantization as mtq
    import torch
    from modelopt.torch.export import export_hf_checkpoint

    work = common.workdir()
    model = common.load_base(common.build_base(work / "base", arch(name)))
    data = common.calib_ids()
    cfg = quant_config(name)

    def forward_loop(m: torch.nn.Module) -> None:
        with torch.no_grad():
            for ids in data:
                m(ids)

    mtq.quantize(model, cfg, forward_loop=forward_loop)
    out = work / "out"
    with torch.no_grad():
        export_hf_checkpoint(model, export_dir=out)
    preset, extra = FIXTURES[name]
    expected = {
        "fixture": name,
        "producer": "modelopt",
        "versions": common.versions("nvidia-modelopt"),
        "architecture": "dense" if name.endswith("_dense") else "moe",
        "recipe": {"preset": preset, "extra_quant_cfg": _jsonable(extra),
                   "algorithm": _jsonable(cfg.get("algorithm"))},
        "derivation": "ModelOpt quant_cfg entries applied in order (fnmatch over "
        "'<module>.weight_quantizer', last match wins) over the architecture's Linear "
        "modules; enabled weight-quantizer cfgs mapped to specguard formats; everything "
        "else stays bf16",
        "modules": expected_modules(cfg["quant_cfg"], arch(name)),
    }
    common.write_fixture(out, dest, expected)
