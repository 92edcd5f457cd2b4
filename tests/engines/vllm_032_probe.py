"""Runs under the vLLM 0.32 overlay (tests/engines/overlays.py): one engine start that
re-records vLLM 0.32's plans into OUT/plans and writes what its own code reads from the
ModelOpt blocks the tests give it (OUT/modelopt.json).

    python -m tests.engines.vllm_032_probe OUT
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main(out: Path) -> int:
    import vllm
    from vllm.model_executor.layers.quantization.modelopt import ModelOptNvFp4Config

    from specguard.engines.vllm.recorder import ENGINE, record_all

    blocks = {
        "exclude_modules": {"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16,
                            "exclude_modules": ["lm_head", "model.layers.0.self_attn*"]},
        "ignore": {"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16,
                   "ignore": ["lm_head", "model.layers.0.self_attn*"]},
    }
    from vllm.models.deepseek_v4 import quant_config as v4_quant_config

    facts = {"vllm": vllm.__version__, "recorder_engine": ENGINE,
             "align_mtp_quant_config": hasattr(v4_quant_config, "align_mtp_quant_config"),
             "exclude_modules": {k: list(ModelOptNvFp4Config.from_config(b).exclude_modules)
                                 for k, b in blocks.items()}}
    (out / "modelopt.json").write_text(json.dumps(facts))
    failed = record_all(out / "plans")
    (out / "failed.json").write_text(json.dumps(failed))
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
