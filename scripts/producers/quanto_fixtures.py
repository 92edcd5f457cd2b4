"""optimum-quanto fixtures: ``QuantizedModelForCausalLM.quantize`` +
``save_pretrained`` (quanto's own serialization: ``model.safetensors`` with
the qtensors' inner tensors flattened, and ``quanto_qmap.json`` naming each
module's qtype), on CPU.

Expected formats from the recipe and quanto's ``quantize``: every nn.Linear
not excluded becomes a QLinear (lm_head excluded by the recipe); routers and
fused experts are not nn.Linear (transformers' save writes the experts per
expert, bf16). qint4 weights are grouped (quanto's default group size 128,
per-group scale and shift), qint8 and qfloat8 per output channel.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import common

# name -> (weights qtype, format, group size)
FIXTURES: dict[str, tuple[str, str, int | None]] = {
    "quanto_qint4": ("qint4", "int4_group", 128),
    "quanto_qint8": ("qint8", "int8_channel", None),
    "quanto_qfloat8": ("qfloat8", "fp8_channel", None),
}
EXCLUDE = "lm_head"
REFERENCE = ("model.layers.0.self_attn.k_proj", "model.layers.1.self_attn.o_proj")


def expected_modules(fmt: str, group: int | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, cls in common.arch_modules().items():
        quantized = cls == "Linear" and name != EXCLUDE and ".experts." not in name
        out[name] = common.entry(fmt, "quanto", group) if quantized else common.BF16
    return out


def build(name: str, dest: Path) -> None:
    import optimum.quanto as oq
    from optimum.quanto import QuantizedModelForCausalLM

    qtype, fmt, group = FIXTURES[name]
    work = common.workdir()
    model = common.load_base(common.build_base(work / "base"))
    qmodel = QuantizedModelForCausalLM.quantize(model, weights=getattr(oq, qtype), exclude=EXCLUDE)
    qmodel.save_pretrained(work / "out")
    expected = {
        "fixture": name,
        "producer": "optimum-quanto",
        "versions": common.versions("optimum-quanto"),
        "recipe": {"weights": qtype, "activations": None, "exclude": EXCLUDE},
        "derivation": "quanto quantize(): every nn.Linear not excluded becomes a QLinear with "
        "the recipe's weight qtype (qint4 grouped by 128 with a shift, qint8/qfloat8 per "
        "output channel); fused experts, routers and norms are not nn.Linear",
        "modules": expected_modules(fmt, group),
    }
    common.write_fixture(work / "out", dest, expected)
    inner = qmodel._wrapped
    ref = {m: inner.get_submodule(m).qweight.dequantize() for m in REFERENCE}
    common.write_reference(dest, ref, "optimum.quanto QTensor.dequantize()")
