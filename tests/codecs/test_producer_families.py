"""specguard's decoders against each producer's own dequantization, bit for bit.

tests/data/producers/<fixture>/reference/dequantized.safetensors holds what the
producer itself computed for two modules (bitsandbytes ``dequantize_4bit`` /
``int8_vectorwise_dequant``, quanto ``QTensor.dequantize``, torchao
``.dequantize()``, Quark's frozen QDQ weight), written by scripts/producers/.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from specguard.checkpoint import open_checkpoint
from specguard.codecs import families as F
from specguard.formats import classify

DATA = Path(__file__).resolve().parents[1] / "data" / "producers"
MODULES = ("model.layers.0.self_attn.k_proj", "model.layers.1.self_attn.o_proj")


def _params(fixture: str, module: str) -> dict[str, np.ndarray]:
    ckpt = open_checkpoint(DATA / fixture)
    mod = classify(ckpt)[module]
    return {p: ckpt.read(t.name) for p, t in mod.params.items()}


def _reference(fixture: str, module: str) -> np.ndarray:
    return open_checkpoint(DATA / fixture / "reference").read(module)


DECODERS = {
    "bnb_nf4": lambda t, shape: F.bnb_4bit(t),
    "bnb_fp4": lambda t, shape: F.bnb_4bit(t),
    "bnb_int8": lambda t, shape: F.bnb_int8(t["weight"], t["SCB"]),
    "quanto_qint4": lambda t, shape: F.quanto_int4(t, shape),
    "quanto_qint8": lambda t, shape: F.quanto_per_row(t),
    "quanto_qfloat8": lambda t, shape: F.quanto_per_row(t),
    "torchao_int8wo": lambda t, shape: F.torchao_affine(t),
    "torchao_fp8wo": lambda t, shape: F.torchao_affine(t),
    "quark_int4_g128": lambda t, shape: F.quark_int4(t, signed=True),
    "quark_uint4_g128": lambda t, shape: F.quark_int4(t, signed=False),
}


@pytest.mark.parametrize("module", MODULES)
@pytest.mark.parametrize("fixture", sorted(DECODERS))
def test_decoder_is_bit_identical_to_the_producer(fixture, module):
    want = _reference(fixture, module)
    got = DECODERS[fixture](_params(fixture, module), want.shape)
    assert got.shape == want.shape and got.dtype == want.dtype
    assert np.array_equal(got.view(np.uint8), want.view(np.uint8))


def test_awq_decoder_agrees_with_the_gptq_export_of_the_same_run():
    """auto-round exported one quantization twice (ar_w4g128_awq, ar_w4g128_gptq): the
    AWQ decoder and the GPTQ codec give the same weights bit for bit; and AutoAWQ's
    pack order is the inverse of vLLM 0.33's ``_REVERSE_AWQ_PACK_ORDER``."""
    from vllm.model_executor.layers.quantization.auto_awq import _REVERSE_AWQ_PACK_ORDER

    from specguard import codecs
    from specguard.formats import scheme as s

    assert [F.AWQ_ORDER[i] for i in _REVERSE_AWQ_PACK_ORDER] == list(range(8))
    for module in MODULES:
        awq = F.awq_int4(_params("ar_w4g128_awq", module))
        gptq = codecs.dequantize(s.INT4_GROUP, _params("ar_w4g128_gptq", module), convention=s.GPTQ, group_size=128)
        assert np.array_equal(awq, gptq)
