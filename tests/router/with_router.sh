#!/usr/bin/env bash
# Runs a command against `distllm route` in front of N fresh replicas, then stops
# them all.
#   with_router.sh DISTLLM SERVE_TEST_SERVER N [route flags...] -- COMMAND [args...]
# COMMAND sees SERVE_PORT / SERVE_URL (the router's) and REPLICA_URLS.
set -euo pipefail
distllm=$1 server=$2 n=$3; shift 3
flags=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do flags+=("$1"); shift; done
[ "${1:-}" = "--" ] && shift
tmp=$(mktemp -d)
pids=()
cleanup() {
  for fd in $(seq 10 $((9 + n))); do eval "exec $fd>&-" 2>/dev/null || true; done  # replicas exit when stdin closes
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT
wait_port() {  # FILE PID -> prints the port from "listening on [http://host:]PORT"
  for _ in $(seq 200); do
    grep -q "listening on" "$1" 2>/dev/null && break
    kill -0 "$2" 2>/dev/null || { echo "process exited:" >&2; cat "$1.err" >&2; exit 1; }
    sleep 0.05
  done
  sed -n 's/.*listening on \(http:\/\/[^ ]*:\)\{0,1\}\([0-9][0-9]*\).*/\2/p' "$1" | head -1
}
replicas=()
for i in $(seq "$n"); do
  mkfifo "$tmp/in$i"
  "$server" --step-delay-ms 1 < "$tmp/in$i" > "$tmp/out$i" 2> "$tmp/out$i.err" &
  pids+=($!)
  eval "exec $((9 + i))> $tmp/in$i"
  port=$(wait_port "$tmp/out$i" "${pids[-1]}")
  replicas+=(--replica "http://127.0.0.1:$port")
done
"$distllm" route "${replicas[@]}" --port 0 "${flags[@]}" > "$tmp/router" 2> "$tmp/router.err" &
pids+=($!)
SERVE_PORT=$(wait_port "$tmp/router" "${pids[-1]}")
[ -n "$SERVE_PORT" ] || { echo "router did not start:"; cat "$tmp/router.err"; exit 1; }
export SERVE_PORT SERVE_URL="http://127.0.0.1:$SERVE_PORT" REPLICA_URLS="${replicas[*]}"
set +e
"$@"
rc=$?
set -e
kill -0 "${pids[-1]}" 2>/dev/null || { echo "the router died during the test:"; cat "$tmp/router.err"; exit 1; }
exit $rc
