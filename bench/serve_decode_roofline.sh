#!/usr/bin/env bash
# Batch-1 decode through the server against the memory-bandwidth roofline.
# Target (gpt2-124M-shaped, fp32, 2 cores): >= 80% of roofline.
#   bash bench/serve_decode_roofline.sh MODEL_DIR
# The roofline (ms per token = weight bytes read per decode step / read bandwidth
# measured in the same run) comes from `distllm bench decode`, run just before and
# just after the server (this machine's bandwidth drifts by 2x over minutes; the
# mean of the two brackets the server's run); the server's figure is the median TPOT
# of single requests (max concurrency 1) measured by `bench serve`.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/serve_common.sh
MODEL=${1:?usage: serve_decode_roofline.sh MODEL_DIR}
OUT=${OUT:-/tmp/serve_decode_roofline.json}
roofline() {
  "$DISTLLM" bench decode --model "$MODEL" --batch 1 --threads "$THREADS" | tee /dev/stderr | awk '/^roofline:/ {print $2}'
}
roof_before=$(roofline)
start_server "$MODEL"
bench --max-concurrency 1 --num-prompts 16 --input-len 32 --output-len 128
stop_server
roof_after=$(roofline)
tpot=$(json_field "$OUT" median_tpot_ms)
/usr/bin/python3 -c "
before, after, tpot = float('$roof_before'), float('$roof_after'), float('$tpot')
roof = (before + after) / 2
print(f'roofline before the server run {before:.2f} ms/token, after {after:.2f}')
print(f'batch-1 decode via the server: median TPOT {tpot:.2f} ms, roofline {roof:.2f} ms/token -> {100 * roof / tpot:.1f}% of roofline (target >= 80%)')"
