"""auto-round fixtures: W4 group-128 symmetric AutoRound tuning on CPU, exported
in auto-round's own format and in the GPTQ and AWQ formats.

The expected format follows auto-round's documented defaults for the recipe:
every nn.Linear inside the quantized blocks (``model.layers``) gets the
recipe's bits/group size; lm_head is left alone (quant_lm_head=False) and so
is everything that is not a Linear. The export format names the packing
convention (auto_round packs like auto_gptq).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import common

RECIPE = {"bits": 4, "group_size": 128, "sym": True, "iters": 4}
BLOCKS = "model.layers."

# name -> (export format, packing convention in specguard's words)
FIXTURES: dict[str, tuple[str, str]] = {
    "ar_w4g128_autoround": ("auto_round", "gptq"),
    "ar_w4g128_gptq": ("auto_gptq", "gptq"),
    "ar_w4g128_awq": ("auto_awq", "awq"),
}


def expected_modules(convention: str) -> dict[str, Any]:
    fmt = {4: "int4_group", 8: "int8_group"}[RECIPE["bits"]]
    out: dict[str, Any] = {}
    for name, cls in common.arch_modules().items():
        quantized = cls == "Linear" and name.startswith(BLOCKS)
        out[name] = common.entry(fmt, convention, RECIPE["group_size"]) if quantized else common.BF16
    return out


def build(name: str, dest: Path) -> None:
    from auto_round import AutoRound

    export_format, convention = FIXTURES[name]
    work = common.workdir()
    model = common.load_base(common.build_base(work / "base"))
    ar = AutoRound(
        model, tokenizer=common.tokenizer(), dataset=common.calib_ids(),
        nsamples=common.N_SAMPLES, seqlen=common.SEQ_LEN, device_map="cpu",
        bits=RECIPE["bits"], group_size=RECIPE["group_size"], sym=RECIPE["sym"],
        iters=RECIPE["iters"],
    )
    ar.quantize_and_save(output_dir=str(work / "out"), format=export_format)
    # auto-round may nest the result under a model-named folder.
    written = next((work / "out").rglob("model*.safetensors")).parent
    expected = {
        "fixture": name,
        "producer": "auto-round",
        "versions": common.versions("auto-round"),
        "recipe": {**RECIPE, "format": export_format},
        "derivation": "auto-round defaults: nn.Linear modules under 'model.layers.' get the "
        "recipe's bits/group size, packed per the export format (auto_round packs like "
        "auto_gptq); lm_head and non-Linear modules stay bf16",
        "modules": expected_modules(convention),
    }
    common.write_fixture(written, dest, expected)
