"""torchao fixtures through transformers' TorchAoConfig, on CPU.

``from_pretrained(..., quantization_config=TorchAoConfig(<torchao config>))``
then ``save_pretrained`` (safetensors): transformers 5 flattens each torchao
tensor subclass into ``<module>._weight_<inner>`` tensors (``_weight_qdata``,
``_weight_scale``, ``_weight_zero_point``) and records the subclass in the
safetensors metadata.

Expected formats from the recipe: torchao's ``quantize_`` default filter
takes every nn.Linear; transformers' TorchAoHfQuantizer leaves the output
embedding alone (``include_input_output_embeddings=False``); routers and the
fused experts are not nn.Linear. Int8WeightOnlyConfig and
Float8WeightOnlyConfig default to PerRow granularity (one scale per output
channel).

Int4WeightOnlyConfig (torchao 0.18) is not here: its default packing needs
``mslk`` (a CUDA kernel package) even on CPU -- "ImportError: Requires mslk >=
1.0.0" from Int4Tensor.from_hp -- and its CPU packing ``opaque`` is not a
serializable layout.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import common

# name -> (torchao config class, format)
FIXTURES: dict[str, tuple[str, str]] = {
    "torchao_int8wo": ("Int8WeightOnlyConfig", "int8_channel"),
    "torchao_fp8wo": ("Float8WeightOnlyConfig", "fp8_channel"),
}
REFERENCE = ("model.layers.0.self_attn.k_proj", "model.layers.1.self_attn.o_proj")


def expected_modules(fmt: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, cls in common.arch_modules().items():
        quantized = cls == "Linear" and name != "lm_head" and ".experts." not in name
        out[name] = common.entry(fmt, "torchao") if quantized else common.BF16
    return out


def build(name: str, dest: Path) -> None:
    import torch
    import torchao.quantization as aoq
    from transformers import AutoModelForCausalLM, TorchAoConfig

    cls, fmt = FIXTURES[name]
    work = common.workdir()
    base = common.build_base(work / "base")
    model = AutoModelForCausalLM.from_pretrained(
        base, quantization_config=TorchAoConfig(getattr(aoq, cls)()), device_map="cpu",
        dtype=torch.bfloat16)
    model.save_pretrained(work / "out", safe_serialization=True)
    expected = {
        "fixture": name,
        "producer": "torchao",
        "versions": common.versions("torchao"),
        "recipe": {"TorchAoConfig": cls + "()"},
        "derivation": "torchao quantize_ on every nn.Linear except lm_head "
        "(TorchAoHfQuantizer, include_input_output_embeddings=False), PerRow "
        "granularity (the config's default); fused experts, routers and norms are "
        "not nn.Linear",
        "modules": expected_modules(fmt),
    }
    common.write_fixture(work / "out", dest, expected)
    ref = {m: model.get_submodule(m).weight.dequantize() for m in REFERENCE}
    common.write_reference(dest, ref, f"torchao {cls} tensor .dequantize()")
