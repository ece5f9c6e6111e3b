#!/usr/bin/env bash
# Records one A/A trace of a real stack with `orchestrator trace`: the same
# profile run back to back through the stack's own measurement, one CSV row
# per run with the machine's pressure during it (README.md beside this file).
#
#   bash benches/traces/collect.sh STACK LOAD RUNS
#
# STACK: tinyk3-bench | tinyk3-serve | kimi-k3-in-c | llama-server
# LOAD:  a word for the file name (quiet, loaded, ...); the script does not
#        make the load: start it yourself (a parallel `cargo build` is fair).
# RUNS:  how many runs (a few hundred; see the README for each stack's time)
#
# Writes benches/traces/STACK-LOAD.csv (never overwrites). Needs the release
# binaries (`cargo build --release --workspace`); kimi-k3-in-c needs
# KIMI_K3_SRC (scripts/kimi-k3.sh), llama-server runs scripts/llama-server.sh.
set -euo pipefail
cd "$(dirname "$0")/../.."
repo="$PWD"

stack="${1:?usage: collect.sh STACK LOAD RUNS}"
load="${2:?usage: collect.sh STACK LOAD RUNS}"
runs="${3:?usage: collect.sh STACK LOAD RUNS}"
out="benches/traces/$stack-$load.csv"
orch="$repo/target/release/orchestrator"
tinyk3="$repo/target/release/tinyk3"
work="$repo/ledger/traces/$stack"
mkdir -p "$work"

[ -x "$orch" ] && [ -x "$tinyk3" ] || {
  echo "collect.sh: build first: cargo build --release --workspace" >&2
  exit 2
}

# The tinyk3 trace checkpoint: small enough that one bench run takes about
# 1.5 s on 2 cores, with most experts read cold from disk every token.
model="$repo/ledger/traces/tinyk3-model"
if [ ! -f "$model/manifest.json" ]; then
  "$tinyk3" init --out "$model" --seed 1 --layers 6 --experts 32 --top-k 4 \
    --d-model 128 --d-expert 256 --d-dense 512 --vocab 512 --heads 4 >&2
fi

server_pid=""
cleanup() { [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null || true; }
trap cleanup EXIT

wait_healthy() {
  local url="$1"
  for _ in $(seq 1 240); do
    if curl -sf "$url" >/dev/null 2>&1; then return 0; fi
    sleep 0.5
  done
  echo "collect.sh: $url never answered" >&2
  exit 1
}

case "$stack" in
  tinyk3-bench)
    "$orch" --config benches/traces/tinyk3.toml trace --runs "$runs" --out "$out"
    ;;
  tinyk3-serve)
    "$tinyk3" serve "$model" --profile benches/traces/profile.toml \
      --listen 127.0.0.1:8191 >"$work/serve.log" 2>&1 &
    server_pid=$!
    wait_healthy http://127.0.0.1:8191/health
    "$orch" --config benches/traces/tinyk3.toml trace --protocol surface \
      --runs "$runs" --out "$out"
    ;;
  kimi-k3-in-c)
    eval "$(KIMI_K3_SRC="${KIMI_K3_SRC:-$repo/../shared/vendor/kimi-k3-in-c}" bash scripts/kimi-k3.sh)"
    # The example as written, with only the engine, the checkpoint, the
    # ledger paths and the tiny model's expert slot substituted.
    sed -e "s#\"bin/k3\"#\"$K3_BIN\"#" \
        -e "s#/srv/k3model#$K3_MODEL#" \
        -e "s#/srv/k3trunk#$K3_TRUNK#" \
        -e "s#\"../ledger/kimi-k3-in-c#\"$work#g" \
        -e "s#^expert_bytes = .*#expert_bytes = $K3_EXPERT_BYTES#" \
        -e "s#\"profiles/kimi-k3-in-c.toml\"#\"$work/profile.toml\"#" \
        -e "s#\"../experiments\"#\"$repo/experiments\"#" \
        examples/kimi-k3-in-c.toml >"$work/config.toml"
    # The example profile's 64 GB budget, scaled to the tiny checkpoint.
    cat >"$work/profile.toml" <<EOF
[memory]
budget_gb = 0.5
trunk_gb = 0.02
cache_gb = 0.03

[speculative]
draft_len = 0

[compute]
threads = 2
EOF
    "$orch" --config "$work/config.toml" trace --runs "$runs" --out "$out"
    ;;
  llama-server)
    eval "$(bash scripts/llama-server.sh)"
    "$LLAMA_SERVER_BIN" -m "$LLAMA_SERVER_GGUF" --host 127.0.0.1 --port 8192 \
      --metrics --no-webui --no-cache-prompt -np 1 -c 2048 -t 2 \
      >"$work/server.log" 2>&1 &
    server_pid=$!
    wait_healthy http://127.0.0.1:8192/health
    sed -e "s#127.0.0.1:8080#127.0.0.1:8192#g" \
        -e "s#\"../ledger/llama-server#\"$work#g" \
        -e "s#\"profiles/llama-server.toml\"#\"$repo/examples/profiles/llama-server.toml\"#" \
        -e "s#\"../experiments\"#\"$repo/experiments\"#" \
        examples/llama-server.toml >"$work/config.toml"
    "$orch" --config "$work/config.toml" trace --protocol surface \
      --runs "$runs" --out "$out"
    ;;
  *)
    echo "collect.sh: unknown stack $stack (tinyk3-bench, tinyk3-serve, kimi-k3-in-c, llama-server)" >&2
    exit 2
    ;;
esac
