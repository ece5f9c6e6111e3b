#!/usr/bin/env bash
# Builds the real kimi-k3-in-c engine (`bin/k3`) from a source directory and
# writes a tiny checkpoint and packed trunk for it, for the kimi-k3-in-c test
# tier, the benchmarks and examples/kimi-k3-in-c.toml.
#
# The source comes from KIMI_K3_SRC, a kimi-k3-in-c checkout (CI: the vendored
# copy, "$repo/../shared/vendor/kimi-k3-in-c"; a user: their own clone). It is
# treated as read-only: it is copied into a cache OUTSIDE the checkout and
# built there with `make bin/k3` (C99 + OpenMP, gcc). The checkpoint is ours,
# written by scripts/k3_checkpoint.py (Python stdlib only, no torch, random
# deterministic weights in exactly the engine's format). A second run is a
# fast no-op: the build is stamped with a digest of the source's contents and
# the toolchain, the checkpoint with a digest of its writer and its arguments.
#
# Prints, on stdout and nothing else, lines a shell can `eval`:
#   K3_BIN=/path/to/bin/k3          the engine
#   K3_MODEL=/path/to/model         config.json + model.safetensors
#   K3_TRUNK=/path/to/trunk         trunk.bin + trunk.json (for --trunk)
#   K3_TOP_K, K3_N_EXPERTS, K3_N_LAYERS, K3_MOE_LAYERS, K3_VOCAB
#   K3_IDS=a,b,c,d,e                a valid --ids list for this vocabulary
#   K3_EXPERT_BYTES                 the engine's cache slot for one expert
#   K3_EXPERT_PAYLOAD_BYTES         the expert's own bytes on disk
#   K3_CACHE_GB_MIN                 smallest --cache-gb the engine accepts
#   K3_CACHE_GB_ALL                 --cache-gb that holds every routed expert
#   K3_TRUNK_GB_ALL                 --trunk-gb that pins every trunk layer
#   K3_CYCLE                        period of the greedy output (0: none)
#   K3_TRUNK_BYTES, K3_MODEL_BYTES, K3_SEED, K3_SRC_DIGEST
# Progress goes to stderr. Exit codes: 0 ok, 1 build/checkpoint failure,
# 2 KIMI_K3_SRC unset or not a kimi-k3-in-c source directory.
#
# Usage (a relative KIMI_K3_SRC is relative to the current directory):
#   k3_env="$(KIMI_K3_SRC=/path/to/kimi-k3-in-c bash scripts/kimi-k3.sh)" || exit
#   eval "$k3_env"
#   OMP_WAIT_POLICY=passive "$K3_BIN" "$K3_MODEL" --ids "$K3_IDS" --gen 8 \
#     --incremental --cache-gb 0.03 --trunk "$K3_TRUNK" --trunk-gb 0.02 \
#     --threads 2 --dump-cache-trace DIR --out FILE
# The engine checks --cache-gb + --trunk-gb (+ its other buffers) against 95%
# of MemAvailable whatever the checkpoint's size, and refuses to start (exit 1)
# above it: keep the budgets near K3_CACHE_GB_ALL / K3_TRUNK_GB_ALL, which
# already hold the whole tiny checkpoint.
#
# Env: KIMI_K3_SRC (required), ORCH_K3_CACHE (cache dir, default
# ${XDG_CACHE_HOME:-$HOME/.cache}/orchestrator/kimi-k3), ORCH_K3_JOBS (make -j,
# default 2), ORCH_K3_SEED (checkpoint seed, default 1), ORCH_K3_CKPT_ARGS
# (extra shape options for k3_checkpoint.py, e.g. "--experts 32").
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"
CACHE="${ORCH_K3_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/orchestrator/kimi-k3}"
JOBS="${ORCH_K3_JOBS:-2}"
SEED="${ORCH_K3_SEED:-1}"
CKPT_ARGS="${ORCH_K3_CKPT_ARGS:-}"
WRITER="$here/k3_checkpoint.py"
# CC is pinned to gcc (the engine's reference compiler for OpenMP); the make
# variables here are part of the build stamp.
MAKE_VARS=(CC=gcc)

