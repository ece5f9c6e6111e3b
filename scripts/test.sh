#!/usr/bin/env bash
# Runs every test of the workspace, installing what the tests need first.
# This is the README's test command; .ci/run calls it.
set -euo pipefail
cd "$(dirname "$0")/.."

# A test that cannot run here (a missing engine, tool or privilege) is
# skipped, loudly and counted, through tests/support/skip.rs; under CI=true
# (.ci/run sets it) it fails instead. The harness hides a passing test's
# stderr, so every skip is logged here and listed at the end.
ORCH_TEST_SKIP_LOG="$(mktemp "${TMPDIR:-/tmp}/orch-test-skips.XXXXXX")"
export ORCH_TEST_SKIP_LOG
report_skips() {
  if [ -s "$ORCH_TEST_SKIP_LOG" ]; then
    echo "" >&2
    echo "*** $(wc -l <"$ORCH_TEST_SKIP_LOG") test(s) did not run here (they fail under CI=true):" >&2
    sed 's/^/***   /' "$ORCH_TEST_SKIP_LOG" >&2
  fi
  rm -f "$ORCH_TEST_SKIP_LOG"
}
trap report_skips EXIT

# The report's HTML is opened in headless Chromium (Debian's package).
if ! command -v chromium >/dev/null 2>&1; then
  echo "installing chromium for the report tests (apt-get)..." >&2
  if [ "$(id -u)" = 0 ]; then sudo=""; else sudo="sudo"; fi
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq chromium >/dev/null
fi

# The service unit is checked with `systemd-analyze verify` (Debian's
# `systemd`; no systemd needs to run as PID 1, see scripts/verify-unit.sh).
if ! command -v systemd-analyze >/dev/null 2>&1; then
  echo "installing systemd for systemd-analyze verify (apt-get)..." >&2
  if [ "$(id -u)" = 0 ]; then sudo=""; else sudo="sudo"; fi
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq systemd >/dev/null
fi

# The llama-server tier (tests/e2e/llama_server/) needs a real llama.cpp
# llama-server, a small real GGUF model and a mixture-of-experts GGUF upcycled
# from it: built, fetched and written once into a cache outside the checkout
# (15 to 41 minutes on 2 cores the first time, depending on load, README
# "Disk and time"; a no-op after), then handed to
# the tests through the environment.
llama_env="$(bash scripts/llama-server.sh)"
eval "$llama_env"
export LLAMA_SERVER_BIN LLAMA_SERVER_GGUF LLAMA_SERVER_MOE_GGUF

# The real kimi-k3-in-c tier (tests/e2e/kimi_k3_real.rs): the engine built from
# KIMI_K3_SRC (default: the vendored source beside the checkout, as CI has
# it) and a tiny checkpoint of our own writer, cached outside the checkout.
# Without a source tree the tier is skipped and says how to run it; under
# CI=true a missing source fails the run here.
KIMI_K3_SRC="${KIMI_K3_SRC:-$PWD/../shared/vendor/kimi-k3-in-c}"
if [ -f "$KIMI_K3_SRC/Makefile" ]; then
  k3_env="$(KIMI_K3_SRC="$KIMI_K3_SRC" bash scripts/kimi-k3.sh)"
  eval "$k3_env"
  export K3_BIN K3_MODEL K3_TRUNK K3_EXPERT_BYTES
elif [ "${CI:-}" = true ]; then
  echo "no kimi-k3-in-c source at $KIMI_K3_SRC: CI runs the real-engine tier, so set KIMI_K3_SRC to a kimi-k3-in-c source tree" >&2
  exit 1
else
  echo "no kimi-k3-in-c source at $KIMI_K3_SRC: the real-engine tier is SKIPPED (set KIMI_K3_SRC to a kimi-k3-in-c source tree; under CI=true this is a failure)" >&2
fi

# The ledger suite runs on SQLite and on a real PostgreSQL: a throw-away
# cluster (Debian's `postgresql`, installed when missing; initdb into a temp
# dir, pg_ctl on a free loopback port, as the `postgres` user when root),
# stopped and removed on exit. Its URL and password reach the tests through
# ORCH_TEST_PG_URL / ORCH_TEST_PG_PASSWORD; without them the PostgreSQL half
# of each ledger test fails (ORCH_TEST_NO_PG=1 skips it, by hand only).
if [ "${ORCH_TEST_NO_PG:-}" = 1 ]; then
  echo "scripts/test.sh always tests the PostgreSQL ledger: unset ORCH_TEST_NO_PG" >&2
  exit 2
fi
pg_env="$(bash scripts/postgres.sh start)"
eval "$pg_env"
export ORCH_TEST_PG_URL ORCH_TEST_PG_PASSWORD ORCH_TEST_PG_DIR
trap 'bash scripts/postgres.sh stop "$ORCH_TEST_PG_DIR"; report_skips' EXIT

# The shoot-out harness's own tests (benches/shootout/; no engine, no optuna).
python3 -m unittest benches/shootout/test_shootout.py

# Tests drive the real binaries (orchestrator, tinyk3); cargo builds both.
cargo build --workspace --all-targets
bash scripts/verify-unit.sh "${CARGO_TARGET_DIR:-target}/debug/orchestrator"
cargo test --workspace --no-fail-fast
