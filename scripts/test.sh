#!/usr/bin/env bash
# Runs every test of the workspace, installing what the tests need first.
# This is the README's test command; .ci/run calls it.
set -euo pipefail
cd "$(dirname "$0")/.."

# Tests drive the real binaries (orchestrator, tinyk3); cargo builds both.
cargo build --workspace --all-targets
cargo test --workspace --no-fail-fast
