"""Issue 19's loader facts, on vLLM 0.33's own functions and layers (CPU).

- ``filter_duplicate_safetensors_files`` drops a drafter file the index never names
  (SG303's premise), and AutoGPTQ's ``maybe_update_config`` still sees it (a glob):
  specguard's header scan lists the same modules vLLM does.
- ``RoutedExperts.load_weights`` on expert names with the index after the projection:
  SG702's model of the loader (``vllm033_loader.expert_load``) against the real layer.
"""

from __future__ import annotations

import glob
import json
import os

import pytest
import torch
from vllm.model_executor.layers.quantization.auto_gptq import AutoGPTQConfig
from vllm.model_executor.model_loader.weight_utils import filter_duplicate_safetensors_files

from specguard.engines.vllm.loader import FAILS, MAPPED, SKIPPED, expert_load
from specguard.resolve import Resolver
from tests.integrations import vllm_harness


@pytest.mark.parametrize(("name", "kept"), [("q2", False), ("q0", True)])
def test_vllm_reads_only_the_files_the_index_names(scenarios, name, kept):
    d = str(scenarios[name].path)
    files = glob.glob(os.path.join(d, "*.safetensors"))
    left = filter_duplicate_safetensors_files(files, d, "model.safetensors.index.json")
    assert (os.path.join(d, "model_extra_tensors.safetensors") in left) is kept
    assert len(left) == len(files) - (0 if kept else 1)


@pytest.mark.parametrize("name", ["q1-dense", "q2", "q3", "q4"])
def test_header_scan_is_the_one_vllm_makes(scenarios, name):
    d = scenarios[name].path
    qc = json.loads((d / "config.json").read_text())["quantization_config"]
    cfg = AutoGPTQConfig.from_config(dict(qc))
    cfg.maybe_update_config(str(d))
    Resolver.clear_cache()
    ours = Resolver.open(d).vllm.gptq_quantized_layers()
    assert sorted(cfg.modules_in_block_to_quantize) == ours
    assert any(m.startswith("mtp.") for m in ours) == (name in ("q3", "q4"))


NAMES = ["1.w2.weight", "w2.1.weight", "w1.1.weight", "1.w1.weight", "w3.2.weight", "2.w3.weight",
         "w2.3.weight_scale", "0.w2.weight"]


def test_expert_name_model_matches_the_real_routed_experts_loader(s8_mtp):
    moe = vllm_harness.build_moe(s8_mtp, None, "model.layers.2.ffn")
    experts = vllm_harness.routed_experts(moe)
    for name in NAMES:
        w = experts.w2_weight if ".w2." in f".{name}" or name.startswith("w2") else experts.w13_weight
        shape = (w.shape[1], w.shape[2]) if w is experts.w2_weight else (w.shape[1] // 2, w.shape[2])
        model = expert_load(name)
        try:
            loaded = list(experts.load_weights([(name, torch.zeros(shape, dtype=w.dtype))]))
        except AttributeError as exc:
            assert model.outcome == FAILS and repr(model.parameter) in str(exc), name
            continue
        assert model.outcome == (MAPPED if loaded else SKIPPED), name
        if loaded:
            assert loaded == [model.parameter], name
