"""Scenarios q1 (a GPTQ ``dynamic`` rule claims a BF16 drafter 4-bit) and q2 (the drafter
in a file the index never names) through vLLM 0.33's real ``AutoGPTQConfig``,
``RoutedExperts`` and ``DefaultModelLoader`` on CPU, without and with the plugin.

The experts layer is built by vLLM's ``FusedMoEFactory`` at the drafter's quant
prefix (``mtp.layers.0.mlp.experts``, as qwen3_5_mtp.py builds it) with the
checkpoint's own quant config; the tensors are q1's, read with the safetensors
library, and fed to the layer's own ``load_weights`` under the names the drafter's
loader hands it (``mtp.layers.0.mlp.experts.`` stripped).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors import safe_open

from specguard.guard import LoadGuard
from specguard.integrations.vllm import routing
from specguard.integrations.vllm.hooks import SOURCE_ATTR
from tests.integrations import vllm_harness as H

PREFIX = "mtp.layers.0.mlp.experts"


def _experts(vllm_config: Any, ckpt: Path) -> Any:
    """vLLM's routed-experts layer for the drafter, built with ``ckpt``'s GPTQ config."""
    from vllm.config import set_current_vllm_config
    from vllm.model_executor.layers.fused_moe.layer import FusedMoEFactory
    from vllm.model_executor.layers.quantization.auto_gptq import AutoGPTQConfig

    text = json.loads((ckpt / "config.json").read_text())
    quant = AutoGPTQConfig.from_config(dict(text["quantization_config"]))
    setattr(quant, SOURCE_ATTR, str(ckpt))  # as the plugin's config hook tags it
    t = text["text_config"]
    cfg = H.with_quant_config(vllm_config, quant)
    cfg.compilation_config.static_forward_context.clear()
    with set_current_vllm_config(cfg):
        runner = FusedMoEFactory(num_experts=t["num_experts"], top_k=t["num_experts_per_tok"],
                                 hidden_size=t["hidden_size"], intermediate_size=t["moe_intermediate_size"],
                                 quant_config=quant, prefix=PREFIX)
    return H.routed_experts(runner)


def _draft_experts(ckpt: Path) -> dict[str, torch.Tensor]:
    out = {}
    with safe_open(str(ckpt / "model_extra_tensors.safetensors"), framework="pt") as f:
        for k in f.keys():  # noqa: SIM118
            if k.startswith(PREFIX + "."):
                out[k.removeprefix(PREFIX + ".")] = f.get_tensor(k)
    return out


@pytest.fixture(scope="module")
def q1(scenarios) -> Path:
    return scenarios["q1"].path


def test_before_gptq_experts_are_built_and_the_load_fails(s8_mtp: Any, q1: Path) -> None:
    experts = _experts(s8_mtp, q1)
    assert type(experts.quant_method).__name__ == "AutoGPTQMoEMethod"
    assert "w2_qweight" in dict(experts.named_parameters())
    with pytest.raises(AttributeError, match="no parameter 'w2_weight'"):
        list(experts.load_weights(sorted(_draft_experts(q1).items())))


def test_after_the_plugin_builds_them_as_stored_and_loads_every_parameter(s8_mtp: Any, q1: Path, plugin) -> None:
    experts = _experts(s8_mtp, q1)
    assert type(experts.quant_method).__name__ == "UnquantizedFusedMoEMethod"
    (d,) = [d for d in routing.take_decisions() if d.prefix == PREFIX]
    assert (d.stored, d.vllm, d.routed, d.role) == ("bf16", "int4_group", "unquantized", "draft")
    tensors = _draft_experts(q1)
    with LoadGuard(experts, policy="raise"):  # raises naming any parameter the load left unwritten
        loaded = set(experts.load_weights(sorted(tensors.items())))
    assert loaded == {"w13_weight", "w2_weight"}
    for e in range(experts.w2_weight.shape[0]):
        assert torch.equal(experts.w2_weight[e], tensors[f"{e}.down_proj.weight"])
        assert torch.equal(experts.w13_weight[e], torch.cat([tensors[f"{e}.gate_proj.weight"],
                                                              tensors[f"{e}.up_proj.weight"]]))


def test_a_negative_rule_is_vllms_own_answer_and_the_plugin_keeps_it(s8_mtp: Any, scenarios, plugin) -> None:
    experts = _experts(s8_mtp, scenarios["q0"].path)
    assert type(experts.quant_method).__name__ == "UnquantizedFusedMoEMethod"
    assert not [d for d in routing.take_decisions() if d.prefix == PREFIX]


def _filter(folder: Path) -> list[str]:
    """vLLM's ``DefaultModelLoader._prepare_weights`` step, called as it calls it."""
    from vllm.model_executor.model_loader import default_loader

    files = [str(p) for p in sorted(folder.glob("*.safetensors"))]
    return default_loader.filter_duplicate_safetensors_files(files, str(folder), "model.safetensors.index.json")


def test_a_draft_load_reads_the_file_the_index_never_names(scenarios, plugin) -> None:
    from specguard.integrations.vllm import loading

    q2 = scenarios["q2"].path
    extra = str(q2 / "model_extra_tensors.safetensors")
    assert extra not in _filter(q2)  # the target's load: vLLM's answer
    with loading.draft_load(str(q2)):
        assert extra in _filter(q2)
        assert str(scenarios["q0"].path / "model_extra_tensors.safetensors") in _filter(scenarios["q0"].path)


