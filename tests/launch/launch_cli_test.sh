#!/usr/bin/env bash
# `distllm launch` under mpirun: a rank killed mid-step and a hung rank are found,
# the job is stopped and restarted from the newest checkpoint, and the losses from
# there on equal an uninterrupted run's; with no restarts left it fails saying why.
#   launch_cli_test.sh DISTLLM MPIRUN...
set -euo pipefail
D="$(realpath "$1")"; shift
MPIRUN=("$@")
T="$(mktemp -d)"
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

head -c 40000 /usr/share/games/fortunes/fortunes > "$T/corpus.txt"
[ -s "$T/corpus.txt" ] || fail "no corpus: install Debian's fortunes"
BASE=(--text "$T/corpus.txt" --family gpt2 --n-layer 1 --n-head 2 --n-embd 32 --vocab-size 256 --seq 16 --batch 2
   --seed 7 --progress off --strategy zero2 --checkpoint-every 2 --checkpoint-async false)
M=("${BASE[@]}" --steps 10)
LONG=("${BASE[@]}" --steps 200)  # slowed by DISTLLM_TEST_STEP_DELAY_MS: runs until stopped
losses_after() { grep -E "^step +[0-9]+/" "$1" | awk -v from="$2" '{split($2, a, "/"); if (a[1] + 0 > from) print $2, $5}'; }

echo "== reference: 2 ranks, uninterrupted"
"${MPIRUN[@]}" -n 2 "$D" train "${M[@]}" --checkpoint-dir "$T/ref_ck" > "$T/ref.out" 2>&1 || { cat "$T/ref.out"; fail "reference failed"; }

echo "== rank 1 killed in step 5: restarted from step 4, same losses"
DISTLLM_TEST_KILL_RANK=1 DISTLLM_TEST_KILL_STEP=5 \
  "$D" launch -n 2 --max-restarts 2 --hang-timeout 60 --log-dir "$T/logs" -- "$D" train "${M[@]}" \
  --checkpoint-dir "$T/ck" > "$T/kill.out" 2>&1 || { cat "$T/kill.out"; fail "launch did not recover"; }
grep -q "launch: rank 1 killed by signal 9; restarting (1 of 2)" "$T/kill.out" || { cat "$T/kill.out"; fail "no restart line"; }
grep -q "resumed from $T/ck at step 4" "$T/kill.out" || fail "rank 0's log (echoed) does not show the resume"
grep -Eq "^launch: done: finished \(1 restart; recovery [0-9.]+ s\)$" "$T/kill.out" || { tail -3 "$T/kill.out"; fail "bad last line"; }
[ "$(losses_after "$T/kill.out" 4)" = "$(losses_after "$T/ref.out" 4)" ] || fail "losses after the restart differ"
[ -f "$T/logs/attempt_0/rank_1.log" ] && [ -s "$T/logs/attempt_1/rank_0.log" ] || fail "no per-rank logs"

echo "== rank 0 hangs in step 3: found by its heartbeat, restarted"
DISTLLM_TEST_HANG_RANK=0 DISTLLM_TEST_HANG_STEP=3 \
  "$D" launch -n 2 --max-restarts 1 --hang-timeout 4 --kill-grace 2 --log-dir "$T/logs2" -- "$D" train "${M[@]}" \
  --checkpoint-dir "$T/ck2" > "$T/hang.out" 2>&1 || { cat "$T/hang.out"; fail "launch did not recover from a hang"; }
grep -Eq "launch: rank 0 made no progress for [0-9]+ s \(last step 2\) while the other ranks wait for it; stopping the job" \
  "$T/hang.out" \
  || { cat "$T/hang.out"; fail "hang not reported"; }
grep -q "resumed from $T/ck2 at step 2" "$T/hang.out" || fail "did not resume from step 2"
[ "$(losses_after "$T/hang.out" 2)" = "$(losses_after "$T/ref.out" 2)" ] || fail "losses after the hang differ"
! pgrep -f "$T/ck2" > /dev/null || fail "processes of the hung attempt are still running"

echo "== rank 1 hangs while rank 0 waits for it: rank 1 is named"
set +e
DISTLLM_TEST_HANG_RANK=1 DISTLLM_TEST_HANG_STEP=3 \
  "$D" launch -n 2 --max-restarts 0 --hang-timeout 4 --kill-grace 2 --log-dir "$T/logs5" -- "$D" train "${M[@]}" \
  --checkpoint-dir "$T/ck5" > "$T/hang1.out" 2>&1
set -e
grep -Eq "launch: rank 1 made no progress for [0-9]+ s \(last step 2\) while the other ranks wait for it" "$T/hang1.out" \
  || { cat "$T/hang1.out"; fail "the hung rank 1 was not named"; }

