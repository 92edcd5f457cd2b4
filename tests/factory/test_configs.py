"""config.json / hf_quant_config.json carry the keys each publisher writes."""

from __future__ import annotations

import json

import pytest


def _config(info, name: str = "config.json") -> dict:
    return json.loads((info.path / name).read_text())


def test_s1_config(written) -> None:
    cfg = _config(written["s1"])
    assert cfg["model_type"] == "deepseek_v4" and cfg["expert_dtype"] == "fp4"
    assert cfg["num_nextn_predict_layers"] == 1
    assert cfg["quantization_config"] == {
        "quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
        "scale_fmt": "ue8m0", "weight_block_size": [128, 128], "moe_quant_algo": "NVFP4",
        "ignored_layers": ["mtp.*"]}
    assert not (written["s1"].path / "hf_quant_config.json").exists()


def test_dspark_configs(written) -> None:
    for cfg in (_config(written["s1-dspark"]),
                json.loads((written["s4"].drafter_path / "config.json").read_text())):
        assert cfg["n_mtp_layers"] == 3 and cfg["dspark_target_layer_ids"] == [0, 1]
    assert _config(written["s4"])["num_nextn_predict_layers"] == 0


def test_s6_deepseek_v3_fp8_config(written) -> None:
    cfg = _config(written["s6"])
    assert cfg["model_type"] == "deepseek_v3"
    assert cfg["quantization_config"] == {"quant_method": "fp8", "fmt": "e4m3",
                                          "activation_scheme": "dynamic",
                                          "weight_block_size": [128, 128]}


def test_s2_is_what_compressed_tensors_writes(written) -> None:
    ct = pytest.importorskip("compressed_tensors")
    from compressed_tensors.quantization import QuantizationConfig, preset_name_to_scheme

    q = _config(written["s2"])["quantization_config"]
    assert q["quant_method"] == "compressed-tensors" and q["version"] == ct.__version__
    assert q["ignore"] == ["lm_head", r"re:.*mtp\..*"]
    # experts by a per-expert regex, every other Linear by class: the regex wins in
    # compressed-tensors' match_targets and in vLLM's find_matched_target
    assert q["config_groups"]["group_0"]["targets"] == [r"re:.*ffn\.experts\.\d+\.w[123]$"]
    assert q["config_groups"]["group_1"]["targets"] == ["Linear"]
    groups = {}
    for gname, preset, fmt in (("group_0", "NVFP4", "nvfp4-pack-quantized"),
                               ("group_1", "FP8_BLOCK", "float-quantized")):
        scheme = preset_name_to_scheme(preset, q["config_groups"][gname]["targets"])
        scheme.format = fmt
        groups[gname] = scheme
    theirs = QuantizationConfig(config_groups=groups, ignore=q["ignore"],
                                format="mixed-precision", quantization_status="compressed")
    ours = {k: v for k, v in q.items()
            if k not in ("version", "quant_method", "sparsity_config", "transform_config")}
    assert ours == json.loads(json.dumps(theirs.model_dump(exclude=["quant_method"])))
    assert QuantizationConfig.model_validate(ours).config_groups["group_0"].weights.group_size == 16


def test_s8_nvfp4_modelopt_files(written) -> None:
    info = written["s8-nvfp4"]
    hf = _config(info, "hf_quant_config.json")
    assert hf["producer"]["name"] == "modelopt"
    assert hf["quantization"]["quant_algo"] == "NVFP4" and hf["quantization"]["group_size"] == 16
    assert "lm_head" in hf["quantization"]["exclude_modules"]
    assert "model.layers.2.eh_proj" in hf["quantization"]["exclude_modules"]
    # the MTP head: the checkpoint's shared_head.head and vLLM's model.layers.2.head
    assert "model.layers.2.*head" in hf["quantization"]["exclude_modules"]
    q = _config(info)["quantization_config"]
    assert q["quant_method"] == "modelopt" and q["quant_algo"] == "NVFP4"
    assert q["ignore"] == hf["quantization"]["exclude_modules"]
    assert q["config_groups"]["group_0"]["weights"]["group_size"] == 16


def test_vllm_parses_every_quantization_config(written) -> None:
    """The consumer's own parsers accept what the factory writes (vLLM 0.33)."""
    pytest.importorskip("vllm")
    from vllm.model_executor.layers.quantization.fp8 import Fp8Config
    from vllm.model_executor.layers.quantization.modelopt import ModelOptNvFp4Config
    from vllm.models.deepseek_v4.quant_config import DeepseekV4FP8Config

    mo = written["s8-nvfp4"]
    for cfg in (_config(mo)["quantization_config"], _config(mo, "hf_quant_config.json")):
        parsed = ModelOptNvFp4Config.from_config(cfg)
        assert parsed.group_size == 16 and "lm_head" in parsed.exclude_modules
    assert DeepseekV4FP8Config.from_config(
        _config(written["s1"])["quantization_config"]).ignored_layers == ["mtp.*"]
    for name in ("s3", "s3-fp8", "s1-dspark", "s5", "s7"):
        q = DeepseekV4FP8Config.from_config(_config(written[name])["quantization_config"])
        assert q.weight_block_size == [128, 128]
    assert Fp8Config.from_config(_config(written["s6"])["quantization_config"]).weight_block_size \
        == [128, 128]


def test_v4_configs_route_with_the_gate_bias_they_store(written) -> None:
    """Every V4 scenario stores ``ffn.gate.bias``; vLLM creates its parameter only
    for ``topk_method: noaux_tc`` (deepseek_v4 model.py), as DeepSeek's configs set it."""
    for name, info in written.items():
        for path in filter(None, (info.path, info.drafter_path)):
            cfg = json.loads((path / "config.json").read_text())
            has_bias = any(t.endswith(".gate.bias") for t in json.loads(
                (path / "model.safetensors.index.json").read_text())["weight_map"])
            if cfg["model_type"] == "deepseek_v4":
                assert has_bias, name
            if has_bias or cfg["model_type"] == "deepseek_v3":
                assert cfg["topk_method"] == "noaux_tc", name


def test_vllm_excludes_the_s8_nvfp4_mtp_head(written) -> None:
    """vLLM's own ModelOpt matching excludes the MTP head where it builds it."""
    pytest.importorskip("vllm")
    from vllm.model_executor.layers.quantization.modelopt import ModelOptNvFp4Config

    info = written["s8-nvfp4"]
    n = info.facts["num_hidden_layers"]
    for cfg in (_config(info)["quantization_config"], _config(info, "hf_quant_config.json")):
        q = ModelOptNvFp4Config.from_config(cfg)
        assert q.is_layer_excluded(f"model.layers.{n}.head")
        assert q.is_layer_excluded(f"model.layers.{n}.eh_proj")
        assert not q.is_layer_excluded(f"model.layers.{n}.mlp.experts")
        assert not q.is_layer_excluded(f"model.layers.{n}.mlp.shared_experts.gate_up_proj")
