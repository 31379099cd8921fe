#!/usr/bin/env bash
# Cache-aware routing against round robin through `distllm route`, on a multi-tenant
# workload: 8 system prompts of ~950 tokens, each request one of them plus its own
# ~50 tokens, 16 generated tokens; 2 replicas of one thread each, each with a KV
# cache of KV_GIB (default 0.09 GiB: ~5,000 tokens of gpt2-tiny, about 5 of the 8
# system prompts), so that a replica's prefix cache holds only part of the tenants,
# the situation cache-aware routing is for.
# Target (issue 11): cache-aware >= 1.5x output throughput or >= 2x lower mean TTFT.
#   bash bench/route_cache_aware.sh MODEL_DIR [ROUNDS]
# Model: build/release/bin/serve_make_tiny_model /tmp/gpt2-tiny --preset gpt2-tiny
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${1:?usage: route_cache_aware.sh MODEL_DIR [ROUNDS]}
ROUNDS=${2:-3}
KV_GIB=${KV_GIB:-0.09}
PROMPTS=${PROMPTS:-128}
BASE=${BASE_PORT:-8310}
source bench/serve_common.sh  # pids, stop_all on exit, wait_health
for i in 1 2; do
  "$DISTLLM" serve --model "$MODEL" --port $((BASE + i)) --threads 1 --kv-cache-memory "$KV_GIB" > /tmp/route_replica$i.log 2>&1 &
  pids+=($!)
done
for i in 1 2; do wait_health $((BASE + i)); done
run() {  # POLICY ROUND -> "throughput ttft"
  "$DISTLLM" route --replica http://127.0.0.1:$((BASE + 1)) --replica http://127.0.0.1:$((BASE + 2)) \
    --policy "$1" --port "$BASE" > /tmp/route_router.log 2>&1 &
  local rp=$!
  wait_health "$BASE"
  "$DISTLLM" bench serve --port "$BASE" --num-prompts "$PROMPTS" --max-concurrency 8 --input-len 1000 --output-len 16 \
    --shared-prefix-fraction 0.95 --prefix-groups 8 --seed "$2" --save-json /tmp/route_bench.json > /dev/null
  kill "$rp"; wait "$rp" 2>/dev/null || true
  /usr/bin/python3 -c "import json; d = json.load(open('/tmp/route_bench.json')); print(d['output_throughput'], d['mean_ttft_ms'])"
}
rr=(); ca=()
for r in $(seq "$ROUNDS"); do
  rr+=("$(run round_robin $((r * 2)))")
  ca+=("$(run cache_aware $((r * 2 + 1)))")
done
/usr/bin/python3 - "${rr[@]}" -- "${ca[@]}" <<'PY'
import statistics, sys
args = sys.argv[1:]; cut = args.index('--')
rr = [tuple(map(float, a.split())) for a in args[:cut]]; ca = [tuple(map(float, a.split())) for a in args[cut + 1:]]
med = lambda xs, i: statistics.median(x[i] for x in xs)
print(f"round_robin: {med(rr, 0):.1f} tok/s, mean TTFT {med(rr, 1):.0f} ms")
print(f"cache_aware: {med(ca, 0):.1f} tok/s, mean TTFT {med(ca, 1):.0f} ms")
print(f"cache-aware vs round robin: throughput {med(ca, 0) / med(rr, 0):.2f}x, mean TTFT {med(rr, 1) / med(ca, 1):.2f}x lower "
      f"(medians of {len(rr)} rounds; target >= 1.5x throughput or >= 2x TTFT)")
PY