echo "== a stopped rank (SIGSTOP) is named by its silence"
DISTLLM_TEST_STEP_DELAY_MS=300 "$D" launch -n 2 --max-restarts 0 --hang-timeout 6 --kill-grace 2 --log-dir "$T/logs6" \
  -- "$D" train "${LONG[@]}" --checkpoint-dir "$T/ck6" > "$T/stop.out" 2>&1 &
launcher=$!
for _ in $(seq 100); do [ -f "$T/logs6/heartbeat/rank_1" ] && break; sleep 0.2; done
stopped=""
for p in $(pgrep -f -- "--checkpoint-dir $T/ck6"); do
  if tr '\0' '\n' < "/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=1"; then kill -STOP "$p"; stopped=$p; fi
done
[ -n "$stopped" ] || { kill "$launcher"; fail "rank 1's process not found"; }
set +e
wait "$launcher"
set -e
grep -Eq "launch: rank 1 stopped responding: no liveness beat for [0-9]+ s" "$T/stop.out" \
  || { cat "$T/stop.out"; fail "the stopped rank 1 was not named"; }
# Killed (a zombie until something reaps it counts as gone).
alive_state() { [ -r "/proc/$1/stat" ] && ! sed 's/.*) //' "/proc/$1/stat" | grep -q '^Z'; }
for _ in $(seq 25); do alive_state "$stopped" || break; sleep 0.2; done
! alive_state "$stopped" || fail "the stopped rank outlived its job"

echo "== a launcher killed with SIGKILL takes its ranks with it"
DISTLLM_TEST_STEP_DELAY_MS=300 "$D" launch -n 2 --lease-timeout 3 --log-dir "$T/logs7" \
  -- "$D" train "${LONG[@]}" --checkpoint-dir "$T/ck7" > "$T/orphan.out" 2>&1 &
launcher=$!
for _ in $(seq 100); do [ -f "$T/logs7/heartbeat/rank_1" ] && break; sleep 0.2; done
kill -KILL "$launcher"
gone=""
ranks_alive() { for p in $(pgrep -f -- "--checkpoint-dir $T/$1"); do alive_state "$p" && return 0; done; return 1; }
for _ in $(seq 100); do ranks_alive ck7 || { gone=1; break; }; sleep 0.2; done
[ -n "$gone" ] || { pkill -KILL -f -- "--checkpoint-dir $T/ck7"; fail "ranks outlived their SIGKILLed launcher by 20 s"; }

echo "== a rank whose launcher's lease is not renewed saves and stops by itself"
mkdir -p "$T/hb8"
echo "$(date +%s.%N) 1" > "$T/hb8/launcher"  # a lease that is never renewed
set +e
DISTLLM_HEARTBEAT_DIR="$T/hb8" DISTLLM_LAUNCHER_LEASE_S=2 DISTLLM_TEST_STEP_DELAY_MS=300 \
  timeout 60 "$D" train "${LONG[@]}" --checkpoint-dir "$T/ck8" > "$T/lease.out" 2>&1
rc=$?
set -e
[ $rc -ne 124 ] || fail "the rank ran on without its launcher"
grep -q "the launcher stopped renewing its lease" "$T/lease.out" || { cat "$T/lease.out"; fail "no lease message"; }
grep -q "stopped by a signal after step" "$T/lease.out" || { cat "$T/lease.out"; fail "the rank did not save and stop"; }

echo "== no restarts left: fails, and the last line says why"
set +e
DISTLLM_TEST_KILL_RANK=1 DISTLLM_TEST_KILL_STEP=3 \
  "$D" launch -n 2 --max-restarts 0 --log-dir "$T/logs3" -- "$D" train "${M[@]}" --checkpoint-dir "$T/ck3" \
  > "$T/fail.out" 2>&1
rc=$?
set -e
[ $rc -ne 0 ] || fail "launch exited 0 after a failure with no restarts left"
tail -1 "$T/fail.out" | grep -q "^launch: failed: rank 1 killed by signal 9; no restarts left (0 used) (0 restarts)$" \
  || { tail -3 "$T/fail.out"; fail "bad last line"; }

echo "== a rank's error is named"
set +e
"$D" launch -n 2 --max-restarts 0 --log-dir "$T/logs4" -- "$D" train "${M[@]}" --lr -1 > "$T/err.out" 2>&1
rc=$?
set -e
[ $rc -ne 0 ] || fail "a bad flag was not reported as a failure"
tail -1 "$T/err.out" | grep -q "(rank [01]: learning rate must be positive, got -1)" || { tail -3 "$T/err.out"; fail "the rank's error is not named"; }
echo PASS
