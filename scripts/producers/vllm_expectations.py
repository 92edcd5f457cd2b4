#!/usr/bin/env python3
"""What vLLM 0.33 does with each producer fixture, recorded as ``vllm.json`` beside it.

Runs vLLM's own start-up and load path on CPU, with the project's venv:
``EngineArgs.create_engine_config`` (where ``ModelConfig._verify_quantization``
refuses unknown ``quant_method`` values), ``initialize_model`` (every layer
asks the quant config for its method, as when serving), and
``DefaultModelLoader.load_weights`` (the model's ``load_weights`` and each
parameter's weight loader). The first exception is recorded with its stage;
when the model loads, the quant method every layer got is recorded.

Only kernel-availability checks are bent (tests/integrations/vllm_harness.py
``cpu_kernel_checks_off`` plus CPUWNA16's output-size check, which the tiny
model's 4-expert router fails on CPU only); no routing decision is changed and
no kernel runs.

    PYTHONPATH=src:/tmp/ao13 .venv/bin/python scripts/producers/vllm_expectations.py [NAME ...]

torchao checkpoints need torchao importable (vLLM imports it to read the
config); /tmp/ao13 is ``pip install --no-deps --target /tmp/ao13 torchao==0.18.0``
(the producers' version), kept out of the project's venv. Each fixture runs in
a child process (vLLM keeps global state per model).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from contextlib import ExitStack, suppress
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
DATA = REPO / "tests" / "data" / "producers"


def _first_line(e: BaseException) -> str:
    text = " ".join(str(e).split())
    return f"{type(e).__name__}: {text[:300]}"


def _where(e: BaseException) -> dict[str, str]:
    """The vLLM layer/parameter being loaded when ``e`` was raised (from the frames)."""
    out: dict[str, str] = {}
    tb = e.__traceback__
    while tb is not None:
        loc = tb.tb_frame.f_locals
        for key in ("prefix", "name", "weight_name", "shard_id"):
            if isinstance(loc.get(key), (str, int)):
                out[key] = str(loc[key])
        tb = tb.tb_next
    return out


def run_one(path: Path) -> dict:
    for key, value in {"VLLM_TARGET_DEVICE": "cpu", "VLLM_PLUGINS": "",
                       "VLLM_USE_V2_MODEL_RUNNER": "1"}.items():
        os.environ[key] = value
    sys.path.insert(0, str(REPO))
    import importlib.metadata

    import torch
    from vllm.config import set_current_vllm_config
    from vllm.engine.arg_utils import EngineArgs
    from vllm.model_executor.kernels.linear.mixed_precision.cpu import CPUWNA16LinearKernel
    from vllm.model_executor.model_loader import get_model_loader
    from vllm.model_executor.model_loader.utils import initialize_model

    from tests.integrations import vllm_harness as H

    rec: dict = {"vllm": importlib.metadata.version("vllm"), "device": "cpu (kernel checks bent)"}
    with suppress(importlib.metadata.PackageNotFoundError):
        rec["torchao"] = importlib.metadata.version("torchao")
    stage = "config"
    try:
        cfg = EngineArgs(model=str(path), skip_tokenizer_init=True, enforce_eager=True).create_engine_config()
        rec["quantization"] = cfg.model_config.quantization
        stage = "build"
        H.init_single_rank(cfg)
        with ExitStack() as st:
            st.enter_context(set_current_vllm_config(cfg))
            st.enter_context(torch.device("cpu"))
            st.enter_context(H.cpu_kernel_checks_off())
            saved = CPUWNA16LinearKernel.__dict__["can_implement"]
            CPUWNA16LinearKernel.can_implement = classmethod(lambda cls, c: (True, None))
            st.callback(setattr, CPUWNA16LinearKernel, "can_implement", saved)
            cfg.compilation_config.static_forward_context.clear()
            model = initialize_model(vllm_config=cfg)
            rec["methods"] = {
                n: type(m.quant_method).__name__ + (f"/{type(m.scheme).__name__}" if hasattr(m, "scheme") else "")
                for n, m in model.named_modules() if getattr(m, "quant_method", None) is not None
                and not n.endswith(".attn")
            }
            stage = "load"
            get_model_loader(cfg.load_config).load_weights(model, cfg.model_config)
        rec["starts"] = True
    except Exception as e:  # the record is the point
        rec.update(starts=False, stage=stage, error=_first_line(e), where=_where(e))
    return rec


def main() -> int:
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        path = Path(sys.argv[2])
        rec = run_one(path)
        (path / "vllm.json").write_text(json.dumps(rec, indent=1) + "\n")
        return 0
    names = sys.argv[1:] or sorted(p.name for p in DATA.iterdir() if (p / "config.json").exists())
    for name in names:
        proc = subprocess.run([sys.executable, __file__, "--child", str(DATA / name)],
                              capture_output=True, text=True)
        rec = json.loads((DATA / name / "vllm.json").read_text()) if proc.returncode == 0 else {}
        verdict = "starts" if rec.get("starts") else f"refuses at {rec.get('stage')}: {rec.get('error')}"
        print(f"{name:22s} {verdict if rec else 'FAILED ' + proc.stderr[-300:]}"[:200])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
