#!/usr/bin/env bash
# tinyk3 serving overhead: seconds per token through `tinyk3 serve` (HTTP) vs
# `tinyk3 bench` under the same profile, measured side by side: each round runs
# a fresh bench process and a fresh server process (alternating which goes
# first) on the same prompt tokens, so both start as cold and do the same work.
# Then times a schema-constrained menu choice (the orchestrator's menu schema).
#
# Usage: tinyk3/bench/serve_overhead.sh [ROUNDS] [GEN]   (defaults: 5 rounds, 32 tokens)
# Env:   CARGO_TARGET_DIR (default: <repo>/target), TINYK3_BENCH_TMP (default: /tmp),
#        TINYK3_BIN (an already built release binary; skips the build)
set -euo pipefail

ROUNDS=${1:-5}
GEN=${2:-32}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
BIN=${TINYK3_BIN:-}
if [ -z "$BIN" ]; then
  (cd "$ROOT" && cargo build -p tinyk3 --release --quiet)
  BIN=$CARGO_TARGET_DIR/release/tinyk3
fi

WORK=$(mktemp -d "${TINYK3_BENCH_TMP:-/tmp}/tinyk3-serve-bench.XXXXXX")
SERVER_PID=""
cleanup() {
  [ -n "$SERVER_PID" ] && kill "$SERVER_PID" 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

MODEL=$WORK/model
"$BIN" init --out "$MODEL" >/dev/null

# The demo's starting profile (tinyk3/profiles/slow-start.toml, far tier absent),
# and a faster one with speculation, so the draft fields are exercised too.
cat >"$WORK/slow.toml" <<'EOF'
[memory]
budget_gb = 0.3
trunk_gb = 0.05
cache_gb = 0.25
[compute]
threads = 2
EOF
cat >"$WORK/spec.toml" <<'EOF'
[memory]
budget_gb = 1.2
trunk_gb = 0.3
cache_gb = 0.8
[speculative]
draft_len = 3
[compute]
threads = 2
EOF

USER_TEXT="The experts of the far tier"
# The server's chat template around one user message: the bench gets the same tokens.
TEMPLATED=$(printf '<|user|>\n%s\n<|assistant|>\n.' "$USER_TEXT")
TEMPLATED=${TEMPLATED%.} # $(...) drops trailing newlines; the template ends in one

start_server() {
  local profile=$1
  shift
  "$BIN" serve "$MODEL" --profile "$profile" --listen 127.0.0.1:0 "$@" 2>"$WORK/serve.err" &
  SERVER_PID=$!
  for _ in $(seq 600); do grep -q "listening on" "$WORK/serve.err" 2>/dev/null && break; sleep 0.05; done
  ADDR=$(sed -n 's/^listening on http:\/\///p' "$WORK/serve.err")
}

stop_server() {
  kill -TERM "$SERVER_PID"
  wait "$SERVER_PID"
  SERVER_PID=""
}

# One greedy request; prints the answer with the client's wall time added.
ask() {
  python3 - "$1" "$USER_TEXT" "$GEN" <<'PY'
import http.client, json, sys, time
addr, text, gen = sys.argv[1], sys.argv[2], int(sys.argv[3])
host, port = addr.rsplit(":", 1)
body = json.dumps({"model": "tinyk3", "messages": [{"role": "user", "content": text}],
                   "max_tokens": gen, "temperature": 0, "cache_prompt": False})
c = http.client.HTTPConnection(host, int(port), timeout=600)
t0 = time.perf_counter()
c.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
r = json.loads(c.getresponse().read())
r["client_seconds"] = time.perf_counter() - t0
print(json.dumps(r))
PY
}

for profile in slow spec; do
  : >"$WORK/$profile.runs"
  for round in $(seq "$ROUNDS"); do
    for arm in $( ((round % 2)) && echo "bench serve" || echo "serve bench"); do
      if [ "$arm" = bench ]; then
        echo "bench $("$BIN" bench "$MODEL" --profile "$WORK/$profile.toml" --prompt "$TEMPLATED" --gen "$GEN")" >>"$WORK/$profile.runs"
      else
        start_server "$WORK/$profile.toml"
        echo "serve $(ask "$ADDR")" >>"$WORK/$profile.runs"
        stop_server
      fi
    done
  done
done

python3 - "$WORK" "$ROUNDS" "$GEN" <<'PY'
import json, statistics, sys
work, rounds, gen = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])

def text_of(ids):
    # The engine's byte-level decoding: a byte below 256, `<N>` above.
    out = bytearray()
    for i in ids:
        out += bytes([i]) if i < 256 else f"<{i}>".encode()
    return out.decode("utf-8", "replace")

