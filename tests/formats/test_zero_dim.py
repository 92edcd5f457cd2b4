"""A 0-dimensional weight beside a scale: a file safetensors accepts, so a module
specguard classifies (``unknown`` with a reason), never an IndexError (issue 22)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from safetensors import safe_open

from specguard.checkpoint import open_checkpoint
from specguard.checkpoint.writer import save_file
from specguard.formats.table import classify

F32, E4M3, E8M0 = np.float32, ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e8m0fnu

CASES = {  # label -> tensors of one module "m": a 0-d weight (or packed weight) beside its scale
    "U8 weight, E4M3 scale": {"m.weight": np.zeros((), np.uint8), "m.weight_scale": np.zeros((2, 1), E4M3)},
    "U8 weight, E8M0 scale": {"m.weight": np.zeros((), np.uint8), "m.weight_scale": np.zeros((), E8M0)},
    "I8 weight, F32 scale": {"m.weight": np.zeros((), np.int8), "m.weight_scale": np.zeros((2, 4), F32)},
    "U8 weight_packed": {"m.weight_packed": np.zeros((), np.uint8), "m.weight_scale": np.zeros((2, 1), E4M3)},
    "I32 weight_packed": {"m.weight_packed": np.zeros((), np.int32), "m.weight_scale": np.zeros((2, 1), F32)},
    "FP8 weight": {"m.weight": np.zeros((), E4M3), "m.weight_scale": np.zeros((), F32)},
    "gpt-oss blocks": {"m_blocks": np.zeros((), np.uint8), "m_scales": np.zeros((), np.uint8)},
}


@pytest.mark.parametrize("label", CASES)
def test_zero_dim_weight_classifies(tmp_path, label):
    path = tmp_path / "model.safetensors"
    save_file(CASES[label], path)
    with safe_open(path, "np") as f:  # the reference reader opens it
        assert {k: f.get_slice(k).get_shape() for k in f.keys()}  # noqa: SIM118 (not a dict)
    table = classify(open_checkpoint(tmp_path))
    for module in table:
        assert module.scheme.format is not None
