# Sourced by scripts/test.sh and scripts/engines.sh: uv installs from where this machine's pip
# (python3 -m pip) is configured to (find-links, indexes, constraints such as a torch cap, CA
# file) and picks among indexes as pip does (the best version anywhere, not the first index's).
#
# uv rather than pip: the same pinned installs in 22 s of wall time instead of 84 (downloads and
# unpacking in parallel; benchmarks/test_time.sh's step lines in benchmarks/results/test_time.txt).

pip_config() {  # pip's settings as `pip config list` prints them: the machine's pip, or ensurepip's in .venv
  python3 -m pip config list 2>/dev/null || .venv/bin/python -m pip config list 2>/dev/null || true
}

pip_setting() {  # CONFIG KEY: KEY's value in CONFIG (pip_config's text): pip's environment first, then install., then global.
  awk -v key="$2" '
    { split($0, kv, "="); name = kv[1]; value = substr($0, length(name) + 2); gsub(/^'\''|'\''$/, "", value) }
    name == ":env:." key { env = value } name == "install." key { inst = value } name == "global." key { glob = value }
    END { print (env != "" ? env : (inst != "" ? inst : glob)) }' <<<"$1"
}

uv_from_pip() {  # exports UV_* so that every `uv pip install` sees pip's sources
  if [ -n "${SPECGUARD_UV_FROM_PIP:-}" ]; then return 0; fi  # the script that started this one did it
  local config find_links index extra constraint cert
  config=$(pip_config)  # one pip start (~1 CPU s), read for every setting
  find_links=$(pip_setting "$config" find-links)
  index=$(pip_setting "$config" index-url)
  extra=$(pip_setting "$config" extra-index-url)
  constraint=$(pip_setting "$config" constraint)
  cert=$(pip_setting "$config" cert)
  export UV_INDEX_STRATEGY=unsafe-best-match
  if [ -n "$find_links" ]; then export UV_FIND_LINKS="${find_links// /,}"; fi
  if [ -n "$index" ]; then export UV_INDEX_URL="$index"; fi
  if [ -n "$extra" ]; then export UV_EXTRA_INDEX_URL="$extra"; fi
  if [ -n "$constraint" ]; then export UV_CONSTRAINT="$constraint"; fi
  if [ -n "$cert" ] && [ -z "${SSL_CERT_FILE:-}" ]; then export SSL_CERT_FILE="$cert"; fi
  export SPECGUARD_UV_FROM_PIP=1
}
