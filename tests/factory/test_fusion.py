"""Shards vLLM fuses into one layer share one global scale, as ModelOpt's and
llm-compressor's exports make them (ModelOpt ``preprocess_linear_fusion``;
llm-compressor ``update_fused_layer_weight_global_scales``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from specguard import codecs
from specguard.checkpoint.dtypes import NUMPY
from specguard.checkpoint.header import read_header
from specguard.factory import weight_shapes, write_scenario
from specguard.factory.build import fusion_groups
from specguard.factory.models import SIZES, modules
from specguard.formats.scheme import NVFP4


def _tensors(path: Path) -> dict[str, np.ndarray]:
    """Every tensor of a checkpoint, in its on-disk dtype (ml_dtypes for F8)."""
    out: dict[str, np.ndarray] = {}
    for f in sorted(path.glob("*.safetensors")):
        h, raw = read_header(f), f.read_bytes()
        out |= {n: np.frombuffer(raw[t.offsets[0]:t.offsets[1]], NUMPY[t.dtype]).reshape(t.shape)
                for n, t in h.tensors.items()}
    return out


def _scalar(ts: dict[str, np.ndarray], name: str) -> float:
    a = ts[name]
    assert a.size == 1, name
    return float(a.reshape(()))


# (scenario, fused shards, per-tensor suffixes that must agree)
SHARED = [
    ("s1", ["layers.1.ffn.experts.2.w1", "layers.1.ffn.experts.2.w3"], ["weight_scale_2", "input_scale"]),
    ("s2", ["layers.0.ffn.experts.3.w1", "layers.0.ffn.experts.3.w3"],
     ["weight_global_scale", "input_global_scale"]),
    ("s8-nvfp4", ["model.layers.0.mlp.gate_proj", "model.layers.0.mlp.up_proj"],
     ["weight_scale_2", "input_scale"]),
    ("s8-nvfp4", ["model.layers.2.mlp.shared_experts.gate_proj", "model.layers.2.mlp.shared_experts.up_proj"],
     ["weight_scale_2", "input_scale"]),
    ("s8-nvfp4", ["model.layers.2.mlp.experts.1.gate_proj", "model.layers.2.mlp.experts.1.up_proj"],
     ["weight_scale_2", "input_scale"]),
]


@pytest.mark.parametrize(("name", "shards", "suffixes"), SHARED, ids=[f"{n}-{s[0]}" for n, s, _ in SHARED])
def test_fused_shards_share_their_global_scales(written, name, shards, suffixes) -> None:
    info = written[name]
    ts = _tensors(info.path)
    for suffix in suffixes:
        values = {_scalar(ts, f"{m}.{suffix}") for m in shards}
        assert len(values) == 1, (suffix, values)
    # the seeded weights differ, so the shared value is the group's max amax, not each shard's
    global_suffix = suffixes[0]
    exp = info.expected[shards[0]]
    weights = [codecs.dequantize(NVFP4, {k: ts[f"{m}.{k}"] for k in info.expected[m].tensors},
                                 convention=exp.convention) for m in shards]
    amax = max(float(np.abs(w).max()) for w in weights)
    g = _scalar(ts, f"{shards[0]}.{global_suffix}")
    per_tensor = g if global_suffix == "weight_scale_2" else 1.0 / g
    # decoded amax within an NVFP4 step of the shared scale's amax (6 * 448 * scale)
    assert amax == pytest.approx(per_tensor * 6 * 448, rel=0.1)
    amaxes = [float(np.abs(w).max()) for w in weights]
    assert min(amaxes) < 0.95 * max(amaxes), "shards too alike to tell shared from per-shard scales"


def test_unfused_projections_keep_their_own_scales(written) -> None:
    ts = _tensors(written["s1"].path)
    w1 = _scalar(ts, "layers.1.ffn.experts.2.w1.weight_scale_2")
    w2 = _scalar(ts, "layers.1.ffn.experts.2.w2.weight_scale_2")
    other = _scalar(ts, "layers.1.ffn.experts.3.w1.weight_scale_2")
    assert len({w1, w2, other}) == 3


def test_fusion_groups_follow_the_layouts() -> None:
    from specguard.factory.scenarios import SCENARIO_TABLE

    s = SIZES["tiny"]
    v4 = SCENARIO_TABLE["s1"].target
    groups = {tuple(m.name for m in g) for g in fusion_groups(modules(v4.family, v4.draft, s, 1), v4.config(s))}
    assert ("layers.0.attn.wq_a", "layers.0.attn.wkv") in groups
    assert ("layers.0.ffn.experts.0.w1", "layers.0.ffn.experts.0.w3") in groups
    assert ("mtp.0.ffn.shared_experts.w1", "mtp.0.ffn.shared_experts.w3") in groups
    assert not any("w2" in n for g in groups for n in g)
    v3 = SCENARIO_TABLE["s6"].target
    groups = {tuple(m.name for m in g) for g in fusion_groups(modules(v3.family, v3.draft, s, 1), v3.config(s))}
    assert ("model.layers.0.self_attn.q_a_proj", "model.layers.0.self_attn.kv_a_proj_with_mqa") in groups
    assert ("model.layers.0.mlp.gate_proj", "model.layers.0.mlp.up_proj") in groups
    assert ("model.layers.2.mlp.experts.3.gate_proj", "model.layers.2.mlp.experts.3.up_proj") in groups


def test_given_weights_are_quantized_with_their_fused_sibling(tmp_path: Path) -> None:
    """A given shard with a large amax raises its sibling's global scale; both decode well."""
    shapes = weight_shapes("s1")
    rng = np.random.default_rng(3)
    w1 = rng.standard_normal(shapes["layers.0.ffn.experts.0.w1.weight"]).astype(np.float32) * 0.5
    w3 = rng.standard_normal(shapes["layers.0.ffn.experts.0.w3.weight"]).astype(np.float32) * 0.01
    info = write_scenario("s1", tmp_path / "s1", weights={"layers.0.ffn.experts.0.w1.weight": w1,
                                                           "layers.0.ffn.experts.0.w3.weight": w3})
    ts = _tensors(info.path)
    g = {_scalar(ts, f"layers.0.ffn.experts.0.{p}.weight_scale_2") for p in ("w1", "w3")}
    assert len(g) == 1 and g.pop() == pytest.approx(np.abs(w1).max() / (6 * 448), rel=0.01)
    for p, w in (("w1", w1), ("w3", w3)):
        m = f"layers.0.ffn.experts.0.{p}"
        back = codecs.dequantize(NVFP4, {k: ts[f"{m}.{k}"] for k in info.expected[m].tensors},
                                 convention=info.expected[m].convention)
        assert np.linalg.norm(back - w) / np.linalg.norm(w) < 0.13, p