print(f"{rounds} rounds per profile, {gen} generated tokens, bench and serve interleaved (fresh process each run)\n")
print("| profile | bench s/token | serve s/token (server timings) | ratio | bench prefill+decode s | HTTP request wall s | ratio | same text |")
print("|---|---|---|---|---|---|---|---|")
for profile in ["slow", "spec"]:
    bench, serve = [], []
    for line in open(f"{work}/{profile}.runs"):
        arm, payload = line.split(" ", 1)
        (bench if arm == "bench" else serve).append(json.loads(payload))
    ratios = [s["timings"]["predicted_per_token_ms"] / 1e3 / b["seconds_per_token"] for b, s in zip(bench, serve)]
    e2e = [s["client_seconds"] / (b["seconds"]["prefill"] + b["seconds"]["decode"]) for b, s in zip(bench, serve)]
    same = all(s["choices"][0]["message"]["content"] == text_of(b["generated_ids"]) for b, s in zip(bench, serve))
    med = statistics.median
    draft = ""
    if "draft_n" in serve[0]["timings"]:
        t = serve[0]["timings"]
        draft = f" (draft {t['draft_n_accepted']}/{t['draft_n']} accepted)"
    print(f"| {profile}{draft} | {med(b['seconds_per_token'] for b in bench):.4f} "
          f"| {med(s['timings']['predicted_per_token_ms'] / 1e3 for s in serve):.4f} | **{med(ratios):.3f}** "
          f"(min {min(ratios):.3f}, max {max(ratios):.3f}) "
          f"| {med(b['seconds']['prefill'] + b['seconds']['decode'] for b in bench):.3f} "
          f"| {med(s['client_seconds'] for s in serve):.3f} | **{med(e2e):.3f}** | {'yes' if same else 'NO'} |")
PY

# A menu choice: the orchestrator's schema (a root anyOf of the five menu entries),
# greedy, streamed, so the time at which the choice (experiment and params) is
# complete is seen apart from the free-text rationale that follows it.
start_server "$WORK/spec.toml"
python3 - "$ADDR" <<'PY'
import http.client, json, sys, time
addr = sys.argv[1]
host, port = addr.rsplit(":", 1)
def entry(eid, params):
    props = {n: {"type": t, "minimum": lo, "maximum": hi} for n, (t, lo, hi) in params.items()}
    return {"type": "object", "properties": {
        "experiment": {"type": "string", "enum": [eid]},
        "params": {"type": "object", "properties": props, "required": list(props), "additionalProperties": False},
        "rationale": {"type": "string", "maxLength": 400}},
        "required": ["experiment", "params", "rationale"], "additionalProperties": False}
schema = {"anyOf": [
    entry("rerank_pins", {"pin_count": ("integer", 0, 512)}),
    entry("deepen_warm_set", {"warm_set": ("integer", 0, 1024)}),
    entry("stage_speculative", {"draft_len": ("integer", 0, 8)}),
    entry("rebalance_trunk_cache", {"trunk_fraction": ("number", 0.0, 1.0)}),
    entry("remeasure", {})]}
print("\n| menu choice (default-size model, spec profile) | run | max_tokens | first byte at s | choice made at s | answer done at s | completion tokens | prompt tokens | valid |")
print("|---|---|---|---|---|---|---|---|---|")
for run, max_tokens in [("cold (first request)", 64), ("warm", 64), ("warm", 512)]:
    body = json.dumps({"model": "tinyk3", "temperature": 0, "max_tokens": max_tokens, "stream": True,
        "stream_options": {"include_usage": True},
        "messages": [{"role": "system", "content": "You tune a tiered MoE serving stack. Answer with one experiment."},
                     {"role": "user", "content": "Heat coverage 0.62, far tier down, 0.14 s/token. Choose."}],
        "response_format": {"type": "json_schema", "json_schema": {"name": "menu_choice", "schema": schema, "strict": True}}})
    c = http.client.HTTPConnection(host, int(port), timeout=600)
    t0 = time.perf_counter()
    c.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
    r = c.getresponse()
    text, first_at, chosen_at, usage = "", None, None, None
    for raw in r:
        line = raw.decode().strip()
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        ev = json.loads(line[6:])
        if ev.get("usage"):
            usage = ev["usage"]
        for ch in ev.get("choices", []):
            text += ch["delta"].get("content", "") or ""
        if first_at is None and text:
            first_at = time.perf_counter() - t0
        if chosen_at is None and '"rationale":"' in text:
            chosen_at = time.perf_counter() - t0
    done_at = time.perf_counter() - t0
    answer = json.loads(text)
    ok = answer["experiment"] in {"rerank_pins", "deepen_warm_set", "stage_speculative", "rebalance_trunk_cache", "remeasure"} \
        and len(answer["rationale"]) <= 400
    choice = text[:text.index(',"rationale"')]
    print(f"| `{choice}...` | {run} | {max_tokens} | {first_at:.3f} | {chosen_at:.3f} | {done_at:.3f} "
          f"| {usage['completion_tokens']} | {usage['prompt_tokens']} | {'yes' if ok else 'NO'} |")
PY
stop_server
