# Sourced by scripts/test.sh and scripts/engines.sh: uv installs from where this machine's pip
# (python3 -m pip) is configured to (find-links, indexes, constraints such as a torch cap, CA
# file) and picks among indexes as pip does (the best version anywhere, not the first index's).
#
# uv rather than pip: the same pinned installs in ~30 s of wall time instead of ~80 and a third
# of the CPU (downloads and unpacking in parallel); benchmarks/results/test_time.txt.

pip_config() {  # pip's settings: the machine's pip, or ensurepip's in .venv where python3 has none
  if python3 -m pip --version >/dev/null 2>&1; then python3 -m pip config list; else .venv/bin/python -m pip config list; fi
}

pip_setting() {  # KEY: pip's value for KEY, its environment first, then install., then global.
  pip_config 2>/dev/null | awk -v key="$1" '
    { split($0, kv, "="); name = kv[1]; value = substr($0, length(name) + 2); gsub(/^'\''|'\''$/, "", value) }
    name == ":env:." key { env = value } name == "install." key { inst = value } name == "global." key { glob = value }
    END { print (env != "" ? env : (inst != "" ? inst : glob)) }'
}

uv_from_pip() {  # exports UV_* so that every `uv pip install` sees pip's sources
  local find_links index extra constraint cert
  find_links=$(pip_setting find-links)
  index=$(pip_setting index-url)
  extra=$(pip_setting extra-index-url)
  constraint=$(pip_setting constraint)
  cert=$(pip_setting cert)
  export UV_INDEX_STRATEGY=unsafe-best-match
  if [ -n "$find_links" ]; then export UV_FIND_LINKS="${find_links// /,}"; fi
  if [ -n "$index" ]; then export UV_INDEX_URL="$index"; fi
  if [ -n "$extra" ]; then export UV_EXTRA_INDEX_URL="$extra"; fi
  if [ -n "$constraint" ]; then export UV_CONSTRAINT="$constraint"; fi
  if [ -n "$cert" ] && [ -z "${SSL_CERT_FILE:-}" ]; then export SSL_CERT_FILE="$cert"; fi
  return 0
}
