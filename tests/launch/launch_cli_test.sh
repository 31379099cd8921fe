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
M=(--text "$T/corpus.txt" --family gpt2 --n-layer 1 --n-head 2 --n-embd 32 --vocab-size 256 --seq 16 --batch 2
   --seed 7 --progress off --strategy zero2 --steps 10 --checkpoint-every 2 --checkpoint-async false)
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
grep -Eq "launch: rank [01] made no progress for [0-9]+ s \(last step 2\); stopping the job" "$T/hang.out" \
  || { cat "$T/hang.out"; fail "hang not reported"; }
grep -q "resumed from $T/ck2 at step 2" "$T/hang.out" || fail "did not resume from step 2"
[ "$(losses_after "$T/hang.out" 2)" = "$(losses_after "$T/ref.out" 2)" ] || fail "losses after the hang differ"
! pgrep -f "$T/ck2" > /dev/null || fail "processes of the hung attempt are still running"

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
