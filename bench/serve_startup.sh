#!/usr/bin/env bash
# Start-up of `distllm serve`: seconds from launch to a healthy /health, and the
# server's own split (weights + tokenizer, chat template, packing, KV cache + engine).
# Targets (issue 12, gpt2-124M fp32): ready <= 2 s, loading + packing <= 1 s.
#   bash bench/serve_startup.sh MODEL_DIR [REPEATS] [serve flags, e.g. --dtype bf16]
# Also prints the server's peak resident memory (VmHWM) and its anonymous part at
# ready (RssAnon: what it allocated, not the mapped or page-cached files).
# The model: build/release/bin/serve_make_tiny_model /tmp/gpt2-124M --preset gpt2-124M
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/serve_common.sh
MODEL=${1:?usage: serve_startup.sh MODEL_DIR [REPEATS]}
REPEATS=${2:-5}
shift $(( $# < 2 ? $# : 2 ))
cat "$MODEL"/*.safetensors > /dev/null  # page cache warm: measure the server, not the disk
times=()
for _ in $(seq "$REPEATS"); do
  t0=$(date +%s.%N)
  start_server "$MODEL" "$@"
  t1=$(date +%s.%N)
  times+=("$(echo "$t1 - $t0" | bc)")
  grep -o "ready in .*" /tmp/distllm_bench_serve.log
  grep -E "VmHWM|RssAnon" "/proc/$SERVE_PID/status" | tr -s ' \t' ' ' | paste -sd ' '  # server memory
  stop_server
done
/usr/bin/python3 -c "
import statistics, sys
t = [float(x) for x in sys.argv[1:]]
print(f'start to healthy /health: median {statistics.median(t):.2f} s over {len(t)} runs (min {min(t):.2f}, max {max(t):.2f}; target <= 2 s)')" "${times[@]}"
