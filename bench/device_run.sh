#!/usr/bin/env bash
# On the lent GPU machine, from a working tree: install this version's wheel (built here into
# .devcarry/ with `pip wheel --no-deps -w .devcarry .`) and run the GPU checks named in $@
# (default: kill). Output goes to stdout and $OUT (when set).
set -uo pipefail
python3 -m pip install -q --no-deps --no-index --target /tmp/gd .devcarry/gpudeck-*.whl || exit 1
export PYTHONPATH=/tmp/gd
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
echo "whoami: $(whoami); cgroup2: $(grep cgroup2 /proc/self/mountinfo | awk '{print $5}')"
for what in "${@:-kill}"; do
  case $what in
    kill) python3 bench/gpu_kill_verify.py --gib 8 ;;
    kill-token) GPUDECK_CONTAINMENT=token python3 bench/gpu_kill_verify.py --gib 8 ;;
    health) python3 bench/gpu_health.py ;;
    *) echo "unknown check $what" ;;
  esac
done 2>&1 | tee ${OUT:+$OUT/device.log}
