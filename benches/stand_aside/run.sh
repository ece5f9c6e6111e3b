#!/usr/bin/env bash
# The stand-aside benchmark (see stand_aside.py's docstring):
#   bash benches/stand_aside/run.sh [--rounds N] [--phase-s S] [--period-s S] ...
# Builds the release binaries (a no-op when they are the checkout's), then
# runs the harness; exits 1 when the daemon standing aside misses the goal.
set -euo pipefail
cd "$(dirname "$0")/../.."
# The figures are of the commit the harness prints: build it.
cargo build --release -p orchestrator -p tinyk3
exec python3 benches/stand_aside/stand_aside.py "$@"
