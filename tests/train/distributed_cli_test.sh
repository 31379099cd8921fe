#!/usr/bin/env bash
# `distllm train` under mpirun, end to end: a sharded run that logs, plots and saves;
# ranks started with different settings or data; a rank killed mid-step.
#   distributed_cli_test.sh DISTLLM MPIRUN...
set -euo pipefail
D="$1"; shift
MPIRUN=("$@")
T="$(mktemp -d)"
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# A corpus of fortunes (Debian's fortunes package; setup.sh installs it).
cat /usr/share/games/fortunes/{computers,fortunes,science} > "$T/a.txt"
[ -s "$T/a.txt" ] || fail "no corpus: /usr/share/games/fortunes is missing (install Debian's fortunes)"
head -c 20000 "$T/a.txt" > "$T/b.txt"
M=(--family gpt2 --n-layer 2 --n-head 2 --n-embd 32 --vocab-size 256 --seq 32 --batch 2 --seed 3 --progress off)

echo "== 2 ranks, zero3: log, metrics file, loss curve, saved model"
"${MPIRUN[@]}" -n 2 "$D" train --text "$T/a.txt" "${M[@]}" --steps 6 --eval-every 3 --strategy zero3 \
  --metrics-file "$T/run.jsonl" --out "$T/model" > "$T/run.out" 2>&1 || { cat "$T/run.out"; fail "2-rank run failed"; }
grep -q "parallel: zero3, 2 ranks" "$T/run.out" || fail "no parallel line"
grep -q "tok/s | comm" "$T/run.out" || fail "step lines lack communication figures"
grep -Eq "eval +6 \| val loss [0-9.]+ \([0-9.]+ bits/byte\) \| peak MiB/rank \[[0-9.]+ [0-9.]+\]" "$T/run.out" \
  || fail "eval line lacks bits per byte or per-rank memory"
[ "$(grep -c '"type":"step"' "$T/run.jsonl")" = 6 ] || fail "expected 6 step records"
grep '"type":"eval"' "$T/run.jsonl" | grep -q '"ranks":\[{' || fail "eval records lack per-rank figures"
grep -q "<svg" "$T/model.loss.svg" || fail "no loss curve next to --out"
grep -q "<polyline" "$T/model.loss.svg" || fail "loss curve has no line"
[ -f "$T/model/config.json" ] && [ -f "$T/model/model.safetensors" ] || fail "model not saved"
"$D" plot "$T/run.jsonl" --out "$T/replot.svg" > /dev/null
grep -q "validation loss" "$T/replot.svg" || fail "distllm plot made no legend"

echo "== --strategy auto asks the planner, which fits the memory given"
"${MPIRUN[@]}" -n 2 "$D" train --text "$T/a.txt" "${M[@]}" --steps 1 --strategy auto --memory-gb 0.00135 \
  > "$T/auto.out" 2>&1 || { cat "$T/auto.out"; fail "auto run failed"; }
grep -Eq "^strategy auto: zero1" "$T/auto.out" || { cat "$T/auto.out"; fail "no auto choice printed"; }
set +e
"${MPIRUN[@]}" -n 2 "$D" train --text "$T/a.txt" "${M[@]}" --steps 1 --strategy auto --memory-gb 0.0001 > "$T/auto2.out" 2>&1
rc=$?
set -e
[ $rc -ne 0 ] && grep -q "no strategy fits in" "$T/auto2.out" || { cat "$T/auto2.out"; fail "an impossible memory limit was not refused"; }

echo "== one process without a launcher: unchanged, no communication"
"$D" train --text "$T/a.txt" "${M[@]}" --steps 2 > "$T/single.out" 2>&1 || { cat "$T/single.out"; fail "single run"; }
grep -q "parallel: none, 1 rank" "$T/single.out" || fail "single process should run strategy none"
if grep -q "| comm" "$T/single.out"; then fail "single process reported communication"; fi

echo "== ranks with different flags or data fail at start, naming the field"
set +e
"${MPIRUN[@]}" -n 1 "$D" train --text "$T/a.txt" "${M[@]}" --steps 2 --lr 1e-3 : \
  -n 1 "$D" train --text "$T/a.txt" "${M[@]}" --steps 2 --lr 2e-3 > "$T/mm.out" 2>&1
rc=$?
set -e
[ $rc -ne 0 ] || fail "different --lr was accepted"
grep -q "different settings: --lr is '0.002' on rank 1 but '0.001' on rank 0" "$T/mm.out" || { cat "$T/mm.out"; fail "--lr not named"; }
set +e
"${MPIRUN[@]}" -n 1 "$D" train --text "$T/a.txt" "${M[@]}" --steps 2 : \
  -n 1 "$D" train --text "$T/b.txt" "${M[@]}" --steps 2 > "$T/mm2.out" 2>&1
