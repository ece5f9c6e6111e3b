#!/usr/bin/env bash
# A real menu choice: the orchestrator's own request bodies (its prompt, its
# menu schema, `[model] max_tokens` of config.toml, as printed by
# `cargo run --example menu_request`) sent to `tinyk3 serve` with the embedded
# demo's serve arguments (`[embedded] serve_args` of config.toml) on a
# default-size checkpoint, streamed, one request per simulated cycle.
#
# Per profile, one server answers the cycles in pairs, side by side:
#   new: `cache_prompt` left at its default (true): the KV cache of the prefix
#        shared with the previous request is reused;
#   old: `cache_prompt: false`: the whole prompt window is prefilled, as before.
# The new arm goes first in each pair, so the cache it finds is the previous
# cycle's prompt (the old arm of the previous pair leaves it there), just as
# in the daemon; cycle 1 of the new arm starts cold. Both arms must give the
# same text. Jump-forward over forced bytes is on in both (it predates this).
#
# Usage: tinyk3/bench/menu_choice.sh [CYCLES]   (default 7)
# Env:   CARGO_TARGET_DIR, TINYK3_BIN (a built release binary; skips the build),
#        TINYK3_MODEL (an existing default-size checkpoint; skips `tinyk3 init`),
#        MENU_CONFIG (default <repo>/config.toml), PROFILES (default "slow tuned"),
#        TINYK3_BENCH_TMP (default /tmp)
set -euo pipefail

CYCLES=${1:-7}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
CONFIG=${MENU_CONFIG:-$ROOT/config.toml}
BIN=${TINYK3_BIN:-}
if [ -z "$BIN" ]; then
  (cd "$ROOT" && cargo build -p tinyk3 --release --quiet)
  BIN=$CARGO_TARGET_DIR/release/tinyk3
fi
(cd "$ROOT" && cargo build --example menu_request --quiet)