def test_without_the_plugin_the_drafter_file_is_dropped(scenarios) -> None:
    from specguard.integrations.vllm import loading

    q2 = scenarios["q2"].path
    with loading.draft_load(str(q2)):
        assert str(q2 / "model_extra_tensors.safetensors") not in _filter(q2)


class _DrafterExperts(torch.nn.Module):
    """vLLM's routed-experts layer of the drafter, fed by the drafter's loader rule:
    qwen3_5_mtp.py keeps ``mtp.*`` names and hands ``mtp.layers.0.mlp.experts.*`` to the
    layer (the rest of the drafter is not built here)."""

    def __init__(self, experts: Any) -> None:
        super().__init__()
        self.experts = experts

    def load_weights(self, weights: Any) -> set[str]:
        # AutoWeightsLoader drops ``.g_idx`` first (QuantizationConfig.get_checkpoint_weight_mapper)
        mine = ((n.removeprefix(PREFIX + "."), w) for n, w in weights
                if n.startswith(PREFIX + ".") and not n.endswith(".g_idx"))
        return {f"experts.{p}" for p in self.experts.load_weights(mine)}


def _draft_model_config(vllm_config: Any, ckpt: Path) -> Any:
    """The draft's ModelConfig as vLLM's loader reads it, pointed at ``ckpt`` (a quantized one)."""
    import copy

    draft = copy.copy(vllm_config.speculative_config.draft_model_config)
    object.__setattr__(draft, "model", str(ckpt))
    object.__setattr__(draft, "quantization", "auto_gptq")
    return draft


def _load(vllm_config: Any, model: Any, draft: Any) -> None:
    from vllm.config import set_current_vllm_config
    from vllm.model_executor.model_loader import DefaultModelLoader

    with set_current_vllm_config(vllm_config):
        DefaultModelLoader(vllm_config.load_config).load_weights(model, draft)


def test_q2_without_the_plugin_the_drafter_loads_nothing_and_nobody_says(s8_mtp: Any, scenarios) -> None:
    q2 = scenarios["q2"].path
    model = _DrafterExperts(_experts(s8_mtp, q2))
    guard = LoadGuard(model, policy="report")
    with guard:
        _load(s8_mtp, model, _draft_model_config(s8_mtp, q2))  # vLLM raises nothing
    assert set(guard.report.names()) == {"experts.w13_weight", "experts.w2_weight"}


def test_q2_with_the_plugin_the_drafter_loads_under_loadguard(s8_mtp: Any, scenarios, plugin) -> None:
    from specguard.integrations.vllm import loading

    q2 = scenarios["q2"].path
    model = _DrafterExperts(_experts(s8_mtp, q2))
    with loading.draft_load(str(q2)):  # as the plugin's load_model wrapper marks a draft load
        _load(s8_mtp, model, _draft_model_config(s8_mtp, q2))  # DraftGuard: raises if anything is unwritten
    tensors = _draft_experts(q2)
    assert torch.equal(model.experts.w2_weight[1], tensors["1.down_proj.weight"])


@pytest.mark.parametrize("name", ["q1", "q2"])
def test_the_repaired_checkpoint_loads_completely_in_stock_vllm(s8_mtp: Any, scenarios, tmp_path: Path,
                                                                name: str) -> None:
    """``specguard fix`` output, no plugin: vLLM's own AutoGPTQConfig builds the draft experts
    as stored and its own loader fills every parameter (LoadGuard, raise)."""
    from specguard.cli import main

    out = tmp_path / name
    assert main(["fix", str(scenarios[name].path), "--out", str(out)]) == 0
    model = _DrafterExperts(_experts(s8_mtp, out))
    assert type(model.experts.quant_method).__name__ == "UnquantizedFusedMoEMethod"
    with LoadGuard(model, policy="raise"):
        _load(s8_mtp, model, _draft_model_config(s8_mtp, out))
    tensors = _draft_experts(out)
    assert torch.equal(model.experts.w2_weight[3], tensors["3.down_proj.weight"])


def test_the_repaired_q3_loads_its_gptq_experts_in_stock_vllm_and_under_the_plugin(
        s8_mtp: Any, scenarios, tmp_path: Path) -> None:
    """q3 repaired (per-expert names): vLLM's GPTQ MoE method takes every stored tensor; its
    bias slots, which vLLM drops when no checkpoint fills them, are the only ones left."""
    from specguard.cli import main
    from specguard.integrations.vllm import installed, loading

    out = tmp_path / "q3"
    assert main(["fix", str(scenarios["q3"].path), "--out", str(out)]) == 0
    model = _DrafterExperts(_experts(s8_mtp, out))
    assert type(model.experts.quant_method).__name__ == "AutoGPTQMoEMethod"
    guard = LoadGuard(model, policy="report")
    with guard:
        _load(s8_mtp, model, _draft_model_config(s8_mtp, out))
    assert set(guard.report.names()) == set(loading.optional_parameters(model))
    with installed():  # the plugin's DraftGuard (raise) over the same load
        model = _DrafterExperts(_experts(s8_mtp, out))
        with loading.draft_load(str(out)):
            _load(s8_mtp, model, _draft_model_config(s8_mtp, out))


def test_q3_as_published_fails_in_stock_vllm(s8_mtp: Any, scenarios) -> None:
    q3 = scenarios["q3"].path
    model = _DrafterExperts(_experts(s8_mtp, q3))
    with pytest.raises(AttributeError, match=r"no parameter 'w2_weight\.0\.qweight'"):
        _load(s8_mtp, model, _draft_model_config(s8_mtp, q3))
