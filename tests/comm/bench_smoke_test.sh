#!/usr/bin/env bash
# `distllm bench comm` runs every collective on every backend with a real check
# (#wrong must be 0), on small sizes so it stays quick.
#   bench_smoke_test.sh DISTLLM MPIRUN [MPIRUN ARGS...]
set -u
distllm=$1
shift
out=$(mktemp)
trap 'rm -f "$out"' EXIT
check() {
  local np=$1
  shift
  if ! "${MPIRUN[@]}" -n "$np" "$distllm" bench comm -b 8 -e 64K -f 16 -n 2 -w 1 --membw 10 "$@" >"$out" 2>&1; then
    echo "FAIL: bench comm $* (np=$np) exited non-zero"
    cat "$out"
    exit 1
  fi
  grep -q "^# Out of bounds values : 0 OK" "$out" || { echo "FAIL: bench comm $* (np=$np): no clean check"; cat "$out"; exit 1; }
  rows=$(grep -vc "^#" "$out")
  [ "$rows" -eq 4 ] || { echo "FAIL: bench comm $*: expected 4 rows, got $rows"; cat "$out"; exit 1; }
  echo "ok: np=$np $*"
}
MPIRUN=("$@")
for op in allreduce allgather reducescatter broadcast alltoall reduce; do check 3 --op "$op" --backend shm; done
check 2 --op allreduce --backend shm --dtype bf16 --redop avg
check 2 --op allreduce --backend mpi
check 2 --op alltoall --backend mpi
check 4 --op allreduce --backend hierarchical --test-only-ranks-per-host 2
for op in allreduce allgather reducescatter; do check 2 --op "$op" --backend raw-mpi; done
