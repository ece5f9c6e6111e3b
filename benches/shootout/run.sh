#!/usr/bin/env bash
# The shootout of issue #16: bash benches/shootout/run.sh [--quick] [options]
# Installs optuna with pip when missing (into a venv under
# ~/.cache/orchestrator/ when the system pip refuses), builds the release
# binaries when missing, then runs the harness. Options: see shootout.py --help.
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
if [ ! -x target/release/orchestrator ] || [ ! -x target/release/tinyk3 ]; then
  cargo build --release -p orchestrator -p tinyk3
fi
exec "$PY" benches/shootout/shootout.py "$@"
