#!/usr/bin/env bash
# Quality of the low-precision weights (issue 12): trains a small GPT-2 the way the
# main job does (scripts/quickstart.sh: the fortunes corpus, GPT-2's tokenizer; a
# smaller model and fewer steps so it fits a test), then compares its perplexity on
# the held-out split through the inference path with f32, bf16 and int8 weights.
# It also runs each with a bf16 and an int8 KV cache (--kv-cache-dtype bf16,int8):
# f32 weights with a bf16 KV cache must stay within 1% of all-f32 as well, and with
# an int8 KV cache within 0.5% (the issue asks for 3%; measured -0.001%: per-token
# scales keep K/V within half a step of max|x| / 127 per head).
# Pass: bf16 within 1% of f32, int8 within 3%, and the model learned something
# (f32 perplexity far below the 50,257 of a uniform guess).
#   dtype_perplexity.sh DISTLLM_BINARY
set -euo pipefail
distllm=$1
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
corpus=()
for f in /usr/share/games/fortunes/*; do
  case "$f" in *.dat|*.u8) continue ;; esac
  [ -f "$f" ] && corpus+=("$f")
done
[ ${#corpus[@]} -gt 0 ] || { echo "no fortunes corpus (Debian's fortunes package)"; exit 77; }
"$distllm" data prepare --input "${corpus[@]}" --tokenizer gpt2 --doc-separator '\n%\n' --val-fraction 0.02 \
  --out "$tmp/data" > "$tmp/prepare.log" 2>&1 || { cat "$tmp/prepare.log"; exit 77; }
"$distllm" train --data "$tmp/data" --preset gpt2-tiny --n-layer 2 --n-embd 128 --n-head 4 --batch 8 --seq 64 \
  --steps 150 --lr 2e-3 --min-lr 2e-4 --warmup 10 --eval-every 50 --eval-batches 4 --log-every 50 \
  --out "$tmp/model" > "$tmp/train.log" 2>&1 || { cat "$tmp/train.log"; exit 1; }
"$distllm" perplexity --model "$tmp/model" --data "$tmp/data" --split val --dtype f32,bf16,int8 \
  --kv-cache-dtype f32,bf16,int8 --seq 128 --windows 64 | tee "$tmp/ppl.txt"
# A held-out text file, tokenized with the model directory's own tokenizer.
head -c 20000 "${corpus[0]}" > "$tmp/held_out.txt"
"$distllm" perplexity --model "$tmp/model" --text "$tmp/held_out.txt" --dtype f32 --seq 64 --windows 8 \
  > "$tmp/text.txt" 2>&1 || { cat "$tmp/text.txt"; exit 1; }
grep -Eq "^data: +$tmp/held_out.txt \(held-out text, [0-9]+ tokens\), 8 windows of 64 tokens" "$tmp/text.txt" \
  || { cat "$tmp/text.txt"; echo "perplexity --text did not score the held-out text"; exit 1; }
grep -Eq "^f32 +[0-9.]+ +[0-9.]+ +[0-9]+\.[0-9]{4} " "$tmp/text.txt" \
  || { cat "$tmp/text.txt"; echo "perplexity --text gave no bits per byte"; exit 1; }
/usr/bin/python3 - "$tmp/ppl.txt" <<'PY'
import sys
rows = {}
names = tuple(w + kv for kv in ("", "+kvbf16", "+kvint8") for w in ("f32", "bf16", "int8"))
for line in open(sys.argv[1]):
    parts = line.split()
    if len(parts) == 6 and parts[0] in names:
        rows[parts[0]] = (float(parts[2]), float(parts[4].rstrip('%')), float(parts[1]), float(parts[3]))
assert set(rows) == set(names), rows
f32 = rows["f32"][0]
# Bits per byte = nll / ln 2 x tokens per byte; GPT-2's tokenizer gives English text
# 0.2-0.35 tokens per byte, the same ratio on every row.
ratios = {name: r[3] * 0.6931471805599453 / r[2] for name, r in rows.items()}
assert all(0.2 < x < 0.35 for x in ratios.values()), ratios
assert max(ratios.values()) - min(ratios.values()) < 1e-3, ratios
assert f32 < 5000, f"f32 perplexity {f32}: the model did not learn (uniform is 50257)"
for name, limit in (("bf16", 1.0), ("int8", 3.0), ("f32+kvbf16", 1.0), ("bf16+kvbf16", 1.0), ("int8+kvbf16", 3.0),
                    ("f32+kvint8", 0.5), ("bf16+kvint8", 0.5), ("int8+kvint8", 3.0)):
    change = rows[name][1]
    assert abs(change) <= limit, f"{name} changes perplexity by {change:+.3f}% (limit {limit}%)"
print(f"ok: f32 perplexity {f32:.2f}; bf16 {rows['bf16'][1]:+.3f}%, int8 {rows['int8'][1]:+.3f}%, "
      f"bf16 KV cache {rows['f32+kvbf16'][1]:+.3f}% (bf16 weights {rows['bf16+kvbf16'][1]:+.3f}%, "
      f"int8 weights {rows['int8+kvbf16'][1]:+.3f}%), int8 KV cache {rows['f32+kvint8'][1]:+.3f}% "
      f"(bf16 weights {rows['bf16+kvint8'][1]:+.3f}%, int8 weights {rows['int8+kvint8'][1]:+.3f}%)")
PY
