#!/usr/bin/env bash
# `distllm route --launch 2 --model DIR`: the router starts two real `distllm serve`
# replicas of a tiny GPT-2, serves through them, restarts one killed with SIGKILL
# (no request fails meanwhile: the other replica takes them), and stops both when
# it gets SIGTERM.
#   route_launch_e2e.sh DISTLLM_BINARY MAKE_TINY_MODEL_BINARY
set -euo pipefail
distllm=$1 make_model=$2
tmp=$(mktemp -d)
router=
cleanup() {
  [ -n "$router" ] && kill -TERM "$router" 2>/dev/null && wait "$router" 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT
set +e
"$make_model" "$tmp/tiny-gpt2" > /dev/null
rc=$?
set -e
[ $rc -eq 77 ] && exit 77
[ $rc -eq 0 ] || exit $rc

"$distllm" route --launch 2 --model "$tmp/tiny-gpt2" --replica-threads 1 --port 0 --health-interval 0.2 \
  --breaker-open 0.5 --failure-threshold 2 --log-dir "$tmp/logs" \
  --serve-args="--kv-cache-memory 0.05 --served-model-name test-model" > "$tmp/out" 2> "$tmp/err" &
router=$!
for _ in $(seq 600); do  # loading two models: up to 60 s
  grep -q "listening on" "$tmp/out" 2>/dev/null && break
  kill -0 "$router" 2>/dev/null || { echo "router exited:"; cat "$tmp/err"; exit 1; }
  sleep 0.1
done
url=$(sed -n 's/^listening on \(http:[^ ]*\).*/\1/p' "$tmp/out")
[ -n "$url" ] || { echo "router did not start:"; cat "$tmp/err"; exit 1; }

complete() {
  curl -sf --max-time 30 "$url/v1/completions" -H 'Content-Type: application/json' \
    -d '{"model": "test-model", "prompt": "Hello there", "max_tokens": 4, "temperature": 0}' > /dev/null
}
ready_replicas() { curl -sf --max-time 5 "$url/admin/replicas" | grep -o '"ready":true' | wc -l; }

for _ in $(seq 50); do [ "$(ready_replicas)" = 2 ] && break; sleep 0.1; done
[ "$(ready_replicas)" = 2 ] || { echo "expected 2 ready replicas"; curl -s "$url/admin/replicas"; exit 1; }
for i in $(seq 4); do complete || { echo "request $i failed"; exit 1; }; done

replicas=$(pgrep -P "$router" | sort)
[ "$(echo "$replicas" | wc -l)" = 2 ] || { echo "expected 2 replica processes: $replicas"; exit 1; }
victim=$(echo "$replicas" | head -1)
kill -9 "$victim"
for i in $(seq 20); do complete || { echo "request $i after the kill failed"; cat "$tmp/err"; exit 1; }; done
# The launcher restarts it on its port; the router's health checks see it back.
for _ in $(seq 600); do
  [ "$(pgrep -P "$router" | wc -l)" = 2 ] && [ "$(ready_replicas)" = 2 ] && break
  sleep 0.1
done
[ "$(ready_replicas)" = 2 ] || { echo "the killed replica did not come back"; cat "$tmp/err"; exit 1; }
grep -q "restarted on port" "$tmp/err" || { echo "no restart logged"; cat "$tmp/err"; exit 1; }
for i in $(seq 4); do complete || { echo "request $i after the restart failed"; exit 1; }; done

# SIGTERM: the router stops and takes its replicas along.
children=$(pgrep -P "$router" | tr '\n' ' ')
kill -TERM "$router"
for _ in $(seq 400); do kill -0 "$router" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$router" 2>/dev/null; then echo "router still running 40 s after SIGTERM"; exit 1; fi
wait "$router" || true
router=
for c in $children; do
  if kill -0 "$c" 2>/dev/null; then echo "replica $c outlived the router"; exit 1; fi
done
echo "route --launch: ok"