WORK=$(mktemp -d "${TINYK3_BENCH_TMP:-/tmp}/tinyk3-menu-bench.XXXXXX")
SERVER_PID=""
cleanup() {
  [ -n "$SERVER_PID" ] && kill "$SERVER_PID" 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

MODEL=${TINYK3_MODEL:-}
if [ -z "$MODEL" ]; then
  MODEL=$WORK/model
  "$BIN" init --out "$MODEL" >/dev/null
fi
for i in $(seq "$CYCLES"); do
  "$CARGO_TARGET_DIR/debug/examples/menu_request" "$CONFIG" "$i" >"$WORK/body.$i.json"
done
mapfile -t SERVE_ARGS < <(python3 -c '
import sys, tomllib
for a in tomllib.load(open(sys.argv[1], "rb")).get("embedded", {}).get("serve_args", []):
    print(a)' "$CONFIG")

# slow: the demo's starting profile (tinyk3/profiles/slow-start.toml) without
# its far tier; tuned: the whole trunk resident and a cache for most experts.
cat >"$WORK/slow.toml" <<'TOML'
[memory]
budget_gb = 0.3
trunk_gb = 0.05
cache_gb = 0.25
[compute]
threads = 2
TOML
cat >"$WORK/tuned.toml" <<'TOML'
[memory]
budget_gb = 1.2
trunk_gb = 0.3
cache_gb = 0.8
[compute]
threads = 2
TOML

for profile in ${PROFILES:-slow tuned}; do
  "$BIN" serve "$MODEL" --profile "$WORK/$profile.toml" --listen 127.0.0.1:0 "${SERVE_ARGS[@]}" 2>"$WORK/serve.err" &
  SERVER_PID=$!
  for _ in $(seq 1200); do grep -q "listening on" "$WORK/serve.err" 2>/dev/null && break; sleep 0.05; done
  ADDR=$(sed -n 's/^listening on http:\/\///p' "$WORK/serve.err")
  python3 - "$ADDR" "$WORK" "$CYCLES" "$profile" <<'PY'
import http.client, json, sys, time
addr, work, cycles, profile = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
host, port = addr.rsplit(":", 1)
with open(f"{work}/{profile}.runs", "w") as out:
    for i in range(1, cycles + 1):
        for arm in ["new", "old"]:
            body = json.load(open(f"{work}/body.{i}.json"))
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
            if arm == "old":
                body["cache_prompt"] = False
            c = http.client.HTTPConnection(host, int(port), timeout=900)
            t0 = time.perf_counter()
            c.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
            r = c.getresponse()
            assert r.status == 200, r.read()
            text, chosen_at, timings, usage = "", None, None, None
            for raw in r:
                line = raw.decode().strip()
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                ev = json.loads(line[6:])
                timings = ev.get("timings", timings)
                usage = ev.get("usage") or usage
                for ch in ev.get("choices", []):
                    text += ch["delta"].get("content", "") or ""
                if chosen_at is None and '"rationale":"' in text:
                    chosen_at = time.perf_counter() - t0
            done_at = time.perf_counter() - t0
            out.write(json.dumps({"cycle": i, "arm": arm, "text": text, "chosen_at": chosen_at,
                                  "done_at": done_at, "timings": timings, "usage": usage}) + "\n")
PY
  kill -TERM "$SERVER_PID"
  wait "$SERVER_PID"
  SERVER_PID=""
done

python3 - "$WORK" "$CYCLES" "$CONFIG" ${PROFILES:-slow tuned} <<'PY'
import json, statistics, sys, tomllib
work, cycles, config, profiles = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4:]
body = json.load(open(f"{work}/body.1.json"))
serve_args = tomllib.load(open(config, "rb")).get("embedded", {}).get("serve_args", [])
med = statistics.median
chars = sum(len(m["content"]) for m in body["messages"])
print(f"{cycles} cycles per profile; max_tokens {body['max_tokens']}; serve args {' '.join(serve_args) or '(none)'}; "
      f"messages of cycle 1: {chars} characters\n")
print("| profile | arm | choice made at s (median, min-max) | answer done at s (median, min-max) | prompt tokens fed / cached | prefill ms | decode tokens | decode ms | same text as old |")
print("|---|---|---|---|---|---|---|---|---|")
for profile in profiles:
    runs = [json.loads(l) for l in open(f"{work}/{profile}.runs")]
    old = {r["cycle"]: r for r in runs if r["arm"] == "old"}
    for arm in ["old", "new"]:
        # Cycle 1 of the new arm starts cold; the steady state is cycles 2..N.
        rs = [r for r in runs if r["arm"] == arm and (arm == "old" or r["cycle"] > 1)]
        ch = [r["chosen_at"] for r in rs]
        dn = [r["done_at"] for r in rs]
        same = all(r["text"] == old[r["cycle"]]["text"] for r in runs if r["arm"] == "new")
        t = lambda k: med(r["timings"][k] for r in rs)
        print(f"| {profile} | {arm} | {med(ch):.3f} ({min(ch):.3f}-{max(ch):.3f}) | {med(dn):.3f} ({min(dn):.3f}-{max(dn):.3f}) "
              f"| {t('prompt_n'):.0f} / {t('cache_n'):.0f} | {t('prompt_ms'):.0f} | {t('predicted_n'):.0f} | {t('predicted_ms'):.0f} "
              f"| {'yes' if same else 'NO'} |")
    cold = next(r for r in runs if r["arm"] == "new" and r["cycle"] == 1)
    print(f"| {profile} | new, cycle 1 (cold) | {cold['chosen_at']:.3f} | {cold['done_at']:.3f} | {cold['timings']['prompt_n']} / {cold['timings']['cache_n']} "
          f"| {cold['timings']['prompt_ms']:.0f} | {cold['timings']['predicted_n']} | {cold['timings']['predicted_ms']:.0f} | |")
print("\nanswers (new arm):")
for profile in profiles:
    for l in open(f"{work}/{profile}.runs"):
        r = json.loads(l)
        if r["arm"] == "new":
            print(f"  {profile} cycle {r['cycle']}: {r['text']}")
PY
