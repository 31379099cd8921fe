# Helpers for the serving benchmarks (sourced). Run one benchmark at a time on a
# quiet machine; see docs/benchmarks.md.
DISTLLM=${DISTLLM:-build/release/bin/distllm}
# The benchmark lock every benchmark of the project takes (held until the script ends).
exec 8>/tmp/bench.lock
flock 8
THREADS=${THREADS:-2}
SERVE_PORT=${SERVE_PORT:-8123}
SERVE_PID=

# start_server MODEL_DIR [serve flags...]: starts `distllm serve` and waits for /health.
# $SERVE_LAUNCH, when set, goes before it (e.g. "mpirun -np 2 --bind-to none").
start_server() {
  local model=$1; shift
  # shellcheck disable=SC2086  # SERVE_LAUNCH is a command line, split on purpose
  ${SERVE_LAUNCH:-} "$DISTLLM" serve --model "$model" --port "$SERVE_PORT" --threads "$THREADS" "$@" \
    > /tmp/distllm_bench_serve.log 2>&1 &
  SERVE_PID=$!
  for _ in $(seq 600); do
    if curl -sf "http://127.0.0.1:$SERVE_PORT/health" > /dev/null; then return 0; fi
    if ! kill -0 "$SERVE_PID" 2>/dev/null; then cat /tmp/distllm_bench_serve.log; return 1; fi
    sleep 0.1
  done
  echo "server did not become healthy"; cat /tmp/distllm_bench_serve.log; return 1
}

# (mpirun, under SERVE_LAUNCH, exits non-zero when signalled: not a failure here.)
stop_server() {
  if [ -n "$SERVE_PID" ]; then kill "$SERVE_PID" 2>/dev/null; wait "$SERVE_PID" 2>/dev/null || true; SERVE_PID=; fi
}

# Benchmarks with several processes (replicas, a router) add their pids to `pids`;
# stop_all (also run on exit) stops them and the server.
pids=()
stop_all() {
  stop_server
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  pids=()
}
trap stop_all EXIT

# wait_health PORT: waits (up to 60 s) for a 200 from /health on 127.0.0.1:PORT.
wait_health() {
  for _ in $(seq 600); do curl -sf "http://127.0.0.1:$1/health" > /dev/null && return 0; sleep 0.1; done
  echo "no health on $1"; exit 1
}

# bench ARGS...: runs `distllm bench serve` against the server, saving JSON to $OUT.
bench() {
  "$DISTLLM" bench serve --port "$SERVE_PORT" --save-json "$OUT" "$@"
}

# json_field FILE KEY
json_field() { /usr/bin/python3 -c "import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])" "$1" "$2"; }
