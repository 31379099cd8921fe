#!/usr/bin/env bash
# Output throughput at 16 concurrent requests against 1 (continuous batching).
# Target (gpt2-124M-shaped, fp32, 2 cores): >= 4x.
#   bash bench/serve_concurrency.sh MODEL_DIR
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/serve_common.sh
MODEL=${1:?usage: serve_concurrency.sh MODEL_DIR}
start_server "$MODEL"
OUT=/tmp/serve_concurrency_1.json bench --max-concurrency 1 --num-prompts 8 --input-len 32 --output-len 128
OUT=/tmp/serve_concurrency_16.json bench --max-concurrency 16 --num-prompts 64 --input-len 32 --output-len 128
one=$(json_field /tmp/serve_concurrency_1.json output_throughput)
sixteen=$(json_field /tmp/serve_concurrency_16.json output_throughput)
/usr/bin/python3 -c "
one, sixteen = float('$one'), float('$sixteen')
print(f'output throughput: 1 concurrent {one:.1f} tok/s, 16 concurrent {sixteen:.1f} tok/s -> {sixteen / one:.2f}x (target >= 4x)')"
