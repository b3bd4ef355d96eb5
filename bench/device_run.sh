#!/usr/bin/env bash
# On the lent GPU machine, from a working tree: install this version's wheel (built here into
# .devcarry/ with `pip wheel --no-deps -w .devcarry .`) and run the GPU checks named in $@
# (default: kill). Output goes to stdout and $OUT (when set).
set -uo pipefail
python3 -m pip install -q --no-deps --no-index --target /tmp/gd .devcarry/gpudeck-*.whl || exit 1
export PYTHONPATH=/tmp/gd
ls .devcarry/fla_core-*.whl >/dev/null 2>&1 && python3 -m pip install -q --no-deps --no-index --target /tmp/fla \
  .devcarry/fla_core-*.whl .devcarry/einops-*.whl
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
echo "whoami: $(whoami); cgroup2: $(grep cgroup2 /proc/self/mountinfo | awk '{print $5}')"
for what in "${@:-kill}"; do
  case $what in
    kill) python3 bench/gpu_kill_verify.py --gib 8 ;;
    kill-token) GPUDECK_CONTAINMENT=token python3 bench/gpu_kill_verify.py --gib 8 ;;
    health) python3 bench/gpu_health.py ;;
    # extraction at 27B-class shapes; the kernels for the hybrid's DeltaNet layers come from the
    # fla-core and einops wheels in .devcarry/ (flash-linear-attention's kernel package)
    extract-smoke) GPUDECK_BENCH_TINY=1 python3 bench/extract_gpu.py --shape dense27b --samples 24 --naive-samples 2 &&
                   GPUDECK_BENCH_TINY=1 PYTHONPATH=/tmp/gd:/tmp/fla python3 bench/extract_gpu.py --shape hybrid27b \
                     --samples 24 --naive-samples 2 ;;
    extract-dense) python3 bench/extract_gpu.py --shape dense27b --samples 240 --naive-samples 6 ;;
    extract-hybrid) PYTHONPATH=/tmp/gd:/tmp/fla TORCH_LOGS=recompiles python3 bench/extract_gpu.py --shape hybrid27b \
                      --samples 400 --naive-samples 4 --profile ;;
    extract-hybrid-profile) PYTHONPATH=/tmp/gd:/tmp/fla python3 bench/extract_gpu.py --shape hybrid27b --samples 8 \
                              --skip naive --profile ;;
    # issue 25: process start to the first durable shard, cold (fresh cache) and warm (same cache,
    # new process), then the steady figures, both shapes, each in a process of its own
    extract-startup) PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/gd:/tmp/fla python3 bench/extract_gpu.py \
                       --startup hybrid27b,dense27b --steady hybrid27b,dense27b --samples 128 --naive-samples 3 \
                       --writers 8 --profile ;;
    # issue 25, the kernel table: the hybrid's starts (autotuned, cold with the table shipped or
    # else the one its autotuned run recorded, warm) and its steady figures
    extract-startup-hybrid) PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/gd:/tmp/fla python3 bench/extract_gpu.py \
                              --startup hybrid27b --steady hybrid27b --samples 128 --naive-samples 3 --writers 8 \
                              --profile ;;
    extract-hybrid-torch) python3 bench/extract_gpu.py --shape hybrid27b --samples 80 --skip naive ;;
    *) echo "unknown check $what" ;;
  esac
done 2>&1 | tee ${OUT:+$OUT/device.log}
