"""save_file writes what it is given: shapes (0-d included), dtypes, bytes."""

from __future__ import annotations

import ml_dtypes
import numpy as np

from specguard.checkpoint.header import read_header
from specguard.checkpoint.writer import save_file


def test_zero_d_arrays_keep_an_empty_shape(tmp_path):
    path = tmp_path / "m.safetensors"
    scalar = np.array(0.25, np.float32)
    save_file({"a.weight_scale_2": scalar, "a.input_scale": np.ones(1, np.float32)}, path)
    h = read_header(path)
    assert h.tensors["a.weight_scale_2"].shape == ()
    assert h.tensors["a.input_scale"].shape == (1,)
    t = h.tensors["a.weight_scale_2"]
    assert path.read_bytes()[t.offsets[0]:t.offsets[1]] == scalar.tobytes()


def test_non_contiguous_input_written_in_c_order(tmp_path):
    path = tmp_path / "m.safetensors"
    x = np.arange(12, dtype=np.float32).reshape(3, 4).astype(ml_dtypes.bfloat16)
    save_file({"w": x.T}, path, {"format": "pt"})
    h = read_header(path)
    t = h.tensors["w"]
    assert t.dtype == "BF16" and t.shape == (4, 3) and h.metadata == {"format": "pt"}
    assert path.read_bytes()[t.offsets[0]:t.offsets[1]] == np.ascontiguousarray(x.T).tobytes()
