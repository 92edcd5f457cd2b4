#!/usr/bin/env bash
# Installs everything the test suite needs into .venv and runs it.
# torch is pinned to the CPU build; vLLM is installed without its (CUDA) deps
# plus a pinned pure-Python set, so its quant-config code imports on a CPU box.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
PIP=".venv/bin/pip"
$PIP install -q --upgrade pip >/dev/null
$PIP install -q torch==2.13.0
$PIP install -q --no-deps vllm==0.33.0 -r requirements/vllm-0.33-cpu.txt
$PIP install -q -e '.[test]' -r requirements/test.txt
.venv/bin/ruff check src tests benchmarks
exec .venv/bin/python -m pytest -q "$@"
