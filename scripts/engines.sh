#!/usr/bin/env bash
# Installs the engines specguard models beside .venv's vLLM 0.33 (docs/engines.md):
# one overlay directory per engine version under .engines/, put first on PYTHONPATH
# over .venv (torch 2.13.0 CPU and the shared pure-Python set come from .venv).
# The overlays install in parallel (triton-3.7.1 is SGLang's, kept apart; torchvision-0.28.0 is what
# the vLLM plan recorder needs for Qwen3.5); each is a --no-deps install of its pinned set.
#   bash scripts/engines.sh            (needs .venv/bin/uv; scripts/test.sh runs it)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/uv_env.sh
uv_from_pip
overlay() {  # overlay NAME REQUIREMENTS
    local dir=".engines/$1"
    rm -rf "$dir.partial"
    .venv/bin/uv pip install -q --python .venv/bin/python --no-deps --target "$dir.partial" -r "$2"
    rm -rf "$dir" && mv "$dir.partial" "$dir"
}
mkdir -p .engines
overlay vllm-0.32 requirements/vllm-0.32-cpu.txt &
v32=$!
overlay sglang-0.5.23 requirements/sglang-0.5.23-cpu.txt &
sgl=$!
overlay triton-3.7.1 requirements/triton-cpu.txt &
tri=$!
overlay torchvision-0.28.0 requirements/torchvision-cpu.txt &
tv=$!
wait $v32
wait $sgl
wait $tri
wait $tv
# torchvision's C extension needs libtorch_cuda; without it torchvision falls back to its
# Python ops (see requirements/sglang-0.5.23-cpu.txt).
rm -f .engines/sglang-0.5.23/torchvision/_C.so .engines/torchvision-0.28.0/torchvision/_C.so
# ... and vLLM's model-inspection subprocesses need its op schemas defined before it imports (the module
# run as the overlay's sitecustomize: engines/torchvision_ops.py)
cp src/specguard/engines/torchvision_ops.py .engines/torchvision-0.28.0/sitecustomize.py
