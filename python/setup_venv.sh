#!/usr/bin/env bash
# Creates (or refreshes) the project venv at .venv: pinned CPU torch, the pinned SGLang release
# without its GPU dependency tree, and the test tools. Idempotent: a stamp records what was
# installed, so a second run is instant unless requirements changed.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${KVCTL_VENV:-$root/.venv}"
py="${PYTHON:-python3}"
SGLANG_VERSION="0.5.23"
stamp="$venv/.kvctl-stamp"
want="$(cat "$root/python/requirements.txt" "$root/python/requirements-nodeps.txt" 2>/dev/null | sha256sum | cut -c1-16)-sglang-$SGLANG_VERSION"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then exit 0; fi
echo "kvctl: preparing Python venv at $venv (sglang==$SGLANG_VERSION, torch CPU)" >&2
[ -x "$venv/bin/python" ] || "$py" -m venv "$venv"
pip=("$venv/bin/python" -m pip install -q --disable-pip-version-check)
"${pip[@]}" -r "$root/python/requirements.txt"
# SGLang's declared dependencies pull CUDA kernels and GB of wheels; the cache modules need few
# of them, listed in requirements-nodeps.txt and installed the same way.
"${pip[@]}" --no-deps "sglang==$SGLANG_VERSION"
if [ -f "$root/python/requirements-nodeps.txt" ]; then
  "${pip[@]}" --no-deps -r "$root/python/requirements-nodeps.txt"
fi
echo "$want" > "$stamp"
