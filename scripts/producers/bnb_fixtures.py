"""bitsandbytes fixtures through transformers' BitsAndBytesConfig, on CPU.

bitsandbytes >= 0.45 quantizes on CPU (its torch-op backend), so the real
``from_pretrained(..., quantization_config=BitsAndBytesConfig(...))`` +
``save_pretrained`` path writes these, no CUDA needed.

Expected formats from the recipe and transformers' bitsandbytes integration
(``replace_with_bnb_linear``): every nn.Linear except the output embedding
(``get_keys_to_not_convert``: lm_head) becomes Linear4bit / Linear8bitLt.
Routers and norms are not nn.Linear; experts are re-linearised per expert by
transformers' save, but were fused 3-D parameters (``Qwen3MoeExperts``) when
bitsandbytes replaced the Linears, so they stay bf16.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import common

# name -> BitsAndBytesConfig kwargs
FIXTURES: dict[str, dict[str, Any]] = {
    "bnb_nf4": {"load_in_4bit": True, "bnb_4bit_quant_type": "nf4",
                "bnb_4bit_use_double_quant": True, "bnb_4bit_compute_dtype": "bfloat16"},
    "bnb_fp4": {"load_in_4bit": True, "bnb_4bit_quant_type": "fp4",
                "bnb_4bit_use_double_quant": True, "bnb_4bit_compute_dtype": "bfloat16"},
    "bnb_int8": {"load_in_8bit": True},
}
BLOCKSIZE = 64  # bitsandbytes' 4-bit blocksize on CPU/CUDA (Params4bit default)
REFERENCE = ("model.layers.0.self_attn.k_proj", "model.layers.1.self_attn.o_proj")


def expected_modules(recipe: dict[str, Any]) -> dict[str, Any]:
    if recipe.get("load_in_4bit"):
        q = common.entry(recipe["bnb_4bit_quant_type"], "bitsandbytes", BLOCKSIZE)
    else:
        q = common.entry("int8_channel", "bitsandbytes")
    out: dict[str, Any] = {}
    for name, cls in common.arch_modules().items():
        quantized = cls == "Linear" and name != "lm_head" and ".experts." not in name
        out[name] = q if quantized else common.BF16
    return out


def build(name: str, dest: Path) -> None:
    import bitsandbytes.functional as F
    import torch
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig

    recipe = FIXTURES[name]
    work = common.workdir()
    base = common.build_base(work / "base")
    kw = dict(recipe)
    if "bnb_4bit_compute_dtype" in kw:
        kw["bnb_4bit_compute_dtype"] = getattr(torch, kw["bnb_4bit_compute_dtype"])
    model = AutoModelForCausalLM.from_pretrained(
        base, quantization_config=BitsAndBytesConfig(**kw), device_map="cpu", dtype=torch.bfloat16)
    model.save_pretrained(work / "out")
    expected = {
        "fixture": name,
        "producer": "bitsandbytes",
        "versions": common.versions("bitsandbytes", "accelerate"),
        "recipe": {"BitsAndBytesConfig": recipe},
        "derivation": "transformers replace_with_bnb_linear: every nn.Linear except lm_head "
        "(get_keys_to_not_convert) becomes Linear4bit (blocksize 64, quant_type from the "
        "recipe, double quant: absmax quantized again in blocks of 256) or Linear8bitLt "
        "(int8 per output row, SCB); fused experts, routers and norms are not nn.Linear",
        "modules": expected_modules(recipe),
    }
    common.write_fixture(work / "out", dest, expected)
    ref = {}
    for mod in REFERENCE:
        w = model.get_submodule(mod).weight
        if recipe.get("load_in_4bit"):
            ref[mod] = F.dequantize_4bit(w.data, w.quant_state)  # bnb's own dequantization
        else:
            ref[mod] = F.int8_vectorwise_dequant(w.data, w.SCB)
    how = "bitsandbytes.functional." + ("dequantize_4bit" if recipe.get("load_in_4bit")
                                        else "int8_vectorwise_dequant")
    common.write_reference(dest, ref, how)
