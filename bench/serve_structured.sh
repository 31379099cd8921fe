#!/usr/bin/env bash
# Cost of structured outputs: decode TPOT with a JSON-schema grammar mask against
# without, at concurrency 1 and 16 (the same server, interleaved rounds).
# Target (issue 13): masked TPOT <= 1.1x unmasked at both.
#   bash bench/serve_structured.sh MODEL_DIR [ROUNDS]
# The schema forces a long output (an object holding an array of >= 60 integers),
# so every one of the 64 generated tokens is masked.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/serve_common.sh
MODEL=${1:?usage: serve_structured.sh MODEL_DIR [ROUNDS]}
ROUNDS=${2:-3}
SCHEMA='{"guided_json": {"type": "object", "properties": {"values": {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 999}, "minItems": 60}}, "required": ["values"]}}'
start_server "$MODEL"
for conc in 1 16; do
  plain=(); masked=()
  for r in $(seq "$ROUNDS"); do
    args=(--max-concurrency "$conc" --num-prompts $((conc * 4)) --input-len 32 --output-len 64 --seed "$r" --temperature 0.7)
    OUT=/tmp/serve_structured_plain.json bench "${args[@]}" > /dev/null
    plain+=("$(json_field /tmp/serve_structured_plain.json mean_tpot_ms)")
    OUT=/tmp/serve_structured_masked.json bench "${args[@]}" --extra-body "$SCHEMA" > /dev/null
    masked+=("$(json_field /tmp/serve_structured_masked.json mean_tpot_ms)")
  done
  /usr/bin/python3 -c "
import statistics, sys
n = int(sys.argv[1]); p = [float(x) for x in sys.argv[2:2 + n]]; m = [float(x) for x in sys.argv[2 + n:]]
pm, mm = statistics.median(p), statistics.median(m)
print(f'concurrency $conc: mean TPOT plain {pm:.2f} ms, JSON-schema mask {mm:.2f} ms -> {mm / pm:.3f}x (median of {n} rounds; target <= 1.1x)')" "$ROUNDS" "${plain[@]}" "${masked[@]}"
done
grep -o "compiled a .*" /tmp/distllm_bench_serve.log | head -3 || true
