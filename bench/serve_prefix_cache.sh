#!/usr/bin/env bash
# 8 concurrent requests sharing a 1,000-token system prompt: throughput with the
# radix prefix cache on against off. Target (gpt2-124M-shaped, fp32, 2 cores): >= 3x.
#   bash bench/serve_prefix_cache.sh MODEL_DIR
# Each prompt is 1,000 shared tokens + 8 of its own; 16 generated tokens each (1,024
# in all: gpt2's context).
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/serve_common.sh
MODEL=${1:?usage: serve_prefix_cache.sh MODEL_DIR}
args=(--max-concurrency 8 --num-prompts 32 --input-len 1008 --output-len 16 --shared-prefix-fraction 0.99206)
start_server "$MODEL"
OUT=/tmp/serve_prefix_on.json bench "${args[@]}"
stop_server
start_server "$MODEL" --no-prefix-cache
OUT=/tmp/serve_prefix_off.json bench "${args[@]}"
on=$(json_field /tmp/serve_prefix_on.json output_throughput)
off=$(json_field /tmp/serve_prefix_off.json output_throughput)
/usr/bin/python3 -c "
on, off = float('$on'), float('$off')
print(f'output throughput with a shared 1000-token prefix: cache on {on:.1f} tok/s, off {off:.1f} tok/s -> {on / off:.2f}x (target >= 3x)')"
