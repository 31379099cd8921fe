#!/usr/bin/env bash
# A real Slurm cluster on this machine (deploy/slurm/local-cluster.sh): submit
# deploy/slurm/train-1node.sbatch (2 ranks, srun --mpi=pmix under distllm launch),
# preempt it with `scancel --batch --signal=USR1`, and check that the ranks saved, the
# job requeued itself, the rerun (SLURM_RESTART_COUNT=1) resumed from that checkpoint,
# and every step's loss equals an uninterrupted run's bit for bit.
#   slurm_requeue_test.sh DISTLLM MPIRUN SOURCE_DIR
set -euo pipefail
D="$(realpath "$1")"
MPIRUN="$2"
SRC="$(realpath "$3")"
fail() { echo "FAIL: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || fail "needs root to run a Slurm cluster (CI runs as root)"

T="$(mktemp -d /var/tmp/distllm-slurm.XXXXXX)"
chmod 755 "$T"
cleanup() {
  bash "$SRC/deploy/slurm/local-cluster.sh" stop "$T/cluster" || true
  rm -rf "$T"
}
trap cleanup EXIT
bash "$SRC/deploy/slurm/local-cluster.sh" start "$T/cluster" 4 || fail "the Slurm cluster did not start"
export SLURM_CONF="$T/cluster/slurm.conf"

head -c 60000 /usr/share/games/fortunes/fortunes > "$T/corpus.txt"
[ -s "$T/corpus.txt" ] || fail "no corpus: install Debian's fortunes"
STEPS=60
ARGS=(--text "$T/corpus.txt" --family gpt2 --n-layer 2 --n-head 2 --n-embd 32 --vocab-size 256 --seq 16
      --batch 2 --seed 5 --steps $STEPS --strategy zero2 --progress off --threads 1)

echo "== the uninterrupted run (mpirun, 2 ranks)"
"$MPIRUN" --allow-run-as-root --oversubscribe --bind-to none -n 2 "$D" train "${ARGS[@]}" \
  --metrics-file "$T/ref.jsonl" > "$T/ref.out" 2>&1 || { cat "$T/ref.out"; fail "the reference run failed"; }

# Returns a field of `scontrol show job`.
job_field() { timeout 5 scontrol show job "$1" 2>/dev/null | tr ' ' '\n' | sed -n "s/^$2=//p" | head -1; }
# wait_for SECONDS DESCRIPTION COMMAND...: polls every 0.2 s
wait_for() {
  local limit="$1" what="$2"; shift 2
  local end=$(( SECONDS + limit ))
  until "$@"; do
    [ "$SECONDS" -lt "$end" ] || { show_state; fail "timed out after ${limit} s waiting for: $what"; }
    sleep 0.2
  done
}
show_state() {
  timeout 5 scontrol show job "${job:-0}" || true
  for f in "$T"/*.out "$T"/logs/*/run_*/launcher.log "$T"/logs/*/run_*/attempt_0/rank_0.log; do
    [ -f "$f" ] && { echo "--- $f"; tail -20 "$f"; }
  done
  tail -20 "$T/cluster/log/slurmctld.log" || true
}

echo "== sbatch the template, preempt it mid-run"
cd "$T"
job="$(DISTLLM="$D" CKPT_DIR="$T/ckpt" CKPT_EVERY=1000 DISTLLM_TEST_STEP_DELAY_MS=150 \
       sbatch --parsable --time=10 "$SRC/deploy/slurm/train-1node.sbatch" "${ARGS[@]}" \
       --metrics-file "$T/run.jsonl")" || fail "sbatch failed"
echo "job $job"
beat="$T/logs/$job/run_0/attempt_0/../heartbeat/rank_0"
reached() { [ -s "$beat" ] && [ "$(cut -d' ' -f1 "$beat")" -ge "$1" ]; }
wait_for 120 "the first run reaching step 10" reached 10
timeout 10 scancel --batch --signal=USR1 "$job" || fail "scancel failed"

requeued() { [ "$(job_field "$job" Restarts)" = 1 ] && [ "$(job_field "$job" JobState)" = PENDING ]; }
wait_for 60 "the job to be requeued" requeued
# A requeued job waits for its BeginTime (about 2 minutes); start it sooner, but not
# within the second of the requeue: slurmd refuses a job whose credential was revoked
# (by the requeue) in the same second ("Job credential revoked").
timeout 10 scontrol update JobId="$job" StartTime=now+3 || fail "scontrol update failed"
done_ok() {
  local state
  state="$(job_field "$job" JobState)"
  case "$state" in
    COMPLETED) return 0 ;;
    FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY | BOOT_FAIL | DEADLINE)
      show_state; fail "the requeued job ended as $state" ;;
  esac
  return 1
}
wait_for 180 "the requeued run to complete" done_ok

out="$T/distllm-train-$job.out"
grep -q "run 1, 2 ranks" "$out" || { show_state; fail "no first run in the job output"; }
grep -q "Slurm job $job requeued" "$out" || { show_state; fail "launch did not requeue the job"; }
grep -q "run 2, 2 ranks" "$out" || { show_state; fail "the job did not run a second time"; }
saved="$(sed -n 's/^stopped by a signal after step \([0-9]*\).*checkpoint saved.*/\1/p' "$out" | head -1)"
[ -n "$saved" ] || { show_state; fail "the first run did not stop with a checkpoint"; }
grep -q "resumed from .* at step $saved" "$out" || { show_state; fail "the rerun did not resume from step $saved"; }
[ "$saved" -ge 10 ] && [ "$saved" -lt "$STEPS" ] || fail "preempted at step $saved, not mid-run"
echo "   preempted after step $saved, requeued, resumed"

python3 - "$T/ref.jsonl" "$T/run.jsonl" "$STEPS" <<'PY' || fail "the losses differ from the uninterrupted run"
import json, sys
def steps(p):
    return [json.loads(l) for l in open(p) if '"type":"step"' in l]
ref, run, n = steps(sys.argv[1]), steps(sys.argv[2]), int(sys.argv[3])
got = [r["step"] for r in run]
assert got == list(range(1, n + 1)), f"steps logged: {got}"
bad = [(a["step"], a["loss"], b["loss"]) for a, b in zip(ref, run) if a["loss"] != b["loss"]]
assert len(ref) == n and not bad, f"differing losses (step, reference, requeued): {bad[:5]}"
print(f"   {n} steps, every loss bit-identical; final loss {run[-1]['loss']}")
PY
echo "--- the job's output"; cat "$out"
echo PASS
