#!/usr/bin/env bash
# Installs everything the test suite needs into .venv and runs it.
# torch is pinned to the CPU build; vLLM is installed without its (CUDA) deps
# plus a pinned pure-Python set, so its quant-config code imports on a CPU box.
#
# Where the time goes: each step line says the seconds since the start and the CPU
# seconds its child processes have used so far (on a shared machine wall time counts
# others' load). The installs go through uv, from pip's own sources (scripts/uv_env.sh),
# without byte-compiling all ~17,000 .py files of the installs (~80 CPU s): the tests
# import a fraction of them, which Python compiles on first import. Work that pytest does not
# need to start runs in the background (`in_background NAME CMD...`, `wait_for NAME`): the
# engine overlays and chromium (their tests wait for them: tests/background.py), ruff and mypy;
# never a second install into .venv at the same time.
set -euo pipefail
cd "$(dirname "$0")/.."
# Bytecode is written: a shell that sets PYTHONDONTWRITEBYTECODE (this sandbox does) makes every
# process that imports vLLM compile it again (~24 CPU s, against ~9 with .pyc), and the suite
# starts a dozen of them (workers, zygotes, probes, TP ranks).
unset PYTHONDONTWRITEBYTECODE
start=$SECONDS
times_file=$(mktemp)
step() {
  local cpu
  times >"$times_file"  # here, not in $(...): a subshell's `times` counts only its own children
  cpu=$(awk 'NR == 2 { split($1, u, "m"); split($2, s, "m"); printf "%.1f", u[1] * 60 + u[2] + s[1] * 60 + s[2] }' "$times_file")
  printf '[test.sh %s +%ds, %s CPU s] %s\n' "$(date +%H:%M:%S)" "$((SECONDS - start))" "$cpu" "$*"
}
declare -A bg_pid bg_log
in_background() {  # NAME CMD...: run CMD in the background, its output kept for wait_for
  local name=$1
  shift
  bg_log[$name]="$(mktemp)"
  "$@" >"${bg_log[$name]}" 2>&1 &
  bg_pid[$name]=$!
}
wait_for() {  # NAME: wait for a background job; its output, and exit 1, if it failed
  wait "${bg_pid[$1]}" || { cat "${bg_log[$1]}"; echo "$1 failed" >&2; exit 1; }
}
# then_done FILE CMD...: CMD, then FILE created whatever CMD's outcome (the tests that need what
# CMD installs wait for FILE: tests/background.py); CMD's exit status.
then_done() {
  local file=$1 status=0
  shift
  "$@" || status=$?
  : >"$file"
  return "$status"
}
install_chromium() {
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium
}
# Debian's chromium for the report's browser tests (tests/report/): installed in the
# background, when missing and when we may (root, as in CI). It can take minutes; the tests
# start without it, and the browser tests (scheduled last, tests/conftest.py) wait for the file
# that says the install is over (tests/report/conftest.py).
if ! command -v chromium >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  step "installing chromium (Debian package) in the background"
  SPECGUARD_CHROMIUM_DONE="$(mktemp -u)"
  export SPECGUARD_CHROMIUM_DONE
  in_background chromium then_done "$SPECGUARD_CHROMIUM_DONE" install_chromium
fi
step "creating .venv"
# No pip in .venv (ensurepip alone was ~8 CPU s): the machine's pip puts uv there, uv the rest;
# a python3 without pip gets ensurepip's in .venv.
if python3 -m pip --version >/dev/null 2>&1; then
  python3 -m venv --without-pip .venv
  PIP=(python3 -m pip --python .venv/bin/python)
else
  python3 -m venv .venv
  PIP=(.venv/bin/python -m pip)
fi
"${PIP[@]}" install -q --no-compile uv==0.13.9 \
  2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)  # pip's note on each empty local index
source scripts/uv_env.sh
uv_from_pip
UV=(.venv/bin/uv pip install -q --python .venv/bin/python)
step "installing torch 2.13.0 (CPU build)"
"${UV[@]}" torch==2.13.0
step "installing vLLM 0.33.0 without its CUDA dependencies, plus its pinned pure-Python set"
"${UV[@]}" --no-deps vllm==0.33.0 -r requirements/vllm-0.33-cpu.txt
step "installing specguard and the test requirements"
"${UV[@]}" -e '.[test]' -r requirements/test.txt
# The overlays download ~1 GB, after .venv's installs (which the tests need) and beside the
# tests: those start without them, and the few that run an overlay
# (tests/engines/overlays.py, tests/plans/test_recorded.py) wait for the file that says the
# install is over (tests/background.py); test.sh reports a failed install at the end.
step "installing vLLM 0.32 and SGLang 0.5.23 overlays (.engines/, in the background)"
SPECGUARD_ENGINES_DONE="$(mktemp -u)"
export SPECGUARD_ENGINES_DONE
in_background engines then_done "$SPECGUARD_ENGINES_DONE" bash scripts/engines.sh
step "ruff and mypy in the background"
in_background ruff .venv/bin/ruff check src tests benchmarks scripts
in_background mypy .venv/bin/mypy src
# Two workers, one per core (pytest-xdist): one work unit per test file, or per group of files
# sharing an expensive session fixture; the units that wait on engines go first (tests/conftest.py).
# A failure's report says which worker ([gw0]/[gw1]) ran it.
step "pytest (2 workers)"
status=0
.venv/bin/python -m pytest -q -n 2 --dist loadfile "$@" || status=$?
step "engine overlays"
wait_for engines
if [ -n "${bg_pid[chromium]:-}" ]; then
  step "chromium"
  wait_for chromium
fi
step "ruff"
wait_for ruff
step "mypy"
wait_for mypy
cat "${bg_log[mypy]}"
step "done"
exit "$status"