log() { echo "kimi-k3.sh: $*" >&2; }

usage_src() {
  local vendored="$repo/../shared/vendor/kimi-k3-in-c"
  log "$1"
  log "set KIMI_K3_SRC to a kimi-k3-in-c source directory (it needs Makefile,"
  log "src/cli/k3_run.c and include/k3/k3.h), for example"
  if [ -d "$vendored" ]; then
    log "  KIMI_K3_SRC=$(cd "$vendored" && pwd) bash scripts/kimi-k3.sh   (the vendored copy)"
  fi
  log "  KIMI_K3_SRC=~/src/kimi-k3-in-c bash scripts/kimi-k3.sh"
  exit 2
}

# ---------------------------------------------------------------- the source
[ -n "${KIMI_K3_SRC:-}" ] || usage_src "KIMI_K3_SRC is not set"
[ -d "$KIMI_K3_SRC" ] || usage_src "KIMI_K3_SRC=$KIMI_K3_SRC is not a directory"
src="$(cd "$KIMI_K3_SRC" && pwd -P)"
for f in Makefile src/cli/k3_run.c src/io/k3_st.c src/cache/k3_cache.c include/k3/k3.h; do
  [ -f "$src/$f" ] || usage_src "KIMI_K3_SRC=$KIMI_K3_SRC is not a kimi-k3-in-c source directory (no $f)"
done
grep -q 'bin/k3\|CLI_BIN' "$src/Makefile" ||
  usage_src "KIMI_K3_SRC=$KIMI_K3_SRC: its Makefile has no bin/k3 target"

# Digest of the source's CONTENTS (relative path + bytes of every file), so a
# fresh clone or a touched file with unchanged contents is still a no-op. A
# build tree or git metadata in a user's clone is not source: neither copied
# nor hashed, so building in the clone itself does not force a rebuild here.
src_digest() {
  (
    cd "$src"
    find . \( -path ./.git -o -path ./build -o -path ./bin \) -prune -o -type f -print0 |
      LC_ALL=C sort -z | xargs -0 sha256sum
  ) | sha256sum | cut -d' ' -f1
}

# ---------------------------------------------------------------- tools
need_apt=()
ensure_tools() {
  command -v gcc >/dev/null 2>&1 || need_apt+=(gcc)
  command -v make >/dev/null 2>&1 || need_apt+=(make)
  command -v python3 >/dev/null 2>&1 || need_apt+=(python3)
  if [ "${#need_apt[@]}" -eq 0 ] && ! echo '#include <omp.h>' | gcc -fopenmp -x c -E - >/dev/null 2>&1; then
    need_apt+=(libgomp1 libgcc-12-dev)
  fi
  if [ "${#need_apt[@]}" -gt 0 ]; then
    log "installing ${need_apt[*]} (apt-get)"
    local sudo=""
    [ "$(id -u)" = 0 ] || sudo="sudo"
    $sudo apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need_apt[@]}" >&2
    need_apt=()
  fi
}

# ---------------------------------------------------------------- the engine
engine="$CACHE/engine"
bin="$engine/bin/k3"
build_stamp_file="$engine/.orchestrator-built"

