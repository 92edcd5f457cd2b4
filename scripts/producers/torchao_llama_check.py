#!/usr/bin/env python3
"""Does vLLM 0.33 load torchao 0.18 weight-only INT8/FP8 checkpoints? (issue 26 item 5)

Builds a tiny Llama (random init, bf16), quantizes it with transformers' TorchAoConfig
(Int8WeightOnlyConfig, Float8WeightOnlyConfig: torchao's defaults), saves it, and loads
each through vLLM 0.33's real start-up and loader on CPU (vllm_expectations.run_one:
EngineArgs, initialize_model -> TorchAOLinearMethod, DefaultModelLoader.load_weights),
printing the traceback of the first failure. The answer is in
tests/data/producers/torchao_fp8wo/LOAD.md.

    PYTHONPATH=src:/tmp/ao .venv/bin/python scripts/producers/torchao_llama_check.py OUT

/tmp/ao: ``pip install --no-deps --target /tmp/ao torchao==0.18.0`` (kept out of .venv).
"""

from __future__ import annotations

import subprocess
import sys
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
CONFIGS = {"llama_int8wo": "Int8WeightOnlyConfig", "llama_fp8wo": "Float8WeightOnlyConfig"}


def build(root: Path) -> None:
    import torch
    import torchao.quantization as aoq
    from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM, TorchAoConfig

    cfg = LlamaConfig(hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, head_dim=64, vocab_size=1024, max_position_embeddings=128)
    torch.manual_seed(0)
    LlamaForCausalLM(cfg).to(torch.bfloat16).save_pretrained(root / "base")
    for name, cls in CONFIGS.items():
        model = AutoModelForCausalLM.from_pretrained(root / "base", dtype=torch.bfloat16,
                                                     quantization_config=TorchAoConfig(getattr(aoq, cls)()))
        model.save_pretrained(root / name, safe_serialization=True)


def load(path: Path) -> None:
    sys.path.insert(0, str(HERE))
    import vllm_expectations as ve

    first = ve._first_line

    def with_traceback(e: BaseException) -> str:
        traceback.print_exception(e)
        return first(e)

    ve._first_line = with_traceback
    rec = ve.run_one(path)
    print({k: v for k, v in rec.items() if k != "methods"})


def main(argv: list[str]) -> int:
    if argv[:1] == ["--load"]:
        load(Path(argv[1]))
        return 0
    root = Path(argv[0])
    build(root)
    for name in CONFIGS:  # one process per load: vLLM keeps global state per model
        subprocess.run([sys.executable, __file__, "--load", str(root / name)], check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
