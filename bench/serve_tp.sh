#!/usr/bin/env bash
# Tensor-parallel serving against one process, through the server: batch-1 requests
# (max concurrency 1) on `distllm serve` with 1 thread, then on `mpirun -np TP
# distllm serve --tp TP` with 1 thread per rank; medians of TTFT and TPOT from
# `bench serve`, and their ratios. Target (issue 10, gpt2-124M, 2 cores): tp=2 decodes
# >= 1.6x faster than tp=1.
#   bash bench/serve_tp.sh MODEL_DIR [TP]
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/serve_common.sh
MODEL=${1:?usage: serve_tp.sh MODEL_DIR [TP]}
TP=${2:-2}
THREADS=1
run() {  # run TP: prints "TTFT TPOT" medians in ms
  OUT=/tmp/serve_tp_$1.json
  if [ "$1" -gt 1 ]; then
    SERVE_LAUNCH="${MPIEXEC:-mpirun} --allow-run-as-root --bind-to none -np $1" start_server "$MODEL" --tp "$1"
  else
    start_server "$MODEL"
  fi
  bench --max-concurrency 1 --num-prompts 8 --input-len 128 --output-len 64 > /dev/null
  stop_server
  echo "$(json_field "$OUT" median_ttft_ms) $(json_field "$OUT" median_tpot_ms)"
}
read -r ttft1 tpot1 < <(run 1)
read -r ttftn tpotn < <(run "$TP")
/usr/bin/python3 -c "
t1, p1, tn, pn, tp = float('$ttft1'), float('$tpot1'), float('$ttftn'), float('$tpotn'), $TP
print(f'tp=1 (1 process x 1 thread):  median TTFT {t1:8.2f} ms, TPOT {p1:6.2f} ms')
print(f'tp={tp} ({tp} ranks x 1 thread):   median TTFT {tn:8.2f} ms, TPOT {pn:6.2f} ms')
print(f'speedup: prefill {t1 / tn:.2f}x, decode {p1 / pn:.2f}x (target >= 1.6x at tp=2)')"
