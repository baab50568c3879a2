#!/usr/bin/env bash
# Creates (or refreshes) the project venv at .venv: pinned CPU torch, the pinned SGLang release
# without its GPU dependency tree, and the test tools. Idempotent: a stamp records what was
# installed, so a second run is instant unless requirements changed. Then NVIDIA Dynamo (below).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${KVCTL_VENV:-$root/.venv}"
py="${PYTHON:-python3}"
SGLANG_VERSION="0.5.23"
stamp="$venv/.kvctl-stamp"
want="$(cat "$root/python/requirements.txt" "$root/python/requirements-nodeps.txt" 2>/dev/null | sha256sum | cut -c1-16)-sglang-$SGLANG_VERSION"
pip=("$venv/bin/python" -m pip install -q --disable-pip-version-check)
if ! { [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; }; then
  echo "kvctl: preparing Python venv at $venv (sglang==$SGLANG_VERSION, torch CPU)" >&2
  [ -x "$venv/bin/python" ] || "$py" -m venv "$venv"
  "${pip[@]}" -r "$root/python/requirements.txt"
  # SGLang's declared dependencies pull CUDA kernels and GB of wheels; the cache modules need few
  # of them, listed in requirements-nodeps.txt and installed the same way.
  "${pip[@]}" --no-deps "sglang==$SGLANG_VERSION"
  if [ -f "$root/python/requirements-nodeps.txt" ]; then
    "${pip[@]}" --no-deps -r "$root/python/requirements-nodeps.txt"
  fi
  echo "$want" > "$stamp"
fi

# NVIDIA Dynamo (optional: the Dynamo entry point and tests) into its own target folder beside the
# venv's site-packages, without dependencies (its `sglang` extra would pull CUDA packages and
# another SGLang). Processes that run Dynamo put this folder on PYTHONPATH (src/paths.ts
# dynamoSite). KVCTL_DYNAMO=0 skips it.
if [ "${KVCTL_DYNAMO:-1}" != "0" ]; then
  dyn="$venv/dynamo-1.6.1"
  dwant="$(sha256sum < "$root/python/requirements-dynamo.txt" | cut -c1-16)"
  if ! [ -f "$dyn/.kvctl-stamp" ] || [ "$(cat "$dyn/.kvctl-stamp")" != "$dwant" ]; then
    echo "kvctl: installing NVIDIA Dynamo into $dyn" >&2
    rm -rf "$dyn"
    "${pip[@]}" --no-deps --target "$dyn" -r "$root/python/requirements-dynamo.txt"
    echo "$dwant" > "$dyn/.kvctl-stamp"
  fi
fi

# AIConfigurator's core (the input of kvctl sim's GPU profiles and of their test) into its own
# target folder, without dependencies (python/requirements-aiconfigurator.txt says why). The
# profile generator finds it there (python/kvctl_sim/profiles/generate.py; $KVCTL_AIC_SITE
# overrides).
aic="$venv/aiconfigurator-core-0.12.0"
awant="$(sha256sum < "$root/python/requirements-aiconfigurator.txt" | cut -c1-16)"
if ! [ -f "$aic/.kvctl-stamp" ] || [ "$(cat "$aic/.kvctl-stamp")" != "$awant" ]; then
  echo "kvctl: installing AIConfigurator's core into $aic" >&2
  rm -rf "$aic"
  "${pip[@]}" --no-deps --target "$aic" -r "$root/python/requirements-aiconfigurator.txt"
  echo "$awant" > "$aic/.kvctl-stamp"
fi