build_engine() {
  local digest want t0 tmp
  digest="$(src_digest)"
  K3_SRC_DIGEST="$digest"
  if [ -x "$bin" ] && [ -f "$build_stamp_file" ]; then
    # Cheap check first: the toolchain only matters if the source matches.
    if [ "$(head -n1 "$build_stamp_file")" = "src $digest" ]; then
      want="$(build_stamp "$digest")"
      [ "$(cat "$build_stamp_file")" = "$want" ] && return 0
    fi
  fi
  ensure_tools
  want="$(build_stamp "$digest")"
  log "building bin/k3 from $src into $engine (make -j$JOBS bin/k3)"
  t0=$SECONDS
  tmp="$(mktemp -d "$CACHE/engine.tmp.XXXXXX")"
  chmod 755 "$tmp"
  # cp, not rsync (not installed by default); the excluded trees are dropped
  # after the copy. The source is read-only, so the copy is made writable.
  cp -R "$src/." "$tmp/"
  rm -rf "$tmp/.git" "$tmp/build" "$tmp/bin"
  chmod -R u+w "$tmp"
  if ! make -C "$tmp" -j"$JOBS" "${MAKE_VARS[@]}" bin/k3 >&2; then
    rm -rf "$CACHE/engine.failed"
    mv "$tmp" "$CACHE/engine.failed"
    log "make bin/k3 failed (the tree is kept in $CACHE/engine.failed)"
    exit 1
  fi
  if ! "$tmp/bin/k3" --version >&2; then
    rm -rf "$CACHE/engine.failed"
    mv "$tmp" "$CACHE/engine.failed"
    log "the built bin/k3 does not run (the tree is kept in $CACHE/engine.failed)"
    exit 1
  fi
  rm -rf "$CACHE/engine.failed"
  echo "$want" >"$tmp/.orchestrator-built"
  rm -rf "$engine.old"
  [ -d "$engine" ] && mv "$engine" "$engine.old"
  mv "$tmp" "$engine"
  rm -rf "$engine.old"
  log "built in $((SECONDS - t0)) s"
}

build_stamp() {
  echo "src $1"
  echo "make ${MAKE_VARS[*]} bin/k3"
  gcc --version 2>/dev/null | head -n1
  uname -m
}

# ---------------------------------------------------------------- the checkpoint
ckpt="$CACHE/checkpoint"
ckpt_stamp_file="$ckpt/.orchestrator-written"

write_checkpoint() {
  local want t0 tmp
  want="writer $(sha256sum "$WRITER" | cut -d' ' -f1) seed $SEED args $CKPT_ARGS"
  if [ -f "$ckpt_stamp_file" ] && [ "$(cat "$ckpt_stamp_file")" = "$want" ] &&
    [ -f "$ckpt/model/model.safetensors" ] && [ -f "$ckpt/trunk/trunk.bin" ]; then
    return 0
  fi
  ensure_tools
  log "writing the tiny checkpoint and packed trunk into $ckpt (seed $SEED)"
  t0=$SECONDS
  tmp="$(mktemp -d "$CACHE/checkpoint.tmp.XXXXXX")"
  chmod 755 "$tmp"
  # shellcheck disable=SC2086  # CKPT_ARGS is a list of options on purpose
  if ! python3 "$WRITER" "$tmp/model" "$tmp/trunk" --seed "$SEED" $CKPT_ARGS >&2; then
    log "k3_checkpoint.py failed"
    rm -rf "$tmp"
    exit 1
  fi
  echo "$want" >"$tmp/.orchestrator-written"
  rm -rf "$ckpt.old"
  [ -d "$ckpt" ] && mv "$ckpt" "$ckpt.old"
  mv "$tmp" "$ckpt"
  rm -rf "$ckpt.old"
  log "checkpoint written in $((SECONDS - t0)) s"
}

mkdir -p "$CACHE"
# One builder at a time: two test binaries may run this concurrently.
exec 9>"$CACHE/.lock"
if command -v flock >/dev/null 2>&1; then flock 9; fi
# Leftovers of an interrupted run (we hold the lock, so none is live).
rm -rf "$CACHE"/engine.tmp.* "$CACHE"/checkpoint.tmp.*
K3_SRC_DIGEST=""
build_engine
write_checkpoint

# One KEY=VALUE line per fact. A value of plain characters is printed as is
# (so `K3_IDS=1008,10484,...` reads well and parses without a shell); any
# other value is quoted with %q for the shell that evals it.
emit() {
  if [[ "$2" =~ ^[A-Za-z0-9_./,:@%+=-]*$ ]]; then
    printf '%s=%s\n' "$1" "$2"
  else
    printf '%s=%q\n' "$1" "$2"
  fi
}
emit K3_BIN "$bin"
emit K3_MODEL "$ckpt/model"
emit K3_TRUNK "$ckpt/trunk"
while IFS='=' read -r key value; do
  case "$key" in
    K3_[A-Z0-9_]*) emit "$key" "$value" ;;
  esac
done <"$ckpt/model/orchestrator.env"
emit K3_SRC_DIGEST "$K3_SRC_DIGEST"
