#!/usr/bin/env bash
# Shared-memory segments leave nothing in /dev/shm, after a normal exit and after a
# rank is killed with SIGKILL in the middle of a collective.
#   shm_cleanup_test.sh PROBE MPIRUN [MPIRUN ARGS...]
set -u
probe=$1
shift
out=$(mktemp)
trap 'rm -f "$out"' EXIT

fail() {
  echo "FAIL: $*"
  cat "$out"
  exit 1
}

check_clean() {
  local name prefix
  name=$(sed -n 's/^segment \(\/distllm-comm-[0-9]*-[0-9]*\)$/\1/p' "$out" | head -1)
  [ -n "$name" ] || fail "the probe did not print its segment name"
  [ ! -e "/dev/shm$name" ] || fail "/dev/shm$name was left behind"
  prefix=${name%-*}
  if ls /dev/shm | grep -q "^${prefix#/}-"; then fail "segments of ${prefix#/} remain: $(ls /dev/shm)"; fi
  echo "ok: $1 left nothing in /dev/shm ($name)"
}

"$@" -n 3 "$probe" >"$out" 2>&1 || fail "normal run exited with $?"
check_clean "normal exit"

if "$@" -n 3 "$probe" --crash-rank 1 >"$out" 2>&1; then fail "the run with a killed rank exited 0"; fi
check_clean "a rank killed with SIGKILL"
