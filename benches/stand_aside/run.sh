#!/usr/bin/env bash
# The stand-aside benchmark (see stand_aside.py's docstring):
#   bash benches/stand_aside/run.sh [--rounds N] [--phase-s S] [--period-s S] ...
# Builds the release binaries when missing, then runs the harness; exits 1
# when the daemon standing aside misses the goal.
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ ! -x target/release/orchestrator ] || [ ! -x target/release/tinyk3 ]; then
  cargo build --release -p orchestrator -p tinyk3
fi
exec python3 benches/stand_aside/stand_aside.py "$@"
