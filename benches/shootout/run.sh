#!/usr/bin/env bash
# The shoot-out: bash benches/shootout/run.sh [--quick] [--landscapes A,B,C] [options]
# Installs optuna with pip when missing (into a venv under
# ~/.cache/orchestrator/ when the system pip refuses), builds the release
# binaries (cargo rebuilds what changed), and, for landscape C, the kimi-k3-in-c engine and
# its tiny checkpoint (scripts/kimi-k3.sh, into ~/.cache; KIMI_K3_SRC names
# the source, default the vendored copy beside the repository) unless K3_BIN
# is already set. Then runs the harness; its exit status is the harness's
# (1 when a goal is missed). Options: see shootout.py --help.
set -euo pipefail
cd "$(dirname "$0")/../.."

PY=python3
if ! $PY -c 'import optuna' 2>/dev/null; then
  if ! $PY -m pip install --quiet optuna 2>/dev/null; then
    venv="${XDG_CACHE_HOME:-$HOME/.cache}/orchestrator/shootout-venv"
    [ -x "$venv/bin/python" ] || $PY -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet optuna
    PY="$venv/bin/python"
  fi
fi
# Always: cargo rebuilds only what changed, and a run must measure the
# binaries of the commit its header names.
cargo build --release -p orchestrator -p tinyk3

# Landscape C is in the run unless --landscapes leaves it out.
wants_c=yes
prev=""
for arg in "$@"; do
  case "$prev:$arg" in
    --landscapes:*) [[ ",${arg^^}," == *,C,* ]] || wants_c=no ;;
  esac
  case "$arg" in
    --landscapes=*) v="${arg#--landscapes=}"; [[ ",${v^^}," == *,C,* ]] || wants_c=no ;;
  esac
  prev="$arg"
done
if [ "$wants_c" = yes ] && [ -z "${K3_BIN:-}" ]; then
  src="${KIMI_K3_SRC:-$PWD/../shared/vendor/kimi-k3-in-c}"
  if [ ! -d "$src" ]; then
    echo "landscape C needs the kimi-k3-in-c source: set KIMI_K3_SRC to a checkout (or K3_BIN and the K3_* variables scripts/kimi-k3.sh prints), or leave C out with --landscapes A,B" >&2
    exit 2
  fi
  k3_env="$(KIMI_K3_SRC="$src" bash scripts/kimi-k3.sh)"
  eval "$k3_env"
  export K3_BIN K3_MODEL K3_TRUNK K3_IDS K3_EXPERT_BYTES K3_TOP_K
fi
exec "$PY" benches/shootout/shootout.py "$@"
