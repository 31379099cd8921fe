#!/usr/bin/env bash
# Speculative decoding through the server: median TPOT with and without
# `--speculative ngram` (or, with DRAFT_MODEL=DIR, `--speculative draft
# --draft-model DIR`) at max concurrency 1, 4 and 16.
# Target (issue): batch-1 TPOT >= 1.8x lower on a copy-heavy workload (ngram),
# >= 1.5x lower with a draft model (docs/benchmarks.md has both, with caveats).
#   bash bench/serve_speculative.sh MODEL_DIR
# The workload is greedy decoding of random-token prompts (bench serve's default).
# With random weights the model cannot copy a passage; instead its greedy output
# falls, after a short transient, into a repeating loop, which is what n-gram lookup
# predicts (as it predicts a copied passage). So this measures the mechanism at a
# high acceptance rate; the acceptance rate and mean accepted length that the
# server reports are printed with each run so the figure can be read for what it
# is. The outputs are identical with and without speculation (tests/serve).
# Env: CONCURRENCY="1 4 16", K=4 (draft tokens), OUTPUT_LEN=128, INPUT_LEN=32,
#      ROUNDS=1 (off/on pairs per concurrency, interleaved), TEMPERATURE=0 (sampling
#      lowers the acceptance rate: the random model's loops break up),
#      DRAFT_MODEL= (a draft model directory: speculate with it instead of n-grams;
#      e.g. serve_make_tiny_model DIR --draft-of MODEL_DIR --layers 1).
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/serve_common.sh
MODEL=${1:?usage: serve_speculative.sh MODEL_DIR}
OUT=${OUT:-/tmp/serve_speculative.json}
CONCURRENCY=${CONCURRENCY:-"1 4 16"}
K=${K:-4}
OUTPUT_LEN=${OUTPUT_LEN:-128}
INPUT_LEN=${INPUT_LEN:-32}
ROUNDS=${ROUNDS:-1}
TEMPERATURE=${TEMPERATURE:-0}
DRAFT_MODEL=${DRAFT_MODEL:-}
METHOD=ngram
SPEC_FLAGS=(--speculative ngram)
if [ -n "$DRAFT_MODEL" ]; then METHOD=draft; SPEC_FLAGS=(--speculative draft --draft-model "$DRAFT_MODEL"); fi
RESULTS=/tmp/serve_speculative_results.txt
: > "$RESULTS"
for conc in $CONCURRENCY; do
  prompts=$((conc == 1 ? 8 : conc * 4))
  for round in $(seq "$ROUNDS"); do
    for mode in off "$METHOD"; do
      if [ "$mode" = off ]; then start_server "$MODEL"; else start_server "$MODEL" "${SPEC_FLAGS[@]}" --num-speculative-tokens "$K"; fi
      bench --max-concurrency "$conc" --num-prompts "$prompts" --input-len "$INPUT_LEN" --output-len "$OUTPUT_LEN" --seed "$round" --temperature "$TEMPERATURE"
      stop_server
      /usr/bin/python3 -c "
import json, sys
j = json.load(open('$OUT'))
print('$conc', '$mode', j['median_tpot_ms'], j['output_throughput'], j.get('spec_decode_acceptance_rate', 0), j.get('spec_decode_mean_accepted_length', 1))" >> "$RESULTS"
    done
  done
done
/usr/bin/python3 - "$RESULTS" "$K" "$TEMPERATURE" "$METHOD" <<'PY'
import sys, statistics as st
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
k, temperature, m = sys.argv[2], sys.argv[3], sys.argv[4]
print(f'\nspeculative decoding ({m}, k={k}, temperature {temperature}): median TPOT ms (median over rounds), output tok/s')
print(f"{'concurrency':>11} {'TPOT off':>9} {'TPOT ' + m:>10} {'speedup':>8} {'tok/s off':>10} {'tok/s ' + m:>11} {'accept %':>9} {'mean len':>9}")
for conc in dict.fromkeys(r[0] for r in rows):
    off = [r for r in rows if r[0] == conc and r[1] == 'off']
    on = [r for r in rows if r[0] == conc and r[1] == m]
    t_off = st.median(float(r[2]) for r in off); t_on = st.median(float(r[2]) for r in on)
    x_off = st.median(float(r[3]) for r in off); x_on = st.median(float(r[3]) for r in on)
    acc = st.median(float(r[4]) for r in on); ml = st.median(float(r[5]) for r in on)
    print(f'{conc:>11} {t_off:9.2f} {t_on:10.2f} {t_off / t_on:7.2f}x {x_off:10.1f} {x_on:11.1f} {100 * acc:9.1f} {ml:9.2f}')
PY