rc=$?
set -e
[ $rc -ne 0 ] || fail "different data was accepted"
grep -q "different settings: training data is" "$T/mm2.out" || { cat "$T/mm2.out"; fail "data not named"; }

echo "== a rank killed mid-step: the others stop within the comm timeout, naming it"
# --enable-recovery keeps mpirun from killing the job itself, so the survivors'
# own timeout is what ends it.
export DISTLLM_COMM_TIMEOUT=5 DISTLLM_TEST_KILL_RANK=1 DISTLLM_TEST_KILL_STEP=3
start=$(date +%s)
set +e
timeout 60 "${MPIRUN[@]}" --enable-recovery -x DISTLLM_COMM_TIMEOUT -x DISTLLM_TEST_KILL_RANK -x DISTLLM_TEST_KILL_STEP \
  -n 3 "$D" train --text "$T/a.txt" "${M[@]}" --steps 20 --strategy ddp > "$T/kill.out" 2>&1
rc=$?
set -e
elapsed=$(( $(date +%s) - start ))
[ $rc -ne 124 ] || { cat "$T/kill.out"; fail "the job hung after a rank died"; }
[ "$(grep -c 'aborting the job: .*ranks \[1\] did not arrive' "$T/kill.out")" -ge 1 ] || { cat "$T/kill.out"; fail "the missing rank was not named"; }
grep -q "MPI_ABORT was invoked on rank [02]" "$T/kill.out" || fail "survivors did not end the job with an error"
[ $elapsed -lt 40 ] || fail "took ${elapsed}s to notice the dead rank"
# Without recovery the launcher ends the job at once, non-zero.
set +e
timeout 60 "${MPIRUN[@]}" -x DISTLLM_COMM_TIMEOUT -x DISTLLM_TEST_KILL_RANK -x DISTLLM_TEST_KILL_STEP \
  -n 3 "$D" train --text "$T/a.txt" "${M[@]}" --steps 20 --strategy zero2 > "$T/kill2.out" 2>&1
rc=$?
set -e
[ $rc -ne 0 ] && [ $rc -ne 124 ] || { cat "$T/kill2.out"; fail "expected a non-zero exit, got $rc"; }

echo "== pipeline: a rank killed mid-step, its pipeline neighbour and its dp peer name it"
# pp=2 x dp=2: rank 1 is stage 0 of the second pipeline (rank 3 is its stage 1, rank
# 0 its data-parallel peer); it dies before its first backward of step 3.
start=$(date +%s)
set +e
timeout 60 "${MPIRUN[@]}" --enable-recovery -x DISTLLM_COMM_TIMEOUT -x DISTLLM_TEST_KILL_RANK -x DISTLLM_TEST_KILL_STEP \
  -n 4 "$D" train --text "$T/a.txt" "${M[@]}" --steps 20 --mesh pp=2,dp=2 --micro-batches 3 > "$T/killpp.out" 2>&1
rc=$?
set -e
elapsed=$(( $(date +%s) - start ))
[ $rc -ne 124 ] || { cat "$T/killpp.out"; fail "the pipeline job hung after a rank died"; }
# Subgroups name the world rank too: "peers [0] (world [1]) did not complete ...".
grep -Eq 'aborting the job: .*(ranks|peers) \[[0-9]+\] \(world \[1\]\) did not' "$T/killpp.out" \
  || { cat "$T/killpp.out"; fail "the missing pipeline rank was not named"; }
[ $elapsed -lt 40 ] || fail "took ${elapsed}s to notice the dead pipeline rank"
unset DISTLLM_COMM_TIMEOUT DISTLLM_TEST_KILL_RANK DISTLLM_TEST_KILL_STEP

echo "== pipeline: 2 stages log their bubble and save the whole model; pp > layers is refused"
"${MPIRUN[@]}" -n 2 "$D" train --text "$T/a.txt" "${M[@]}" --steps 3 --mesh pp=2 --micro-batches 4 \
  --pp-schedule gpipe --out "$T/ppmodel" > "$T/pp.out" 2>&1 || { cat "$T/pp.out"; fail "pp=2 run failed"; }
grep -Eq "bubble [0-9]+% [0-9]+% \(ideal 20%\)" "$T/pp.out" || { cat "$T/pp.out"; fail "no bubble on step lines"; }
grep -q "pipeline bubble (mean of steps 2..): stage 0" "$T/pp.out" || fail "no bubble summary"
"$D" generate --model "$T/ppmodel" --prompt "The" --max-tokens 4 > /dev/null || fail "the pp model does not load"
set +e
"${MPIRUN[@]}" -n 4 "$D" train --text "$T/a.txt" "${M[@]}" --steps 1 --mesh pp=4 > "$T/pp4.out" 2>&1
rc=$?
set -e
[ $rc -ne 0 ] && grep -q "pp=4 pipeline stages but the model has 2 layers" "$T/pp4.out" \
  || { cat "$T/pp4.out"; fail "pp > layers was not refused"; }
echo "PASS"
