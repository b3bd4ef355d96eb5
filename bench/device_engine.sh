#!/usr/bin/env bash
# On the lent H200: llama.cpp's server built with CUDA there, then driven end to end through
# gpudeck's own CLI and agent (bench/engine_e2e.py): launch, readiness, plan generate's pilot,
# the rest of the run at the plan's best concurrency, the figures from the agent's snapshots,
# the kill verified against NVML, the relaunch.
#
# What one call carries is at most 64 MiB, the model alone 98 MB, so it travels in two calls
# back to back on the same warm machine (/tmp/devkeep outlives a call while the machine is held):
#   here:   bash bench/device_engine.sh pack      (fills .devcarry/ and .devcarry2/, both ignored by git)
#   call 1: bash bench/device_engine.sh build     (carry .devcarry: the trimmed llama.cpp source, the
#           wheels the CLI needs beyond the image's, the model's first part; builds llama-server,
#           sm_90 only, into /tmp/devkeep, installs the wheels into /tmp/site; BUILD_FA=ON compiles
#           the FlashAttention kernels too: off by default, their template instances are most of
#           the build's time, and a lease's device minutes are few)
#   call 2: bash bench/device_engine.sh run       (carry .devcarry2: the model's second part; within the
#           machine's 30 s warm time). E2E_ARGS adds arguments to engine_e2e.py; LLAMA_ARGS, the
#           engine job's own arguments (its fleet file's args, e.g. LLAMA_ARGS="--cache-ram 0").
# Output goes to stdout and $OUT (device-<step>.log, engine_e2e.json).
set -uo pipefail
step=${1:?pack, build or run}
LLAMA_CPP_PYTHON=0.3.36
KEEP=/tmp/devkeep
case $step in
  pack)
    PY=${PY:-.venv/bin/python}
    G=$(PY=$PY bash tests/tools/llama_server.sh model) || exit 1
    rm -rf .devcarry .devcarry2 && mkdir -p .devcarry .devcarry2
    W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
    "$PY" -m pip download -q --no-binary :all: --no-deps -d "$W" "llama-cpp-python==$LLAMA_CPP_PYTHON" || exit 1
    tar xzf "$W/llama_cpp_python-$LLAMA_CPP_PYTHON.tar.gz" -C "$W"
    S="$W/llama_cpp_python-$LLAMA_CPP_PYTHON/vendor"
    # what llama-server's build reads: no models, docs, tests, examples, media, the UI's sources
    # and tests (its CMakeLists stays: the server embeds its prebuilt assets), nor other GPUs' backends
    (cd "$S/llama.cpp" && rm -rf models docs tests examples media benches .github tools/ui/tests \
       tools/ui/package-lock.json ggml/src/ggml-{openvino,webgpu,et,metal,hexagon,sycl,vulkan,opencl,cann,musa,zdnn})
    tar cJf .devcarry/llama.cpp.tar.xz -C "$S" llama.cpp
    # the CLI's dependencies the image lacks (it has rich, httpx, psutil, aiohttp, prometheus-client, nvidia-ml-py)
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
      --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
      -d .devcarry textual==8.2.8 asyncssh==2.24.1 cryptography==50.0.2 cffi==2.1.1 pycparser==3.12 \
      mdit-py-plugins==0.7.0 platformdirs==4.14.9 rich==15.0.0 markdown-it-py==4.3.0 || exit 1
    "$PY" -m pip wheel -q --no-deps -w .devcarry . || exit 1
    head -c 42000000 "$G" > .devcarry/gguf.aa && tail -c +42000001 "$G" > .devcarry2/gguf.ab
    du -sh .devcarry .devcarry2 ;;
  build)
    {
      nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
      NVCC=$(command -v nvcc || ls /usr/local/cuda*/bin/nvcc 2>/dev/null | head -1)
      echo "nvcc: $NVCC ($($NVCC --version | tail -2 | head -1)); cmake $(cmake --version | head -1); $(nproc) cores"
      mkdir -p $KEEP && cp .devcarry/gguf.aa $KEEP/
      python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
        .devcarry/*.whl || exit 1
      rm -rf $KEEP/src && mkdir -p $KEEP/src && tar xJf .devcarry/llama.cpp.tar.xz -C $KEEP/src || exit 1
      START=$(date +%s)
      cmake -S $KEEP/src/llama.cpp -B $KEEP/build -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON \
        -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_CUDA_COMPILER="$NVCC" -DGGML_NATIVE=OFF -DLLAMA_CURL=OFF \
        -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON -DBUILD_SHARED_LIBS=OFF \
        -DGGML_CUDA_FA=${BUILD_FA:-OFF} \
        > $KEEP/cmake.log 2>&1 || { tail -40 $KEEP/cmake.log; exit 1; }
      timeout ${BUILD_S:-500} ninja -C $KEEP/build -j "$(nproc)" llama-server > $KEEP/ninja.log 2>&1
      rc=$?
      echo "ninja exit $rc after $(( $(date +%s) - START )) s; last lines:"; tail -5 $KEEP/ninja.log
      B=$KEEP/build/bin/llama-server
      [ -x $B ] || { grep -m5 -B2 -A10 "error" $KEEP/ninja.log; exit 1; }
      ls -la $B; $B --version 2>&1 | tail -3; ldd $B | grep -iE "cuda|cublas|not found"
    } 2>&1 | tee ${OUT:+$OUT/device-build.log} ;;
  run)
    {
      G=$KEEP/SmolLM2-135M-Instruct.Q4_1.gguf
      [ -s $G ] || cat $KEEP/gguf.aa .devcarry2/gguf.ab > $G || exit 1
      ls -la $G; sha256sum $G
      export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
      python3 -c "import gpudeck, textual, asyncssh; print('gpudeck', gpudeck.__file__)" || exit 1
      timeout ${RUN_S:-560} python3 bench/engine_e2e.py --binary $KEEP/build/bin/llama-server --model $G \
        --gpus 0 --slots 128 --context 8192 --gpu-layers all --min-gib 20 --pilot 200 --levels 16,64,128 \
        --hold 20 --max-tokens 512 --run-s 120 --work /tmp/e2e --json ${OUT:-/tmp}/engine_e2e.json ${E2E_ARGS:-} \
        ${LLAMA_ARGS:+"--llama-args=$LLAMA_ARGS"}
      echo "engine_e2e exit $?"
      cp /tmp/e2e/out/plan.json ${OUT:-/tmp}/plan.json 2>/dev/null
      tar czf ${OUT:-/tmp}/out.tgz -C /tmp/e2e out 2>/dev/null  # the records, for a look at lengths and rates
      tail -30 /tmp/e2e/home/jobs/llama/job.log.1 /tmp/e2e/home/jobs/llama/job.log 2>/dev/null | grep -iE \
        "CUDA|VRAM|KV|n_ctx|slot|error" | head -30
    } 2>&1 | tee ${OUT:+$OUT/device-run.log} ;;
  *) echo "usage: $0 pack|build|run"; exit 2 ;;
esac
