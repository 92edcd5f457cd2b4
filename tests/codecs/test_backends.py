"""numpy and torch back ends agree bit for bit, on every layout and every device."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch

from specguard import codecs as C
from specguard.codecs import torch_backend as T
from tests.codecs.cases import CASES, case_id, dequant_opts, weights

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def _bytes(a: np.ndarray | torch.Tensor) -> bytes:
    if isinstance(a, torch.Tensor):
        a = a.detach().cpu().contiguous()
        return a.reshape(-1).view(torch.uint8).numpy().tobytes()
    return np.ascontiguousarray(a).tobytes()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_quantize_and_dequantize_bit_identical(case: tuple, device: str) -> None:
    fmt, conv, opts, shape = case
    w = weights(shape)
    ours = C.quantize(fmt, w, convention=conv, **opts)
    theirs = T.quantize(fmt, torch.from_numpy(w).to(device), convention=conv, **opts)
    assert set(ours) == set(theirs)
    for k in ours:
        assert tuple(ours[k].shape) == tuple(theirs[k].shape), k
        assert ours[k].dtype.itemsize == theirs[k].element_size(), k
        assert _bytes(ours[k]) == _bytes(theirs[k]), f"{k} differs"
    a = C.dequantize(fmt, ours, convention=conv, **dequant_opts(opts))
    b = T.dequantize(fmt, theirs, convention=conv, **dequant_opts(opts))
    assert a.dtype == np.float32 and b.dtype == torch.float32
    assert a.shape == shape
    assert _bytes(a) == _bytes(b)


@pytest.mark.parametrize("device", DEVICES)
def test_torch_bfloat16_output_is_the_float32_result_rounded_once(device: str) -> None:
    import ml_dtypes

    w = weights((64, 128))
    q = C.quantize("nvfp4", w, convention="modelopt")
    ref = C.dequantize("nvfp4", q, convention="modelopt").astype(ml_dtypes.bfloat16)
    tq = {k: torch.from_numpy(np.asarray(v).copy()).to(device) for k, v in q.items()
          if v.dtype.itemsize != 1 or v.dtype == np.uint8}
    tq["weight_scale"] = torch.from_numpy(q["weight_scale"].view(np.uint8)).view(
        torch.float8_e4m3fn).to(device)
    out = T.dequantize("nvfp4", tq, convention="modelopt", dtype=torch.bfloat16)
    assert out.dtype == torch.bfloat16
    assert _bytes(out) == ref.tobytes()


@pytest.mark.skipif(shutil.which("g++") is None and shutil.which("c++") is None,
                    reason="torch.compile on CPU needs a C++ compiler")
def test_compiled_dequantize_matches_eager() -> None:
    """compile=True (torch.compile of the decode-and-scale pass) changes no bit.

    benchmarks/codecs.py checks every format on a GPU; here one FP4 and one FP8
    layout on the CPU."""
    for fmt, conv in (("nvfp4", "compressed-tensors"), ("fp8_block", "deepseek")):
        q = T.quantize(fmt, torch.from_numpy(weights((64, 256))), convention=conv)
        a = T.dequantize(fmt, q, convention=conv, dtype=torch.bfloat16, compile=True)
        b = T.dequantize(fmt, q, convention=conv, dtype=torch.bfloat16)
        assert torch.equal(a.view(torch.int16), b.view(torch.int16)), fmt
