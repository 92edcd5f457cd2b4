"""Runs under the vLLM 0.32 overlay (tests/engines/overlays.py): one engine start that
re-records vLLM 0.32's plans into OUT/plans, writes what its own code reads from the
ModelOpt blocks the tests give it (OUT/modelopt.json), and what 0.32's own quant-config
classes build for every runtime module of the published-config copies (OUT/truth.json,
scripts/published_truth.py run under 0.32), and what the vLLM plugin does against 0.32's
classes (OUT/plugin.json, tests/integrations/plugin_checks.py).

    python -m tests.engines.vllm_032_probe OUT
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main(out: Path) -> int:
    from specguard.engines.vllm.recorder import torchvision_prelude

    torchvision_prelude()  # the torchvision overlay is on the path (Qwen3.5's plans): before vLLM imports it
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
    (out / "truth.json").write_text(json.dumps(published_truth()))
    (out / "plugin.json").write_text(json.dumps(plugin_on_032(out / "plugin-checkpoints")))
    return 0


def plugin_on_032(root: Path) -> dict:
    """The vLLM plugin against 0.32's own classes (tests/integrations/plugin_checks.py): its
    contract, S1's draft routed and loaded as stored, hostile checkpoints."""
    import os

    from specguard.engines.vllm import recorder
    from tests.integrations import plugin_checks

    os.environ.update(recorder.CPU_ENV)  # 0.32 on CPU: the V1 model runner, as the recorder runs it
    root.mkdir(parents=True, exist_ok=True)
    return plugin_checks.run_all(root)


def published_truth() -> dict:
    """name -> {runtime prefix: the method 0.32's real get_quant_method returns} (as truth.json)."""
    import importlib.util
    import tempfile

    root = Path(__file__).resolve().parents[2]
    spec = importlib.util.spec_from_file_location("published_truth", root / "scripts/published_truth.py")
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    sys.modules["published_truth"] = script
    spec.loader.exec_module(script)
    pub = script._published()
    with tempfile.TemporaryDirectory() as tmp:
        return {name: script.truth(name, pub.build(name, Path(tmp) / name, script.LAYERS))
                for name in sorted(set(pub.MODELS) - script.SKIP)}


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
