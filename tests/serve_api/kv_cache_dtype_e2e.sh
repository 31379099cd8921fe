#!/usr/bin/env bash
# `distllm serve --kv-cache-dtype bf16` on a tiny random GPT-2 (GPT-2's tokenizer):
# the server answers, logs its KV cache dtype, and the same --kv-cache-memory holds
# twice the blocks of an f32 cache.
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

serve f32
stop
serve bf16
body='{"model":"m","prompt":"Hello bf16 cache","max_tokens":6,"temperature":0}'
code=$(curl -s -o "$tmp/c.json" -w '%{http_code}' -H "Content-Type: application/json" -d "$body" \
  "http://127.0.0.1:$port/v1/completions")
stop
[ "$code" = 200 ] || { echo "FAIL completion: HTTP $code"; cat "$tmp/c.json"; cat "$tmp/bf16.err"; exit 1; }
/usr/bin/python3 -c "import json,sys; j=json.load(open(sys.argv[1])); assert j['usage']['completion_tokens']==6, j" \
  "$tmp/c.json" || { echo "FAIL completion body"; exit 1; }
echo "ok   bf16 KV server answers"
f=$(blocks f32) b=$(blocks bf16)
[ -n "$f" ] && [ -n "$b" ] || { echo "FAIL no block count in the logs"; cat "$tmp/f32.err" "$tmp/bf16.err"; exit 1; }
[ "$b" -eq $((2 * f)) ] || { echo "FAIL bf16 cache has $b blocks, f32 $f (want twice)"; exit 1; }
echo "ok   blocks: f32 $f, bf16 $b"
grep -q "KV cache bf16" "$tmp/bf16.err" || { echo "FAIL the log does not name the KV cache dtype"; cat "$tmp/bf16.err"; exit 1; }
grep -q "KV cache f32" "$tmp/f32.err" || { echo "FAIL the f32 log does not name the KV cache dtype"; exit 1; }
echo "ok   logs name the dtype"
