"""What vLLM 0.32.0 builds: vLLM 0.33's model (v0_33.py) less what 0.33 added.

Diffed file by file against 0.33.0 (docs/engines.md "vLLM 0.32 vs 0.33"); the two
differences that change a build, both in vllm 0.32.0 site-packages:

- ``models/deepseek_v4/amd/mtp.py`` never calls ``align_mtp_quant_config`` (0.32 has
  no such function): the MTP draft's ignore entries stay ``model.mtp.{i}.*`` on ROCm
  too, where no draft layer is built.
- ``model_executor/layers/quantization/modelopt.py ModelOptQuantConfigBase.from_config``:
  a ModelOpt block in config.json (``quant_method: modelopt``) is read for ``ignore``
  only (0.33: ``ignore``, else ``exclude_modules``); hf_quant_config.json's
  ``quantization.exclude_modules`` is read by both.

Everything else that decides a build (quant-config classes and their choice per
platform, DeepSeek-V4/V4.1 ``get_quant_method``, the MTP/DSpark/Qwen3.5 MTP model
classes and name mappers) is the same; the per-architecture build plans are
recorded from 0.32 itself (plans/vllm-0.32/).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from specguard.declared import parse_declared
from specguard.engines.vllm.v0_33 import Vllm033

ENGINE = "vLLM 0.32"
PLAN_ENGINE = "vllm-0.32"


def modelopt_as_read(config: Mapping[str, Any]) -> Mapping[str, Any]:
    """``config`` as vLLM 0.32 reads its ModelOpt block: ``exclude_modules`` dropped where
    ``ignore`` is absent (``from_config``: ``config.get("ignore", [])``)."""
    qc = config.get("quantization_config")
    if not isinstance(qc, Mapping) or str(qc.get("quant_method") or "").lower() != "modelopt":
        return config
    if "ignore" in qc or "exclude_modules" not in qc:
        return config
    return {**config, "quantization_config": {k: v for k, v in qc.items() if k != "exclude_modules"}}


class Vllm032(Vllm033):
    """vLLM 0.32.0's routing for one target checkpoint (and its draft)."""

    name = ENGINE
    plan_engine = PLAN_ENGINE
    realigns_mtp_on_rocm = False
    reads_config_json_exclude_modules = False
    deepseek_v4_mxfp4_activation = None  # Mxfp4MoEMethod(layer.moe_config): no activation key

    def __init__(self, config: Mapping[str, Any], hf_quant_config: Mapping[str, Any] | None = None,
                 **options: Any) -> None:
        super().__init__(config, hf_quant_config, **options)
        as_read = modelopt_as_read(config)
        if as_read is not config:
            self.declared = parse_declared(as_read, hf_quant_config)
        draft_config = options.get("draft_config")
        if draft_config is None:
            self.draft_declared = self.declared
        elif modelopt_as_read(draft_config) is not draft_config:
            self.draft_declared = parse_declared(modelopt_as_read(draft_config), options.get("draft_hf_quant_config"))


__all__ = ["ENGINE", "PLAN_ENGINE", "Vllm032", "modelopt_as_read"]
