#!/usr/bin/env bash
# The README's test command on a fresh clone, as CI runs it: wall time, and the CPU seconds of
# the whole run (on a shared machine wall time counts everyone's load; CPU seconds do not).
# With 2 cores and nothing else running, the run takes about max(CPU / 2, the longest chain of
# steps): test.sh's step lines say where the time went.
#
#   bash benchmarks/test_time.sh [CLONE_DIR]    (default: a new temporary directory)
#
# Prints test.sh's step lines, pytest's summary line, and the totals; exits with the run's code.
set -uo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
clone="${1:-$(mktemp -d)/specguard}"
git clone -q "$repo" "$clone"
# uv's download cache, torch's compile cache, vLLM's model-info cache and matplotlib's font list
# start empty, as on a fresh machine (removed afterwards). chromium, where installed, stays:
# test.sh installs it only where it is missing.
fresh="$(mktemp -d)"
export UV_CACHE_DIR="$fresh/uv" TORCHINDUCTOR_CACHE_DIR="$fresh/inductor" VLLM_CACHE_ROOT="$fresh/vllm" \
  MPLCONFIGDIR="$fresh/matplotlib"
trap 'rm -rf "$fresh"' EXIT
cd "$clone"
log="$(mktemp)"
stats="$(mktemp)"
echo "fresh clone of $(git -C "$repo" rev-parse --short HEAD) in $clone; load before: $(cut -d' ' -f1-3 /proc/loadavg)"
CI=true /usr/bin/time -f '%e %U %S' -o "$stats" bash .ci/run >"$log" 2>&1
status=$?
grep -E '^\[test\.sh |^[0-9]+ (passed|failed)|passed|failed' "$log" | grep -vE '^(FAILED|ERROR) ' | tail -n 40
grep -E '^(FAILED|ERROR) ' "$log" | head -20
read -r wall user sys < <(tail -n 1 "$stats")  # time adds a line before it on a failure
awk -v w="$wall" -v u="$user" -v s="$sys" -v l="$(cut -d' ' -f1-3 /proc/loadavg)" 'BEGIN {
  printf "whole run: %.0f s wall (%d min %02d s), %.0f CPU s (user %.0f + system %.0f); load after: %s\n",
         w, w / 60, w % 60, u + s, u, s, l
  printf "on 2 idle cores: at least %.0f s (%d min %02d s) = CPU / 2\n", (u + s) / 2, (u + s) / 2 / 60, (u + s) / 2 % 60
}'
echo "log: $log"
exit "$status"
