"""The plugin under the quant stacks of published draft families (issue 27 item 5): GLM-4.7's
``ModelOptNvFp4Config`` and Qwen3-Next's ``Fp8Config``, on sparse copies of their published
configs (tests/data/published/) whose MTP layer is stored BF16 and not excluded.

vLLM 0.33's own quant config (the class and ``from_config`` vLLM picks, configured with the model
class's packed-module mapping, as scripts/published_truth.py builds it; its truth.json records
``ModelOptLinearMethod`` / ``Fp8LinearMethod`` for these draft linears) builds a real
``ReplicatedLinear`` at each draft linear's runtime prefix; with the plugin each gets
``UnquantizedLinearMethod``, the format its bytes are stored in.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from specguard.integrations.vllm import installed, routing
from specguard.integrations.vllm.hooks import SOURCE_ATTR
from specguard.resolve import Resolver
from tests.integrations import vllm_harness as H

CASES = {"glm-4.7-nvfp4-mtp-not-excluded": "ModelOptLinearMethod",
         "qwen3-next-fp8-mtp-bf16-not-excluded": "Fp8LinearMethod"}


def _quant_config(path: Path) -> Any:
    """vLLM's quant config for the copy, as scripts/published_truth.py (and vLLM) build it:
    config.json's block, else hf_quant_config.json as ModelOpt."""
    from types import SimpleNamespace as NS

    from vllm.model_executor.model_loader.utils import configure_quant_config
    from vllm.model_executor.models.registry import ModelRegistry

    from tests.lint.test_published_truth import truth_script

    cfg = json.loads((path / "config.json").read_text())
    hq = path / "hf_quant_config.json"
    qc = cfg.get("quantization_config") or {"quant_method": "modelopt", **json.loads(hq.read_text())}
    hf = NS(**cfg)
    model_cls, _ = ModelRegistry.resolve_model_cls(cfg["architectures"], model_config=NS(
        hf_config=hf, hf_text_config=hf, architectures=cfg["architectures"], runner_type="generate",
        convert_type="none", model_impl="auto", is_hybrid=False))
    quant = truth_script.quant_config_class(qc, hf).from_config(dict(qc))
    configure_quant_config(quant, model_cls)
    setattr(quant, SOURCE_ATTR, str(path))  # as the plugin's VllmConfig patch tags it
    return quant


def _linear(quant: Any, prefix: str) -> str:
    from vllm.model_executor.layers.linear import ReplicatedLinear

    layer = ReplicatedLinear(64, 64, bias=False, quant_config=quant, prefix=prefix)  # shape: routing ignores it
    return H.method_name(layer)


@pytest.mark.parametrize("name", sorted(CASES))
def test_plugin_routes_the_bf16_draft_linears_as_stored(name: str, ckpt_root: Path, s1_mtp: Any) -> None:
    from vllm.config import set_current_vllm_config

    from tests.lint.test_published_truth import published, truth_script

    path = published.build(name, ckpt_root / "published" / name, truth_script.LAYERS)
    truth = json.loads((Path(truth_script.DATA) / name / "truth.json").read_text())
    drafts = [rt.prefix for rt in Resolver.open(path).routes()
              if rt.kind == "linear" and rt.verdict == "misrouted"]
    assert drafts and {truth[p] for p in drafts} == {CASES[name]}  # vLLM's own choice, over BF16 bytes
    quant = _quant_config(path)
    routing.take_decisions()
    with set_current_vllm_config(s1_mtp), installed():  # any VllmConfig: the quant config is tagged
        built = {p: _linear(quant, p) for p in drafts}
    assert set(built.values()) == {"UnquantizedLinearMethod"}, built
    decisions = routing.take_decisions()
    assert {(d.prefix, d.stored, d.routed) for d in decisions} == {(p, "bf16", "unquantized") for p in drafts}
