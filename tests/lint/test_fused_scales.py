"""SG501 on per-tensor global scales: shards vLLM fuses into one layer (q/k/v, gate/up) must
share one ``weight_scale_2`` (it keeps the max). ModelOpt's own NVFP4 export (the producer
fixture) with one shard's stored scale bytes changed in place."""

from __future__ import annotations

import shutil
import struct
import warnings
from pathlib import Path

from specguard.checkpoint.header import read_header
from specguard.lint import lint
from specguard.resolve import Resolver

FIXTURE = Path(__file__).resolve().parents[1] / "data" / "producers" / "mo_nvfp4"


def _with_scales(dest: Path, scales: dict[str, float]) -> Path:
    """A copy of the fixture with these F32 scalars written over the stored ones."""
    shutil.copytree(FIXTURE, dest, ignore=shutil.ignore_patterns("expected.json", "vllm.json"))
    path = dest / "model.safetensors"
    header = read_header(path)
    with open(path, "r+b") as f:
        for name, value in scales.items():
            t = header.tensors[name]
            assert t.dtype == "F32" and t.nbytes == 4
            f.seek(t.offsets[0])
            f.write(struct.pack("<f", value))
    return dest


def _stored_scale(name: str) -> float:
    """The fixture's stored F32 scalar ``name``."""
    t = read_header(FIXTURE / "model.safetensors").tensors[name]
    with open(FIXTURE / "model.safetensors", "rb") as f:
        f.seek(t.offsets[0])
        (value,) = struct.unpack("<f", f.read(4))
    return value


def _sg501(d: Path) -> list:
    Resolver.clear_cache()
    return [f for f in lint([Resolver.open(d)]).findings if f.code == "SG501"]


def test_the_export_as_written_shares_its_global_scales():
    assert _sg501(FIXTURE) == []


def test_shards_with_different_global_scales_are_found(tmp_path):
    layer = "model.layers.0.self_attn"
    value = _stored_scale(f"{layer}.q_proj.weight_scale_2")
    d = _with_scales(tmp_path / "differ", {f"{layer}.k_proj.weight_scale_2": value * 2,
                                          # a non-finite scale is SG401's: its layer is not compared here
                                          "model.layers.1.self_attn.k_proj.weight_scale_2": float("nan"),
                                          "model.layers.1.self_attn.q_proj.weight_scale_2": value * 4})
    with warnings.catch_warnings():  # a NaN scale is a finding, not a RuntimeWarning on the user's stderr
        warnings.simplefilter("error")
        (finding,) = _sg501(d)
    assert finding.modules == (f"{layer}.qkv_proj",)
    assert "whose shards carry different weight_scale_2" in finding.message


def test_an_experts_gate_and_up_with_different_global_scales_are_found(tmp_path):
    """vLLM loads an expert's gate_proj and up_proj into one w13 and keeps gate's weight_scale_2
    (quantization/modelopt.py warns "w1_weight_scale_2 must match w3_weight_scale_2"): HF-named
    experts are paired as DeepSeek-V4's w1/w3 are."""
    expert = "model.layers.1.mlp.experts.2"
    value = _stored_scale(f"{expert}.gate_proj.weight_scale_2")
    (finding,) = _sg501(_with_scales(tmp_path / "experts", {f"{expert}.up_proj.weight_scale_2": value * 3}))
    assert finding.modules == (expert,)
    assert "whose shards carry different weight_scale_2" in finding.message
