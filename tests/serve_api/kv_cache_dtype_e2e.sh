#!/usr/bin/env bash
# `distllm serve --kv-cache-dtype bf16|int8` on a tiny random GPT-2 (GPT-2's
# tokenizer): the server answers, logs its KV cache dtype, and the same
# --kv-cache-memory holds twice the blocks of an f32 cache (bf16), or f32's bytes
# over int8's (values plus one scale per token and head).
#   kv_cache_dtype_e2e.sh DISTLLM_BINARY MAKE_TINY_MODEL_BINARY
set -euo pipefail
distllm=$1 make_model=$2
tmp=$(mktemp -d)
pid=
cleanup() {
  [ -n "$pid" ] && { kill -TERM "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; }
  rm -rf "$tmp"
}
trap cleanup EXIT
set +e
"$make_model" "$tmp/tiny-gpt2" > /dev/null
rc=$?
set -e
[ $rc -eq 77 ] && exit 77
[ $rc -eq 0 ] || exit $rc

# serve DTYPE: starts a server, leaves its pid in $pid and its port in $port.
serve() {
  "$distllm" serve --model "$tmp/tiny-gpt2" --port 0 --threads 2 --served-model-name m --kv-cache-memory 0.01 \
    --kv-cache-dtype "$1" > "$tmp/$1.out" 2> "$tmp/$1.err" &
  pid=$!
  for _ in $(seq 200); do
    grep -q "listening on" "$tmp/$1.out" 2>/dev/null && break
    kill -0 "$pid" 2>/dev/null || { echo "server exited:"; cat "$tmp/$1.err"; exit 1; }
    sleep 0.05
  done
  port=$(sed -n 's/.*listening on http:\/\/[^ ]*:\([0-9][0-9]*\).*/\1/p' "$tmp/$1.out" | head -1)
  [ -n "$port" ] || { echo "server did not start:"; cat "$tmp/$1.err"; exit 1; }
}
stop() {
  kill -TERM "$pid"; wait "$pid" || true; pid=
}
blocks() {  # the engine's "engine: N KV blocks of ..." log line
  sed -n 's/.*engine: \([0-9][0-9]*\) KV blocks of.*/\1/p' "$tmp/$1.err" | head -1
}

bytes_per_block() {  # the same line's "N bytes per block"
  sed -n 's/.*KV cache [a-z0-9]*, \([0-9][0-9]*\) bytes per block.*/\1/p' "$tmp/$1.err" | head -1
}

serve f32
stop
f=$(blocks f32) fb=$(bytes_per_block f32)
for dtype in bf16 int8; do
  serve $dtype
  body="{\"model\":\"m\",\"prompt\":\"Hello $dtype cache\",\"max_tokens\":6,\"temperature\":0}"
  code=$(curl -s -o "$tmp/c.json" -w '%{http_code}' -H "Content-Type: application/json" -d "$body" \
    "http://127.0.0.1:$port/v1/completions")
  stop
  [ "$code" = 200 ] || { echo "FAIL $dtype completion: HTTP $code"; cat "$tmp/c.json"; cat "$tmp/$dtype.err"; exit 1; }
  /usr/bin/python3 -c "import json,sys; j=json.load(open(sys.argv[1])); assert j['usage']['completion_tokens']==6, j" \
    "$tmp/c.json" || { echo "FAIL $dtype completion body"; exit 1; }
  echo "ok   $dtype KV server answers"
  b=$(blocks $dtype) bb=$(bytes_per_block $dtype)
  [ -n "$f" ] && [ -n "$b" ] && [ -n "$fb" ] && [ -n "$bb" ] ||
    { echo "FAIL no block count in the logs"; cat "$tmp/f32.err" "$tmp/$dtype.err"; exit 1; }
  # bf16: half the bytes per block; int8: head_dim + 4 bytes per (token, head) for
  # f32's 4 * head_dim (the scales). Either way the same memory holds
  # floor(f32 blocks x f32 bytes / bytes) blocks, give or take the rounding.
  if [ $dtype = bf16 ]; then
    [ $((2 * bb)) -eq "$fb" ] || { echo "FAIL bf16 block is $bb bytes, f32 $fb (want half)"; exit 1; }
    [ "$b" -eq $((2 * f)) ] || { echo "FAIL bf16 cache has $b blocks, f32 $f (want twice)"; exit 1; }
  else
    [ $((bb * 4)) -gt "$fb" ] && [ $((bb * 3)) -lt "$fb" ] ||
      { echo "FAIL int8 block is $bb bytes, f32 $fb (want between a quarter and a third)"; exit 1; }
    [ $((b * bb)) -le $(((f + 1) * fb)) ] && [ $(((b + 1) * bb)) -gt $((f * fb)) ] ||
      { echo "FAIL int8 cache has $b blocks of $bb bytes, f32 $f of $fb"; exit 1; }
  fi
  echo "ok   blocks: f32 $f of $fb bytes, $dtype $b of $bb bytes"
  grep -q "KV cache $dtype" "$tmp/$dtype.err" || { echo "FAIL the log does not name the KV cache dtype"; cat "$tmp/$dtype.err"; exit 1; }
done
grep -q "KV cache f32" "$tmp/f32.err" || { echo "FAIL the f32 log does not name the KV cache dtype"; exit 1; }
echo "ok   logs name the dtype"
