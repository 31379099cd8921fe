#!/usr/bin/env bash
# What `distllm route` adds to a request's latency: the same requests sent straight
# to one replica and through the router in front of it, alternating, ROUNDS rounds of
# NUM requests at concurrency 1 (short prompts, 4 streamed tokens, so the replica's
# own time is small and steady). Prints median end-to-end latency and TTFT of each
# and the medians' difference. Target (issue 11): median added latency <= 1 ms.
#   bash bench/route_overhead.sh MODEL_DIR [ROUNDS]
# Model: build/release/bin/serve_make_tiny_model /tmp/gpt2-tiny --preset gpt2-tiny
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${1:?usage: route_overhead.sh MODEL_DIR [ROUNDS]}
ROUNDS=${2:-5}
NUM=${NUM:-200}
BASE=${BASE_PORT:-8330}
source bench/serve_common.sh  # pids, stop_all on exit, wait_health
# No prefix cache, and every run its own prompts: a run must not find the previous
# run's prompts cached (that would flatter whichever path goes second).
"$DISTLLM" serve --model "$MODEL" --port $((BASE + 1)) --threads 1 --no-prefix-cache > /tmp/route_overhead_replica.log 2>&1 &
pids+=($!)
wait_health $((BASE + 1))
"$DISTLLM" route --replica http://127.0.0.1:$((BASE + 1)) --port "$BASE" > /tmp/route_overhead_router.log 2>&1 &
pids+=($!)
wait_health "$BASE"
run() {  # PORT SEED -> "median_e2el_ms median_ttft_ms"
  "$DISTLLM" bench serve --port "$1" --num-prompts "$NUM" --max-concurrency 1 --input-len 32 --output-len 4 \
    --seed "$2" --save-json /tmp/route_overhead.json > /dev/null
  /usr/bin/python3 -c "import json; d = json.load(open('/tmp/route_overhead.json')); print(d['median_e2el_ms'], d['median_ttft_ms'])"
}
run $((BASE + 1)) 0 > /dev/null  # warm-up
direct=(); routed=()
for r in $(seq "$ROUNDS"); do
  if [ $((r % 2)) = 1 ]; then  # alternate which path goes first
    direct+=("$(run $((BASE + 1)) $((2 * r)))"); routed+=("$(run "$BASE" $((2 * r + 1)))")
  else
    routed+=("$(run "$BASE" $((2 * r + 1)))"); direct+=("$(run $((BASE + 1)) $((2 * r)))")
  fi
done
/usr/bin/python3 - "${direct[@]}" -- "${routed[@]}" <<'PY'
import statistics, sys
args = sys.argv[1:]; cut = args.index('--')
d = [tuple(map(float, a.split())) for a in args[:cut]]; r = [tuple(map(float, a.split())) for a in args[cut + 1:]]
med = lambda xs, i: statistics.median(x[i] for x in xs)
print(f"direct: median e2e {med(d, 0):.2f} ms, median TTFT {med(d, 1):.2f} ms")
print(f"routed: median e2e {med(r, 0):.2f} ms, median TTFT {med(r, 1):.2f} ms")
diffs = [b[0] - a[0] for a, b in zip(d, r)]
print(f"added by the router: {statistics.median(diffs):.2f} ms median e2e (per-round: "
      + ", ".join(f"{x:.2f}" for x in diffs) + f"), TTFT {med(r, 1) - med(d, 1):.2f} ms; target <= 1 ms")
PY
