"""llm-compressor / compressed-tensors fixtures (oneshot on CPU).

Each fixture is a list of (preset scheme, targets) groups plus an ignore list.
The expected format of every module follows compressed-tensors' own matching
rules applied to that recipe: an ignore entry or target is an exact module
name, a class name (``Linear``) or ``re:`` + a Python ``re.match`` pattern.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import common

MOE_IGNORE = ["lm_head", r"re:.*mlp\.gate$"]

# name -> (modifier, [(preset, targets)], ignore)
FIXTURES: dict[str, tuple[str, list[tuple[str, list[str]]], list[str]]] = {
    "ct_nvfp4": ("QuantizationModifier", [("NVFP4", ["Linear"])], MOE_IGNORE),
    "ct_mxfp4": ("QuantizationModifier", [("MXFP4", ["Linear"])], MOE_IGNORE),
    "ct_mxfp8": ("QuantizationModifier", [("MXFP8", ["Linear"])], MOE_IGNORE),
    "ct_fp8_block": ("QuantizationModifier", [("FP8_BLOCK", ["Linear"])], MOE_IGNORE),
    "ct_fp8_dynamic": ("QuantizationModifier", [("FP8_DYNAMIC", ["Linear"])], MOE_IGNORE),
    "ct_fp8_static": ("QuantizationModifier", [("FP8", ["Linear"])], MOE_IGNORE),
    "ct_w4a16": ("GPTQModifier", [("W4A16", ["Linear"])], MOE_IGNORE),
    "ct_w8a8": ("GPTQModifier", [("W8A8", ["Linear"])], MOE_IGNORE),
    # Mixed: NVFP4 experts, FP8-dynamic attention, int4 dense MLP; the ignore
    # list keeps lm_head, the routers and one attention projection in BF16.
    "ct_mixed": (
        "QuantizationModifier",
        [
            ("NVFP4", [r"re:.*mlp\.experts\.\d+\.(gate|up|down)_proj$"]),
            ("FP8_DYNAMIC", [r"re:.*self_attn\.[qkvo]_proj$"]),
            ("W4A16", [r"re:model\.layers\.0\.mlp\.(gate|up|down)_proj$"]),
        ],
        ["lm_head", r"re:.*mlp\.gate$", r"re:.*layers\.1\.self_attn\.o_proj"],
    ),
}


def matches(pattern: str, name: str, cls: str) -> bool:
    """compressed-tensors target/ignore semantics: exact name, class name, or re.match."""
    if pattern.startswith("re:"):
        return re.match(pattern[3:], name) is not None
    return pattern in (name, cls)


def scheme_entry(weights: Any) -> dict[str, Any]:
    """Map compressed-tensors weight QuantizationArgs onto specguard's vocabulary."""
    ct = "compressed-tensors"
    kind, bits, strat = weights.type, weights.num_bits, weights.strategy
    gs = weights.group_size
    if kind == "float" and bits == 4 and strat == "tensor_group" and gs == 16:
        return common.entry("nvfp4", ct, 16)
    if kind == "float" and bits == 4 and strat == "group" and gs == 32:
        return common.entry("mxfp4", ct, 32)
    if kind == "float" and bits == 8 and strat == "group" and gs == 32:
        return common.entry("mxfp8", ct, 32)
    if kind == "float" and bits == 8 and strat == "block":
        return common.entry("fp8_block", ct, block=list(weights.block_structure))
    if kind == "float" and bits == 8 and strat == "channel":
        return common.entry("fp8_channel", ct)
    if kind == "float" and bits == 8 and strat == "tensor":
        return common.entry("fp8_tensor", ct)
    if kind == "int" and bits in (4, 8) and strat == "group":
        return common.entry(f"int{bits}_group", ct, gs)
    if kind == "int" and bits == 8 and strat == "channel":
        return common.entry("int8_channel", ct)
    raise ValueError(f"no specguard format for {weights}")


def expected_modules(groups: list[tuple[str, list[str]]], ignore: list[str]) -> dict[str, Any]:
    from compressed_tensors.quantization import preset_name_to_scheme

    out: dict[str, Any] = {}
    for name, cls in common.arch_modules().items():
        out[name] = common.BF16
        if any(matches(p, name, cls) for p in ignore):
            continue
        for preset, targets in groups:
            if any(matches(t, name, cls) for t in targets):
                out[name] = scheme_entry(preset_name_to_scheme(preset, targets).weights)
                break
    return out


def build(name: str, dest: Path) -> None:
    from compressed_tensors.quantization import preset_name_to_scheme
    from datasets import Dataset
    from llmcompressor import oneshot
    from llmcompressor.modifiers.gptq import GPTQModifier
    from llmcompressor.modifiers.quantization import QuantizationModifier

    modifier_name, groups, ignore = FIXTURES[name]
    work = common.workdir()
    base = common.build_base(work / "base")
    model = common.load_base(base)
    ids = [x[0].tolist() for x in common.calib_ids()]
    ds = Dataset.from_dict({"input_ids": ids, "attention_mask": [[1] * len(i) for i in ids]})
    config_groups = {
        f"group_{i}": preset_name_to_scheme(preset, targets)
        for i, (preset, targets) in enumerate(groups)
    }
    cls = {"QuantizationModifier": QuantizationModifier, "GPTQModifier": GPTQModifier}
    recipe = cls[modifier_name](config_groups=config_groups, ignore=ignore)
    out = work / "out"
    oneshot(
        model=model, tokenizer=common.tokenizer(), dataset=ds, recipe=recipe,
        num_calibration_samples=common.N_SAMPLES, max_seq_length=common.SEQ_LEN,
        output_dir=str(out),
    )
    expected = {
        "fixture": name,
        "producer": "llm-compressor",
        "versions": common.versions("llmcompressor", "compressed-tensors"),
        "recipe": {
            "modifier": modifier_name,
            "groups": [{"scheme": p, "targets": t} for p, t in groups],
            "ignore": ignore,
        },
        "derivation": "compressed-tensors matching (exact name, class name, re.match) of the "
        "recipe's targets/ignore over the architecture's module list; weight args of each "
        "preset mapped to specguard formats; everything else stays bf16",
        "modules": expected_modules(groups, ignore),
    }
    common.write_fixture(out, dest, expected)
