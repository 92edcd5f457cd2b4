"""The reference MoE loader reproduces vLLM 0.33's allocations and copy semantics.

(Tests for src/specguard/refdecoder/loader.py; kept beside the guard's tests, which
use the loader, because tests/refdecoder belongs to the engine's owner.)
"""

from __future__ import annotations

import pytest
import torch

from specguard.formats.scheme import BF16, MXFP4, NVFP4
from specguard.refdecoder.loader import (
    ExpertConfig,
    RoutedExperts,
    expert_prefix,
    fixed_routing,
    global_routing,
    load_checkpoint,
    read_tensors,
    resolver_routing,
)
from tests.guard.guard_facts import draft_layer, draft_params

E, H, INTER = 4, 64, 32


def _ckpt(path, name: str) -> torch.Tensor:
    return dict(read_tensors(path, lambda n: n == name))[name]


def test_parameter_sets_match_vllm_033():
    def spec(method: str) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
        layer = RoutedExperts(method, E, H, INTER)
        return {n: (tuple(p.shape), p.dtype) for n, p in layer.named_parameters()}

    u8, f32 = torch.uint8, torch.float32
    assert spec(NVFP4) == {
        "w13_weight": ((E, 2 * INTER, H // 2), u8),
        "w2_weight": ((E, H, INTER // 2), u8),
        "w13_weight_scale": ((E, 2 * INTER, H // 16), torch.float8_e4m3fn),
        "w2_weight_scale": ((E, H, INTER // 16), torch.float8_e4m3fn),
        "w13_weight_scale_2": ((E, 2), f32),
        "w2_weight_scale_2": ((E,), f32),
        "w13_input_scale": ((E, 2), f32),
        "w2_input_scale": ((E,), f32),
    }
    assert spec(MXFP4) == {
        "w13_weight": ((E, 2 * INTER, H // 2), u8),
        "w13_weight_scale": ((E, 2 * INTER, H // 32), u8),
        "w2_weight": ((E, H, INTER // 2), u8),
        "w2_weight_scale": ((E, H, INTER // 32), u8),
    }
    assert spec(BF16) == {
        "w13_weight": ((E, 2 * INTER, H), torch.bfloat16),
        "w2_weight": ((E, H, INTER), torch.bfloat16),
    }
    mx = RoutedExperts(MXFP4, E, H, INTER)
    assert all(int(p.count_nonzero()) == 0 for p in mx.parameters())  # torch.zeros, as vLLM


def test_global_routing_is_vllm_033s_rule(s1_dir):
    cfg = ExpertConfig.from_dir(s1_dir)
    draft = draft_layer(s1_dir)
    route = global_routing(cfg)
    assert cfg.ignored_layers == ("mtp.*",)  # matches no runtime prefix
    assert [route(expert_prefix(i)) for i in cfg.layers] == [NVFP4] * (draft + 1)
    exact = ExpertConfig(**{**cfg.__dict__, "ignored_layers": (expert_prefix(draft),)})
    assert global_routing(exact)(expert_prefix(draft)) == BF16  # exact match only
    mx = ExpertConfig(**{**cfg.__dict__, "moe_quant_algo": None})
    assert global_routing(mx)(expert_prefix(0)) == MXFP4
    with pytest.raises(ValueError, match="unsupported"):
        fixed_routing("int4")


def test_resolver_routes_the_draft_by_what_is_stored(s1_dir, s5_dir):
    draft = draft_layer(s1_dir)
    s1 = resolver_routing(s1_dir)
    assert [s1(expert_prefix(i)) for i in range(draft + 1)] == [NVFP4] * draft + [MXFP4]
    s5 = resolver_routing(s5_dir)
    assert s5(expert_prefix(draft)) == NVFP4  # stored NVFP4, only its scales are missing


def test_shards_land_where_vllm_puts_them(s1_dir):
    model, result = load_checkpoint(s1_dir, "resolver")
    inter = model.config.intermediate_size
    main = model.experts(1)
    w1 = _ckpt(s1_dir, "layers.1.ffn.experts.3.w1.weight")
    w3 = _ckpt(s1_dir, "layers.1.ffn.experts.3.w3.weight")
    w2 = _ckpt(s1_dir, "layers.1.ffn.experts.3.w2.weight")
    assert torch.equal(main.w13_weight[3, :inter], w1)
    assert torch.equal(main.w13_weight[3, inter:], w3)
    assert torch.equal(main.w2_weight[3], w2)
    s2_w1 = _ckpt(s1_dir, "layers.1.ffn.experts.3.w1.weight_scale_2")
    s2_w3 = _ckpt(s1_dir, "layers.1.ffn.experts.3.w3.weight_scale_2")
    assert main.w13_weight_scale_2[3].tolist() == [s2_w1.item(), s2_w3.item()]
    assert main.w2_input_scale[3] == _ckpt(s1_dir, "layers.1.ffn.experts.3.w2.input_scale")

    draft = model.experts(draft_layer(s1_dir))
    assert draft.method == MXFP4
    d_w1 = _ckpt(s1_dir, "mtp.0.ffn.experts.2.w1.weight")  # stored I8
    assert d_w1.dtype == torch.int8
    assert torch.equal(draft.w13_weight[2, :inter], d_w1.view(torch.uint8))  # same bytes
    e8m0 = _ckpt(s1_dir, "mtp.0.ffn.experts.2.w3.scale")
    assert e8m0.dtype == torch.float8_e8m0fnu
    assert torch.equal(draft.w13_weight_scale[2, inter:], e8m0.view(torch.uint8))  # raw bytes
    assert f"{draft_params(s1_dir)}.w13_weight_scale" in result.loaded


def test_global_routing_puts_e8m0_bytes_into_half_an_e4m3_slot(s1_dir):
    """vLLM narrows the E4M3 [I, H/16] slot to the stored [I, H/32] and copies
    the raw E8M0 bytes as numbers: 118 (=2^-9) becomes E4M3 120.0."""
    model, _ = load_checkpoint(s1_dir, "global")
    cfg = model.config
    draft = model.experts(draft_layer(s1_dir))
    assert draft.method == NVFP4
    e8m0 = _ckpt(s1_dir, "mtp.0.ffn.experts.1.w1.scale").view(torch.uint8)
    slot = draft.w13_weight_scale[1, : cfg.intermediate_size, : cfg.hidden_size // 32]
    assert torch.equal(slot, e8m0.float().to(torch.float8_e4m3fn))
    true_scales = torch.exp2(e8m0.float() - 127)
    assert (slot.float() / true_scales > 1e3).all()  # exponents read as magnitudes


def test_stored_nvfp4_routed_to_mxfp4_fails_like_vllm(s1_dir):
    with pytest.raises(KeyError, match=r"Mxfp4MoEMethod .* has no parameter w13_input_scale"):
        load_checkpoint(s1_dir, fixed_routing(MXFP4))


def test_ignored_layer_becomes_unquantized_and_cannot_take_scales(s1_dir):
    """S1's "fix" via ignored_layers: the draft gets the BF16 method, whose
    parameter set has no scales, so the MXFP4 `.scale` tensors have nowhere to go."""
    with pytest.raises(KeyError, match=r"UnquantizedFusedMoEMethod .* no parameter w13_weight_scale"):
        load_checkpoint(
            s1_dir, lambda p: BF16 if p == expert_prefix(draft_layer(s1_dir)) else NVFP4
        )
