#!/usr/bin/env bash
# Runs every test of the workspace, installing what the tests need first.
# This is the README's test command; .ci/run calls it.
set -euo pipefail
cd "$(dirname "$0")/.."

# The report's HTML is opened in headless Chromium (Debian's package).
if ! command -v chromium >/dev/null 2>&1; then
  echo "installing chromium for the report tests (apt-get)..." >&2
  if [ "$(id -u)" = 0 ]; then sudo=""; else sudo="sudo"; fi
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq chromium >/dev/null
fi

# Tests drive the real binaries (orchestrator, tinyk3); cargo builds both.
cargo build --workspace --all-targets
cargo test --workspace --no-fail-fast
