#!/usr/bin/env bash
# Runs a command against a freshly started server, then stops the server.
#   with_test_server.sh SERVER_BINARY [server flags...] -- COMMAND [args...]
# The server prints "listening on PORT"; COMMAND sees SERVE_PORT and SERVE_URL.
# The server's stdin is a pipe this script holds (serve_test_server exits when it
# closes, so a harness killed by a timeout takes it along); it also gets SIGTERM.
set -euo pipefail
server=$1; shift
flags=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do flags+=("$1"); shift; done
[ "${1:-}" = "--" ] && shift
tmp=$(mktemp -d)
mkfifo "$tmp/in"
"$server" "${flags[@]}" < "$tmp/in" > "$tmp/out" 2> "$tmp/err" &
pid=$!
exec 3> "$tmp/in"
cleanup() {
  exec 3>&-                          # serve_test_server exits when stdin closes;
  kill -TERM "$pid" 2>/dev/null || true  # distllm serve on SIGTERM
  wait "$pid" || true
  rm -rf "$tmp"
}
trap cleanup EXIT
# Up to 30 s: under a parallel ctest a model server's start-up (mapping, packing)
# shares the cores with other tests, and 5 s was once not enough.
for _ in $(seq 600); do
  grep -q "listening on" "$tmp/out" 2>/dev/null && break
  kill -0 "$pid" 2>/dev/null || { echo "server exited:"; cat "$tmp/err"; exit 1; }
  sleep 0.05
done
SERVE_PORT=$(sed -n 's/.*listening on \(http:\/\/[^ ]*:\)\{0,1\}\([0-9][0-9]*\).*/\2/p' "$tmp/out" | head -1)
[ -n "$SERVE_PORT" ] || { echo "server did not start:"; cat "$tmp/err"; exit 1; }
export SERVE_PORT SERVE_URL="http://127.0.0.1:$SERVE_PORT"
set +e
"$@"
rc=$?
set -e
if ! kill -0 "$pid" 2>/dev/null; then
  echo "the server died during the test:"; cat "$tmp/err"; exit 1
fi
exit $rc
