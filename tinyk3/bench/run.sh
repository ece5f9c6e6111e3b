#!/usr/bin/env bash
# tinyk3 knob benchmark: builds release, writes a default-size checkpoint in a temp
# dir, runs every profile of the matrix interleaved (the order rotates each round),
# and prints a Markdown table of medians and ratios measured side by side.
#
# Usage: tinyk3/bench/run.sh [ROUNDS] [GEN]     (defaults: 5 rounds, 24 tokens)
# Env:   CARGO_TARGET_DIR (default: <repo>/target), TINYK3_BENCH_TMP (default: /tmp),
#        SECTIONS (default "matrix split startup"): which tables to run,
#        SPLIT_BUDGET_GB (default 0.32), SPLIT_FRACTIONS (default below).
set -euo pipefail

ROUNDS=${1:-5}
GEN=${2:-24}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
(cd "$ROOT" && cargo build -p tinyk3 --release --quiet)
BIN=$CARGO_TARGET_DIR/release/tinyk3

WORK=$(mktemp -d "${TINYK3_BENCH_TMP:-/tmp}/tinyk3-bench.XXXXXX")
PIDS=()
cleanup() {
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT

MODEL=$WORK/model
INIT_START=$(date +%s.%N)
"$BIN" init --out "$MODEL" >&2
INIT_END=$(date +%s.%N)

# Heat from other traffic than the measured prompt, ranked into a pin list.
"$BIN" bench "$MODEL" --ids 900,4000,77,31000,5,12 --gen 64 --incremental \
  --dump-cache-trace "$WORK/heat" >/dev/null
"$BIN" pins "$MODEL" --hist "$WORK/heat/expert_hist.json" --out "$WORK/pins.txt"

# Every expert, heat-ranked first: a run whose decode never touches the disk.
python3 - "$WORK/pins.txt" "$WORK/pins_all.txt" <<'PY'
import sys
lines = open(sys.argv[1]).read().split("\n")
header, rows = lines[0], [l for l in lines[1:] if l.strip()]
_, _, layers, experts, _ = header.split()
seen = {tuple(r.split()[:2]) for r in rows}
rest = [f"{l} {e} 0" for l in range(int(layers)) for e in range(int(experts)) if (str(l), str(e)) not in seen]
open(sys.argv[2], "w").write("\n".join([header] + rows + rest) + "\n")
PY

# Far tiers: one that can hold 256 experts, one that holds none (always `missing`).
# (Not in $(...): the pid must be recorded in this shell so the trap can stop it.)
start_server() {
  local warm=$1 out=$WORK/server.$1.out
  "$BIN" expert-server --model "$MODEL" --listen 127.0.0.1:0 --warm-set "$warm" >"$out" 2>/dev/null &
  PIDS+=($!)
  for _ in $(seq 200); do grep -q "listening on" "$out" 2>/dev/null && break; sleep 0.05; done
  SERVER_ADDR=$(sed -n 's/^listening on //p' "$out")
}
start_server 256
FAR_WARM=$SERVER_ADDR
start_server 0
FAR_COLD=$SERVER_ADDR
# A port nobody listens on: bind, note it, close.
FAR_DEAD=127.0.0.1:$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')

# 127 pinned experts = 0.1998 GB, the same bytes as 0.2 GB of extra LRU cache.
PINS="--pins $WORK/pins.txt --pin-count 127"
TRUNK_GB=$(python3 -c "import json; print(json.load(open('$MODEL/manifest.json'))['trunk']['bytes']/1e9)")
declare -a NAMES ARGS
add() { NAMES+=("$1"); ARGS+=("$2"); }
add "cache 0.1 GB"                 "--cache-gb 0.1"
add "cache 0.4 GB"                 "--cache-gb 0.4"
add "cache 1.7 GB (all experts)"   "--cache-gb 1.7"
add "LRU 0.3 GB"                   "--cache-gb 0.3"
add "LRU 0.1 GB + 0.2 GB heat pins" "--cache-gb 0.1 $PINS"
add "far warm 256, cache 0.1"      "--cache-gb 0.1 --far $FAR_WARM --far-warm-set 256"
add "far up, holds nothing, cache 0.1" "--cache-gb 0.1 --far $FAR_COLD"
add "far dead, cache 0.1"          "--cache-gb 0.1 --far $FAR_DEAD"
add "all experts pinned, cache 0.01" "--cache-gb 0.01 --pins $WORK/pins_all.txt"
add "spec 4, cache 0.4"            "--cache-gb 0.4 --spec 4"
add "budget 0.6: trunk 0.10 / cache 0.50" "--budget-gb 0.6 --trunk-gb 0.10 --cache-gb 0.50"
add "budget 0.6: trunk 0.20 / cache 0.40" "--budget-gb 0.6 --trunk-gb 0.20 --cache-gb 0.40"
add "budget 0.6: trunk all / cache rest"  "--budget-gb 0.6 --trunk-gb $TRUNK_GB --cache-gb $(python3 -c "print(round(0.6-$TRUNK_GB,6))")"

SECTIONS=${SECTIONS:-matrix split startup}
has() { [[ " $SECTIONS " == *" $1 "* ]]; }

if has matrix; then
mkdir -p "$WORK/out"
n=${#NAMES[@]}
for round in $(seq 1 "$ROUNDS"); do
  for k in $(seq 0 $((n - 1))); do
    i=$(((k + round) % n))
    # shellcheck disable=SC2086
    "$BIN" bench "$MODEL" --ids 1,2,3,4 --gen "$GEN" --incremental --threads 2 ${ARGS[$i]} \
      --out "$WORK/out/$i.$round.json" >/dev/null
  done
  echo "round $round/$ROUNDS done" >&2
done

printf '%s\n' "${NAMES[@]}" >"$WORK/names.txt"
python3 - "$WORK" "$ROUNDS" "$GEN" "$INIT_START" "$INIT_END" <<'PY'
import json, statistics, sys
work, rounds, gen, t0, t1 = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5])
names = open(f"{work}/names.txt").read().splitlines()
runs = [[json.load(open(f"{work}/out/{i}.{r}.json")) for r in range(1, rounds + 1)] for i in range(len(names))]
ids = {json.dumps(x["generated_ids"]) for rs in runs for x in rs}
digests = {x["logits_digest"] for rs in runs for x in rs}
med = lambda v: statistics.median(v)
spt = [med([x["seconds_per_token"] for x in rs]) for rs in runs]
base = {0: 0, 1: 0, 2: 0, 3: 3, 4: 3, 5: 0, 6: 0, 7: 0, 8: 0, 9: 1, 10: 10, 11: 10, 12: 10}
print(f"{rounds} interleaved rounds, {gen} tokens each, 2 threads; medians (min-max).")
print(f"Distinct generated_ids across all {rounds*len(names)} runs: {len(ids)}; distinct logits digests: {len(digests)}.")
print(f"`tinyk3 init` of the default checkpoint: {t1-t0:.1f} s.\n")
print("| profile | s/token median (min-max) | vs | ratio | disk MB/run | hits pinned/cache/far/cold | far | draft acc. | peak RSS MB | weights limit MB | run wall s |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for i, (name, rs) in enumerate(zip(names, runs)):
    v = [x["seconds_per_token"] for x in rs]
    b = base[i]
    ratio = "" if b == i else f"{spt[i]/spt[b]:.2f}"
    vs = "" if b == i else f"#{b+1}"
    h = rs[0]["hits"]
    far = rs[0]["far"]
    fs = "-" if not far["configured"] else ("up, %d/%d hit" % (far["hits"], far["hits"] + far["misses"]) if far["available"] else "down")
    d = rs[0]["draft"]
    acc = "-" if not d["proposed"] else f'{d["accepted"]}/{d["proposed"]}'
    disk = med([x["disk_bytes_read"] for x in rs]) / 1e6
    rss = max(x["peak_rss_bytes"] for x in rs) / 1e6
    lim = rs[0]["held_weight_bytes_limit"] / 1e6
    wall = med([sum(x["seconds"].values()) for x in rs])
    print(f"| {i+1}. {name} | {spt[i]*1000:.1f} ms ({min(v)*1000:.0f}-{max(v)*1000:.0f}) | {vs} | {ratio} | {disk:.0f} | {h['pinned']}/{h['cache']}/{h['far']}/{h['cold']} | {fs} | {acc} | {rss:.0f} | {lim:.0f} | {wall:.2f} |")
PY
fi

# The trunk/cache split at one fixed budget, as the orchestrator's
# `rebalance_trunk_cache` planner sets it (src/plan/rebalance_trunk_cache.rs): trunk_gb =
# trunk_fraction x (trunk + cache) rounded to whole MB, cache_gb = the rest.
# ABAB-interleaved (the order rotates each round); medians and ratios vs the
# best point.
if has split; then
SPLIT_BUDGET_GB=${SPLIT_BUDGET_GB:-0.32}
SPLIT_FRACTIONS=${SPLIT_FRACTIONS:-0.00 0.20 0.40 0.50 0.55 0.60 0.65 0.70 0.75 0.90}
read -r -a FRACS <<<"$SPLIT_FRACTIONS"
mkdir -p "$WORK/split"
m=${#FRACS[@]}
for round in $(seq 1 "$ROUNDS"); do
  for k in $(seq 0 $((m - 1))); do
    i=$(((k + round) % m))
    read -r tgb cgb < <(python3 -c "b=round($SPLIT_BUDGET_GB*1e9); t=min(round(${FRACS[$i]}*b/1e6)*10**6, b//10**6*10**6); print(t/1e9, (b-t)/1e9)")
    "$BIN" bench "$MODEL" --ids 1,2,3,4 --gen "$GEN" --incremental --threads 2 \
      --budget-gb "$SPLIT_BUDGET_GB" --trunk-gb "$tgb" --cache-gb "$cgb" \
      --out "$WORK/split/$i.$round.json" >/dev/null
  done
  echo "split round $round/$ROUNDS done" >&2
done
python3 - "$WORK" "$ROUNDS" "$GEN" "$SPLIT_BUDGET_GB" "${FRACS[@]}" <<'PY'
import json, statistics, sys
work, rounds, gen, budget, fracs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), sys.argv[5:]
runs = [[json.load(open(f"{work}/split/{i}.{r}.json")) for r in range(1, rounds + 1)] for i in range(len(fracs))]
ids = {json.dumps(x["generated_ids"]) for rs in runs for x in rs}
med = statistics.median
spt = [med([x["seconds_per_token"] for x in rs]) for rs in runs]
best = min(range(len(fracs)), key=lambda i: spt[i])
print(f"\nTrunk/cache split at a fixed budget of {budget} GB: {rounds} interleaved rounds, {gen} tokens each, 2 threads; medians (min-max).")
print(f"Distinct generated_ids across all {rounds*len(fracs)} runs: {len(ids)}.\n")
print("| trunk_fraction | trunk GB resident / cache GB (slots) | s/token median (min-max) | vs best | disk MB/token: trunk + experts | hits cache/cold | peak RSS MB | weights limit MB |")
print("|---|---|---|---|---|---|---|---|")
for i, (f, rs) in enumerate(zip(fracs, runs)):
    v = [x["seconds_per_token"] for x in rs]
    r = rs[0]["residency"]
    passes = gen + 1  # one prefill pass, then one pass per decode step
    tb = med([x["trunk_bytes_read"] for x in rs]) / 1e6 / passes
    eb = med([x["expert_bytes_read"] for x in rs]) / 1e6 / passes
    h = rs[0]["hits"]
    rss = max(x["peak_rss_bytes"] for x in rs) / 1e6
    lim = rs[0]["held_weight_bytes_limit"] / 1e6
    mark = " **best**" if i == best else ""
    print(f"| {f}{mark} | {r['trunk_resident_bytes']/1e9:.4f} / {rs[0]['settings']['cache_gb']:.4f} ({r['cache_capacity_experts']}) | {spt[i]*1000:.1f} ms ({min(v)*1000:.0f}-{max(v)*1000:.0f}) | {spt[i]/spt[best]:.2f} | {tb:.1f} + {eb:.1f} | {h['cache']}/{h['cold']} | {rss:.0f} | {lim:.0f} |")
PY
fi

# Start-up and the fully cached step. Start-up = process start to the first
# decode step (exec, open: pins + resident trunk, prefill), measured from
# outside the process; "cold" first drops this checkpoint's pages from the page
# cache (posix_fadvise DONTNEED on trunk.bin only), so the load pays the device.
# One untimed run first puts the pinned experts in the page cache ("warm").
if has startup; then
mkdir -p "$WORK/startup"
"$BIN" bench "$MODEL" --ids 1 --gen 1 --cache-gb 0.01 --pins "$WORK/pins_all.txt" >/dev/null
declare -a SNAMES SARGS SCOLD
sadd() { SNAMES+=("$1"); SARGS+=("$2"); SCOLD+=("$3"); }
sadd "all experts pinned (fully cached), warm page cache" "--cache-gb 0.01 --pins $WORK/pins_all.txt" 0
sadd "cache 0.4 GB, warm page cache" "--cache-gb 0.4" 0
sadd "cache 0.4 GB, cold page cache" "--cache-gb 0.4" 1
s=${#SNAMES[@]}
for round in $(seq 1 "$ROUNDS"); do
  for k in $(seq 0 $((s - 1))); do
    i=$(((k + round) % s))
    if [ "${SCOLD[$i]}" = 1 ]; then
      python3 -c "
import os, sys
for f in sys.argv[1:]:
    fd = os.open(f, os.O_RDONLY); os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED); os.close(fd)" \
        "$MODEL/trunk.bin"
    fi
    # shellcheck disable=SC2086
    python3 - "$WORK/startup/$i.$round.wall" "$BIN" bench "$MODEL" --ids 1,2,3,4 --gen "$GEN" \
      --incremental --threads 2 ${SARGS[$i]} --out "$WORK/startup/$i.$round.json" <<'PY'
import subprocess, sys, time
t0 = time.perf_counter()
subprocess.run(sys.argv[2:], check=True, stdout=subprocess.DEVNULL)
open(sys.argv[1], "w").write(str(time.perf_counter() - t0))
PY
  done
  # What start-up did before loads were mapped: read the same weights with O_DIRECT.
  python3 - "$WORK/startup/direct.$round.wall" "$MODEL/trunk.bin" "$MODEL/experts.bin" <<'PY'
import subprocess, sys, time
t0 = time.perf_counter()
for f in sys.argv[2:]:
    subprocess.run(["dd", f"if={f}", "of=/dev/null", "bs=4M", "iflag=direct"], check=True, stderr=subprocess.DEVNULL)
open(sys.argv[1], "w").write(str(time.perf_counter() - t0))
PY
  echo "startup round $round/$ROUNDS done" >&2
done
printf '%s\n' "${SNAMES[@]}" >"$WORK/snames.txt"
python3 - "$WORK" "$ROUNDS" "$GEN" <<'PY'
import json, statistics, sys
work, rounds, gen = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
names = open(f"{work}/snames.txt").read().splitlines()
med = statistics.median
print(f"\nStart-up and decode: {rounds} interleaved rounds, --ids 1,2,3,4 --gen {gen}, 2 threads; medians (min-max).\n")
print("| profile | process wall s | start-up to first decode step s (open + prefill + exec) | start-up share | decode step ms | decode disk MB | weights loaded at start-up MB |")
print("|---|---|---|---|---|---|---|")
for i, name in enumerate(names):
    js = [json.load(open(f"{work}/startup/{i}.{r}.json")) for r in range(1, rounds + 1)]
    walls = [float(open(f"{work}/startup/{i}.{r}.wall").read()) for r in range(1, rounds + 1)]
    # Everything but the decode steps and the report after them: exec, open, prefill.
    starts = [w - j["seconds"]["decode"] for w, j in zip(walls, js)]
    share = [s / w for s, w in zip(starts, walls)]
    spt = [j["seconds_per_token"] for j in js]
    disk = med([j["disk_bytes_read"] for j in js]) / 1e6
    r = js[0]["residency"]
    loaded = (r["trunk_resident_bytes"] + r["pinned_bytes"]) / 1e6
    print(f"| {name} | {med(walls):.2f} ({min(walls):.2f}-{max(walls):.2f}) | {med(starts):.2f} ({min(starts):.2f}-{max(starts):.2f}) | {med(share)*100:.0f}% | {med(spt)*1000:.1f} ({min(spt)*1000:.0f}-{max(spt)*1000:.0f}) | {disk:.0f} | {loaded:.0f} |")
d = [float(open(f"{work}/startup/direct.{r}.wall").read()) for r in range(1, rounds + 1)]
print(f"\nThe same 1847 MB (trunk.bin + experts.bin) read with O_DIRECT (`dd iflag=direct bs=4M`), as start-up read its weights before they were mapped: {med(d):.2f} s ({min(d):.2f}-{max(d):.2f}).")
PY
fi
