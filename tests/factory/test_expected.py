"""Each scenario's expected map and facts say what docs/scenarios.md describes."""

from __future__ import annotations

from collections import Counter

from specguard.formats.scheme import (
    BF16,
    COMPRESSED_TENSORS,
    DEEPSEEK,
    FP8_BLOCK,
    MODELOPT,
    MXFP4,
    NVFP4,
)


def _formats(expected, pred) -> Counter:
    return Counter(e.format for m, e in expected.items() if pred(m, e))


def _experts(m: str) -> bool:
    return ".experts." in m


def test_s1_main_experts_nvfp4_draft_experts_mxfp4(written) -> None:
    exp = written["s1"].expected
    main = _formats(exp, lambda m, e: _experts(m) and e.role == "main")
    draft = _formats(exp, lambda m, e: _experts(m) and e.role == "draft")
    assert main == Counter({NVFP4: 2 * 4 * 3}) and draft == Counter({MXFP4: 4 * 3})
    w1 = exp["mtp.0.ffn.experts.3.w1"]
    assert w1.scheme.convention == DEEPSEEK and w1.scheme.group_size == 32
    assert w1.tensors == {"weight": ("I8", (128, 128)), "scale": ("F8_E8M0", (128, 8))}
    main_w1 = exp["layers.1.ffn.experts.3.w1"]
    assert main_w1.tensors == {"weight": ("U8", (128, 128)), "weight_scale": ("F8_E4M3", (128, 16)),
                               "weight_scale_2": ("F32", ()), "input_scale": ("F32", ())}
    for m in ("layers.0.attn.wq_a", "mtp.0.e_proj", "mtp.0.h_proj", "layers.1.ffn.shared_experts.w2"):
        assert exp[m].format == FP8_BLOCK and exp[m].tensors["scale"][0] == "F8_E8M0"
    assert exp["embed"].role == "embedding" and exp["head"].role == "head"
    assert all(e.role == "draft" for m, e in exp.items() if m.startswith("mtp."))
    assert all(e.role != "draft" for m, e in exp.items() if not m.startswith("mtp."))


def test_s1_variants(written) -> None:
    dspark = written["s1-dspark"].expected
    assert {m.split(".")[1] for m in dspark if m.startswith("mtp.")} == {"0", "1", "2"}
    assert dspark["mtp.0.main_proj"].format == FP8_BLOCK
    assert dspark["mtp.0.main_proj"].tensors["weight"][1] == (256, 512)
    u8 = written["s1-u8"].expected["mtp.0.ffn.experts.0.w2"]
    assert u8.format == MXFP4 and u8.scheme.scale_dtype == "U8" and u8.scheme.weight_dtype == "U8"


def test_s2_compressed_tensors_target_bf16_mtp(written) -> None:
    info = written["s2"]
    exp = info.expected
    assert _formats(exp, lambda m, e: e.role == "draft") == Counter(
        {BF16: sum(1 for e in exp.values() if e.role == "draft")})
    e = exp["layers.0.ffn.experts.1.w3"]
    assert e.format == NVFP4 and e.scheme.convention == COMPRESSED_TENSORS
    assert set(e.tensors) == {"weight_packed", "weight_scale", "weight_global_scale",
                              "input_global_scale"}
    assert e.tensors["weight_global_scale"] == ("F32", (1,))
    a = exp["layers.1.attn.wo_b"]
    assert a.format == FP8_BLOCK and a.tensors["weight_scale"] == ("BF16", (2, 2))
    assert (info.path / "model_mtp.safetensors").is_file()
    assert all(not any(t.startswith("mtp.") for t in [n]) for n in info.tensors
               if n.startswith("layers."))


def test_s3_everything_quantized_as_declared(written) -> None:
    exp = written["s3"].expected
    draft = _formats(exp, lambda m, e: e.role == "draft" and e.quantized)
    main = _formats(exp, lambda m, e: e.role == "main" and e.quantized)
    assert set(draft) == set(main) == {FP8_BLOCK, MXFP4}
    fp8 = written["s3-fp8"].expected
    assert fp8["mtp.0.ffn.experts.0.w1"].format == FP8_BLOCK
    assert fp8["mtp.0.ffn.experts.0.w1"].tensors["scale"] == ("F32", (1, 2))


def test_s4_separate_drafter(written) -> None:
    info = written["s4"]
    assert info.drafter_path is not None and info.drafter_path != info.path
    assert all(e.role != "draft" for e in info.expected.values())
    assert info.drafter_expected and all(e.role == "draft" for e in info.drafter_expected.values())
    assert info.drafter_expected["mtp.2.ffn.experts.0.w1"].format == MXFP4
    assert info.expected["layers.0.ffn.experts.0.w1"].format == NVFP4
    assert info.facts["separate_drafter"] is True


def test_s5_missing_per_tensor_scales(written) -> None:
    exp = written["s5"].expected
    draft = {m: e for m, e in exp.items() if _experts(m) and e.role == "draft"}
    assert len(draft) == 12
    for e in draft.values():
        assert e.format == NVFP4 and e.scheme.convention == MODELOPT
        assert e.missing == ("weight_scale_2", "input_scale")
        assert set(e.tensors) == {"weight", "weight_scale"}
    assert all(not e.missing for m, e in exp.items() if e.role != "draft")


def test_s6_v3_names_and_edge_block(written) -> None:
    info = written["s6"]
    exp = info.expected
    n = info.facts["num_hidden_layers"]
    assert exp[f"model.layers.{n}.eh_proj"].role == "draft"
    assert exp[f"model.layers.{n}.shared_head.head"].role == "draft"
    # vLLM builds the V3 MTP eh_proj as a plain nn.Linear: DeepSeek stores it BF16
    assert exp[f"model.layers.{n}.eh_proj"].format == BF16
    assert exp[f"model.layers.{n}.shared_head.head"].format == BF16
    assert exp[f"model.layers.{n}.self_attn.o_proj"].format == FP8_BLOCK
    kv = exp["model.layers.0.self_attn.kv_a_proj_with_mqa"]
    assert kv.tensors == {"weight": ("F8_E4M3", (192, 256)), "weight_scale_inv": ("F32", (2, 2))}


def test_s7_declares_a_draft_it_does_not_hold(written) -> None:
    info = written["s7"]
    assert info.facts["draft_layers_declared"] == 1 and info.facts["draft_layers_stored"] == 0
    assert not info.draft_modules()


def test_s8_clean_references(written) -> None:
    assert {e.format for e in written["s8"].expected.values()} == {BF16}
    exp = written["s8-nvfp4"].expected
    n = written["s8-nvfp4"].facts["num_hidden_layers"]
    assert exp[f"model.layers.{n}.mlp.experts.0.down_proj"].format == NVFP4
    assert exp["model.layers.1.mlp.experts.0.down_proj"].format == NVFP4
    assert exp[f"model.layers.{n}.self_attn.o_proj"].format == BF16
