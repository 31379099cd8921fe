#!/usr/bin/env bash
# Prefill/decode disaggregation against co-located serving, on the same cores: two
# co-located replicas (`distllm serve --threads 1` each) behind `distllm route`,
# then one prefill replica and one decode replica (--role prefill / --role decode,
# --threads 1 each) behind `distllm route --prefill`. The same mixed load runs
# against both: two `distllm bench serve` clients at once, one sending long prompts
# with short generations (LONG_IN tokens in, 16 out), the other short prompts with
# long generations (32 in, LONG_OUT out), each at RATE requests/s (Poisson).
# A third setup is the disaggregated pair with `--kv-transfer-min-tokens MIN_TOKENS`
# (256) on the decode replica: short prompts are computed there, without a pull.
# Prints TTFT and ITL/TPOT percentiles per class for each setup.
#   bash bench/serve_disagg.sh MODEL_DIR
# Model: build/release/bin/serve_make_tiny_model /tmp/gpt2-tiny --preset gpt2-tiny
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${1:?usage: serve_disagg.sh MODEL_DIR}
RATE=${RATE:-1}
PROMPTS=${PROMPTS:-24}
LONG_IN=${LONG_IN:-768}
LONG_OUT=${LONG_OUT:-128}
MIN_TOKENS=${MIN_TOKENS:-256}
BASE=${BASE_PORT:-8410}
OUT=${OUT_DIR:-/tmp/serve_disagg}
mkdir -p "$OUT"
source bench/serve_common.sh  # pids, stop_all on exit, wait_health
serve() {  # PORT LOG ARGS...
  local port=$1 log=$2; shift 2
  "$DISTLLM" serve --model "$MODEL" --port "$port" --threads 1 "$@" > "$log" 2>&1 &
  pids+=($!)
}
load() {  # NAME: both classes at once through the router on $BASE
  "$DISTLLM" bench serve --port "$BASE" --num-prompts "$PROMPTS" --request-rate "$RATE" --input-len "$LONG_IN" \
    --output-len 16 --seed 1 --token-id-min 10 --token-id-max 50000 --save-json "$OUT/$1-long_prompt.json" > /dev/null &
  local a=$!
  "$DISTLLM" bench serve --port "$BASE" --num-prompts "$PROMPTS" --request-rate "$RATE" --input-len 32 \
    --output-len "$LONG_OUT" --seed 2 --token-id-min 10 --token-id-max 50000 --save-json "$OUT/$1-long_gen.json" > /dev/null &
  local b=$!
  wait "$a" "$b"
}

# Co-located: 2 replicas.
serve $((BASE + 1)) "$OUT/colo1.log"
serve $((BASE + 2)) "$OUT/colo2.log"
wait_health $((BASE + 1)); wait_health $((BASE + 2))
"$DISTLLM" route --port "$BASE" --replica http://127.0.0.1:$((BASE + 1)) --replica http://127.0.0.1:$((BASE + 2)) \
  > "$OUT/router-colo.log" 2>&1 &
pids+=($!)
wait_health "$BASE"
load colocated
stop_all

# Disaggregated: 1 prefill + 1 decode.
serve $((BASE + 3)) "$OUT/prefill.log" --role prefill
serve $((BASE + 4)) "$OUT/decode.log" --role decode
wait_health $((BASE + 3)); wait_health $((BASE + 4))
"$DISTLLM" route --port "$BASE" --replica http://127.0.0.1:$((BASE + 4)) --prefill http://127.0.0.1:$((BASE + 3)) \
  > "$OUT/router-disagg.log" 2>&1 &
pids+=($!)
wait_health "$BASE"
load disaggregated
curl -sf "http://127.0.0.1:$((BASE + 4))/metrics" | grep -E '^distllm:(kv_transfer_[a-z_]+|prefix_cache_hits_total)\{' \
  > "$OUT/decode-metrics.txt" || true
stop_all

# Disaggregated, prompts under MIN_TOKENS computed on the decode replica (no pull).
serve $((BASE + 5)) "$OUT/prefill-min.log" --role prefill
serve $((BASE + 6)) "$OUT/decode-min.log" --role decode --kv-transfer-min-tokens "$MIN_TOKENS"
wait_health $((BASE + 5)); wait_health $((BASE + 6))
"$DISTLLM" route --port "$BASE" --replica http://127.0.0.1:$((BASE + 6)) --prefill http://127.0.0.1:$((BASE + 5)) \
  > "$OUT/router-disagg-min.log" 2>&1 &
pids+=($!)
wait_health "$BASE"
load disagg-min
stop_all

/usr/bin/python3 - "$OUT" <<'PY'
import json, sys
out = sys.argv[1]
print(f"{'setup':<14} {'class':<12} {'req/s':>6} {'TTFT p50':>9} {'TTFT p99':>9} {'ITL p50':>8} {'ITL p99':>8} {'TPOT p50':>9} {'out tok/s':>9} {'ok/failed':>9}")
for setup in ("colocated", "disaggregated", "disagg-min"):
    for cls in ("long_prompt", "long_gen"):
        d = json.load(open(f"{out}/{setup}-{cls}.json"))
        print(f"{setup:<14} {cls:<12} {d['request_throughput']:6.2f} {d['median_ttft_ms']:9.1f} {d['p99_ttft_ms']:9.1f} "
              f"{d['median_itl_ms']:8.1f} {d['p99_itl_ms']:8.1f} {d['median_tpot_ms']:9.1f} {d['output_throughput']:9.1f} {str(d['completed']) + '/' + str(d['failed']):>9}")
print("decode replica:", " ".join(l.split('{')[0].split(':')[1] + "=" + l.split()[-1] for l in open(f"{out}/decode-metrics.txt")))
PY
