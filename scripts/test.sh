#!/usr/bin/env bash
# Installs everything the test suite needs into .venv and runs it.
# torch is pinned to the CPU build; vLLM is installed without its (CUDA) deps
# plus a pinned pure-Python set, so its quant-config code imports on a CPU box.
set -euo pipefail
cd "$(dirname "$0")/.."
step() { printf '[test.sh %s] %s\n' "$(date +%H:%M:%S)" "$*"; }
# Debian's chromium for the report's browser tests (tests/report/): installed in the
# background while pip works, when missing and when we may (root, as in CI).
chromium_log="$(mktemp)"
if ! command -v chromium >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  step "installing chromium (Debian package) in the background"
  ( apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium ) \
    >"$chromium_log" 2>&1 &
  chromium_pid=$!
fi
step "creating .venv"
python3 -m venv .venv
PIP=".venv/bin/pip"
$PIP install -q --upgrade pip >/dev/null
step "installing torch 2.13.0 (CPU build)"
$PIP install -q torch==2.13.0
step "installing vLLM 0.33.0 without its CUDA dependencies, plus its pinned pure-Python set"
$PIP install -q --no-deps vllm==0.33.0 -r requirements/vllm-0.33-cpu.txt
step "installing specguard and the test requirements"
$PIP install -q -e '.[test]' -r requirements/test.txt
step "ruff"
.venv/bin/ruff check src tests benchmarks
step "mypy"
.venv/bin/mypy src
if [ -n "${chromium_pid:-}" ]; then
  step "waiting for chromium"
  wait "$chromium_pid" || { cat "$chromium_log"; echo "chromium install failed" >&2; exit 1; }
fi
step "pytest"
exec .venv/bin/python -m pytest -q "$@"
