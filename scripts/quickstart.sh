#!/usr/bin/env bash
# The main job on built-in defaults (README command 1, after scripts/setup.sh):
#   1. learn a small byte-level BPE vocabulary (VOCAB tokens) from the fortunes corpus
#      (Debian's `fortunes` package) in a fraction of a second; with it a step of the
#      small model takes about half as long as with GPT-2's 50,257 tokens, and the
#      model reaches fewer bits per byte in the same time
#   2. tokenize the corpus with it
#   3. train gpt2-tiny on this machine's cores for a few minutes, printing train and
#      validation loss, and save a Hugging Face-layout model directory
#   4. print a few samples from it
# Override with environment variables: VOCAB, STEPS, BATCH, SEQ, TIME_LIMIT (seconds), OUT.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=build/release/bin/distllm
OUT=${OUT:-runs/quickstart}
VOCAB=${VOCAB:-16384}
STEPS=${STEPS:-600}
BATCH=${BATCH:-8}
SEQ=${SEQ:-128}
TIME_LIMIT=${TIME_LIMIT:-330}

[ -x "$BIN" ] || { echo "quickstart: $BIN not found; run scripts/setup.sh first" >&2; exit 1; }
corpus=()
for f in /usr/share/games/fortunes/*; do
  case "$f" in *.dat|*.u8) continue ;; esac
  [ -f "$f" ] && corpus+=("$f")
done
[ ${#corpus[@]} -gt 0 ] || { echo "quickstart: no fortunes corpus; install Debian's 'fortunes' package" >&2; exit 1; }

echo "== 1/4 learning a $VOCAB-token BPE vocabulary from ${#corpus[@]} fortune files"
mkdir -p "$OUT"
"$BIN" tokenizer train --input "${corpus[@]}" --vocab-size "$VOCAB" --out "$OUT/tokenizer.json"

echo
echo "== 2/4 tokenizing the fortune files with it"
"$BIN" data prepare --input "${corpus[@]}" --tokenizer "$OUT/tokenizer.json" --doc-separator '\n%\n' \
    --val-fraction 0.02 --out "$OUT/data"

echo
echo "== 3/4 training gpt2-tiny ($STEPS steps of $BATCH x $SEQ tokens, at most ${TIME_LIMIT}s)"
"$BIN" train --data "$OUT/data" --preset gpt2-tiny --batch "$BATCH" --seq "$SEQ" \
    --steps "$STEPS" --lr 1e-3 --min-lr 1e-4 --warmup 20 --eval-every 25 --eval-batches 8 \
    --time-limit "$TIME_LIMIT" --log-every 5 --out "$OUT/model"

echo
echo "== 4/4 samples from $OUT/model"
for prompt in "The meaning of life is" "A computer scientist" "Q: Why did the chicken cross the road?"; do
  echo "--- prompt: $prompt"
  "$BIN" generate --model "$OUT/model" --prompt "$prompt" --max-tokens 40 --temperature 0.8 \
      --top-k 40 --seed 1 --echo
  echo
done
