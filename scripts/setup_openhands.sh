#!/usr/bin/env bash
# The OpenHands SDK (agent + terminal tool, local workspace, no docker) in its own Python 3.12 venv,
# .deps/openhands: the SDK needs Python >= 3.12. Stamped and idempotent like scripts/setup.sh, which
# sources this file and calls setup_openhands; run on its own it does just that part:
#
#   scripts/setup_openhands.sh
#
# Pinned versions come from nemo_polar/server/gateway/harnesses/versions.py.

# pyenv's 3.12.1, or POLAR_PYTHON312
openhands_python() {
  local py=${POLAR_PYTHON312:-}
  if [[ -z $py ]]; then
    local root; root=$(pyenv root 2>/dev/null || echo "$HOME/.pyenv")
    py=$root/versions/3.12.1/bin/python
  fi
  if [[ ! -x $py ]]; then
    log "no Python 3.12 for OpenHands: install pyenv's 3.12.1 or set POLAR_PYTHON312"
    return 1
  fi
  echo "$py"
}

setup_openhands() {
  local spec py
  spec=$("${PY311:-python3.11}" nemo_polar/server/gateway/harnesses/versions.py pip openhands)
  if fresh openhands "$spec" && [[ -x "$DEPS/openhands/bin/python" ]]; then return; fi
  py=$(openhands_python)
  log "OpenHands SDK ($DEPS/openhands, Python 3.12), a few minutes"
  rm -rf "$DEPS/openhands"
  "$py" -m venv "$DEPS/openhands"
  pipq "$DEPS/openhands/bin/python" -U pip
  # shellcheck disable=SC2086
  pipq "$DEPS/openhands/bin/python" $spec
  stamp openhands "$spec"
}

if [[ ${BASH_SOURCE[0]} == "$0" ]]; then  # run on its own, not sourced by setup.sh
  set -euo pipefail
  cd "$(dirname "$0")/.."
  DEPS=${POLAR_DEPS:-$PWD/.deps}
  PY311=${POLAR_PYTHON:-python3.11}
  mkdir -p "$DEPS"
  pipq() { local py=$1; shift; "$py" -m pip install -q "$@" 2> >(grep -v "is ignored: it is neither" >&2); }
  log() { printf '\033[1m[setup]\033[0m %s\n' "$*" >&2; }
  fresh() { [[ -f "$DEPS/$1.stamp" && "$(cat "$DEPS/$1.stamp")" == "$(printf '%s' "$2" | sha256sum)" ]]; }
  stamp() { printf '%s' "$2" | sha256sum >"$DEPS/$1.stamp"; }
  setup_openhands
  log "ready"
fi
