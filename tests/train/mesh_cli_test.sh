#!/usr/bin/env bash
# `distllm train --mesh` under mpirun, end to end: tensor parallelism (tp=2, with
# sequence parallelism at tp=4), context parallelism (cp=2), dp=2 x tp=2,
# dp=2 x cp=2, pp=2 x tp=2, pp=2 x cp=2, dp=2 x pp=2 (ZeRO-3) meshes and pp=2 under
# the interleaved schedule (2 virtual stages) train the
# same model as one process (losses and the saved model), checkpoints move between
# tp sizes and meshes, meshes that do not fit the model or
# the world are refused naming why, and a rank killed mid-step ends the job, named,
# within the comm timeout.
#   mesh_cli_test.sh DISTLLM MPIRUN...
set -euo pipefail
D="$1"; shift
MPIRUN=("$@")
T="$(mktemp -d)"
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
PY=/usr/bin/python3

cat /usr/share/games/fortunes/{computers,fortunes,science} > "$T/a.txt"
[ -s "$T/a.txt" ] || fail "no corpus: /usr/share/games/fortunes is missing (install Debian's fortunes)"
# 12 heads of 3 (width 36, not a multiple of 8) and a vocabulary of 259 (odd).
M=(--family gpt2 --n-layer 2 --n-head 12 --n-embd 36 --vocab-size 259 --seq 32 --seed 3 --progress off
   --threads 1 --eval-every 4 --eval-batches 2 --schedule constant)  # constant: a run cut short and resumed
   # follows the same learning rates as one run

run() {  # name, ranks (0: no launcher), then train flags
  local name=$1 np=$2; shift 2
  local cmd=("$D" train --text "$T/a.txt" "${M[@]}" --metrics-file "$T/$name.jsonl" "$@")
  [ "$np" = 0 ] || cmd=("${MPIRUN[@]}" -n "$np" "${cmd[@]}")
  "${cmd[@]}" > "$T/$name.out" 2>&1 || { cat "$T/$name.out"; fail "$name run failed"; }
}
# Step losses, gradient norms and validation losses of two runs (the second may be
# a resumed run: its records) agree to 1e-5
# relative (fp32 reduction order; measured: about 1e-7).
same() {
  $PY - "$T/$1.jsonl" "$T/$2.jsonl" <<'PYEOF'
import json, sys
def load(p):
    recs = [json.loads(l) for l in open(p)]
    return [(r["type"], r.get("step"), r.get("loss", r.get("val_loss")), r.get("grad_norm")) for r in recs]
a, b = load(sys.argv[1]), load(sys.argv[2])
# A resumed run has only the later records (and evaluates where it resumed):
# compare the records both have.
keys = {x[:2] for x in a} & {x[:2] for x in b}
a = [x for x in a if x[:2] in keys]
b = [x for x in b if x[:2] in keys]
assert len(a) == len(b) and len(a) > 0, (len(a), len(b))
worst = 0.0
for x, y in zip(a, b):
    assert x[:2] == y[:2], (x, y)
    for u, v in zip(x[2:], y[2:]):
        if u is None: continue
        worst = max(worst, abs(u - v) / abs(u))
print("worst relative difference %.2e" % worst)
sys.exit(0 if worst < 1e-5 else 1)
PYEOF
}

echo "== tp=2 and dp=2 x tp=2 train the one-process model"
run single 0 --steps 8 --batch 4 --out "$T/single"
run tp2 2 --steps 8 --batch 4 --mesh tp=2 --out "$T/tp2"
grep -q "parallel: none, 1 rank per tensor-parallel shard, tp 2" "$T/tp2.out" || { cat "$T/tp2.out"; fail "no tp in the parallel line"; }
grep -q "^mesh: dp=1 x tp=2" "$T/tp2.out" || fail "no mesh line"
same single tp2 || fail "tp=2 differs from one process"
run mesh4 4 --steps 8 --batch 2 --mesh tp=2,dp=2 --strategy zero2
grep -q "^mesh: tp=2 x dp=2" "$T/mesh4.out" || { cat "$T/mesh4.out"; fail "no mesh line"; }
same single mesh4 || fail "tp=2 x dp=2 (zero2) differs from one process"
run sp4 4 --steps 8 --batch 4 --mesh tp=4 --sequence-parallel
grep -q "tp 4 with sequence parallelism" "$T/sp4.out" || { cat "$T/sp4.out"; fail "no sequence parallelism in the parallel line"; }
same single sp4 || fail "tp=4 with sequence parallelism differs from one process"

echo "== context parallel (ring attention): cp=2 and dp=2 x cp=2 train the one-process model"
run cp2 2 --steps 8 --batch 4 --mesh cp=2
grep -q "^mesh: dp=1 x cp=2" "$T/cp2.out" || { cat "$T/cp2.out"; fail "no mesh line"; }
same single cp2 || fail "cp=2 differs from one process"
run cp_mesh 4 --steps 8 --batch 2 --mesh dp=2,cp=2 --strategy zero1
same single cp_mesh || fail "dp=2 x cp=2 differs from one process"

echo "== pipelines on a mesh: pp=2 x tp=2, pp=2 x cp=2 and dp=2 x pp=2 under ZeRO-3 train the one-process model"
run pp_tp 4 --steps 8 --batch 2 --micro-batches 2 --mesh pp=2,tp=2
grep -q "^mesh: dp=1 x pp=2 x tp=2" "$T/pp_tp.out" || { cat "$T/pp_tp.out"; fail "no mesh line"; }
same single pp_tp || fail "pp=2 x tp=2 differs from one process"
run pp_cp 4 --steps 8 --batch 2 --micro-batches 2 --mesh pp=2,cp=2 --pp-schedule gpipe
same single pp_cp || fail "pp=2 x cp=2 differs from one process"
run pp_zero3 4 --steps 8 --batch 1 --micro-batches 2 --mesh dp=2,pp=2 --strategy zero3
grep -q "parallel: zero3, 2 ranks per pipeline stage" "$T/pp_zero3.out" || { cat "$T/pp_zero3.out"; fail "no zero3 per stage"; }
same single pp_zero3 || fail "dp=2 x pp=2 under ZeRO-3 differs from one process"

echo "== interleaved 1F1B: pp=2 with 2 virtual stages (4 layers in 4 chunks) trains the one-process model"
M2=("${M[@]}")
M=(); prev=""
for a in "${M2[@]}"; do [ "$prev" = --n-layer ] && a=4; M+=("$a"); prev=$a; done
run single4 0 --steps 8 --batch 4
run interleaved 2 --steps 8 --batch 2 --micro-batches 2 --mesh pp=2 --pp-schedule interleaved --virtual-stages 2
grep -q "interleaved schedule of 2 chunks per stage, 2 micro-batches (ideal bubble 20.0%); rank 0 holds stage 0/2: embedding + layer 0, layer 2 (chunks 0, 2 of 4)" \
  "$T/interleaved.out" || { cat "$T/interleaved.out"; fail "no interleaved pipeline line"; }
same single4 interleaved || fail "pp=2 interleaved (v=2) differs from one process"
M=("${M2[@]}")

echo "== the saved tp model is the whole model: it evaluates as the one-process one"
run from_single 0 --batch 4 --steps 1 --init-from "$T/single"
run from_tp2 0 --batch 4 --steps 1 --init-from "$T/tp2"
same from_single from_tp2 || fail "the model saved by tp=2 differs"

echo "== a tp=2 checkpoint resumes at tp=1, and a tp=1 one at dp=2 x tp=2"
run ck_tp2 2 --steps 4 --batch 4 --mesh tp=2 --checkpoint-dir "$T/ck"
$PY -c 'import json,sys; assert json.load(open(sys.argv[1]))["mesh"]["tp"] == 2' "$T"/ck/step_*4/manifest.json || fail "the manifest does not record tp"
run ck_tp1 0 --steps 8 --batch 4 --checkpoint-dir "$T/ck" --resume auto --checkpoint-every 6
grep -q "resumed from .* at step 4" "$T/ck_tp1.out" || { cat "$T/ck_tp1.out"; fail "did not resume at step 4"; }
same single ck_tp1 || fail "tp=2 -> tp=1 differs from one process"
rm -rf "$T"/ck/step_*8
run ck_mesh 4 --steps 8 --batch 2 --mesh dp=2,tp=2 --strategy zero3 --checkpoint-dir "$T/ck" --resume auto
grep -q "resumed from .* at step 6" "$T/ck_mesh.out" || { cat "$T/ck_mesh.out"; fail "did not resume at step 6"; }
same single ck_mesh || fail "tp=1 -> dp=2 x tp=2 differs from one process"
# The same global batch split another way (2 sequences x 2 micro-batches on one
# pipeline instead of 2 x 2 data-parallel ranks) continues from the same data.
rm -rf "$T"/ck/step_*8
run ck_pp 4 --steps 8 --batch 2 --micro-batches 2 --mesh pp=2,tp=2 --checkpoint-dir "$T/ck" --resume auto
grep -q "resumed from .* at step 6" "$T/ck_pp.out" || { cat "$T/ck_pp.out"; fail "did not resume at step 6"; }
same single ck_pp || fail "dp=2 x tp=2 zero3 -> pp=2 x tp=2 differs from one process"

echo "== meshes that do not fit are refused, naming why"
expect_error() {  # ranks, message, flags... (model flags: $MODEL, default M)
  local np=$1 msg=$2; shift 2
  local model=("${M[@]}")
  [ -z "${MODEL:-}" ] || read -r -a model <<< "$MODEL"
  set +e
  timeout 60 "${MPIRUN[@]}" -n "$np" "$D" train --text "$T/a.txt" "${model[@]}" --steps 2 "$@" > "$T/err.out" 2>&1
  local rc=$?
  set -e
  [ $rc -ne 0 ] && [ $rc -ne 124 ] || { cat "$T/err.out"; fail "accepted: $*"; }
  grep -q -- "$msg" "$T/err.out" || { cat "$T/err.out"; fail "no '$msg' for: $*"; }
}
MODEL="--family gpt2 --n-layer 2 --n-head 6 --n-embd 36 --vocab-size 259 --seq 32 --progress off --threads 1" \
  expect_error 4 "does not divide the model's 6 attention heads (n_head)" --mesh dp=1,tp=4,cp=1
expect_error 2 "--sequence-parallel needs a --mesh with tp > 1" --sequence-parallel
expect_error 2 "has 3 positions but 2 ranks were started" --mesh dp=3,tp=1
expect_error 2 "unknown dimension 'xp'" --mesh xp=2
expect_error 3 "the sequence length 32 must be a multiple of 6" --mesh cp=3
expect_error 2 "pp=2 with --virtual-stages 2 makes 4 model chunks but the model has 2 layers" \
  --mesh pp=2 --pp-schedule interleaved --virtual-stages 2 --micro-batches 2

echo "== a rank killed mid-step: the others stop within the comm timeout, naming it"
export DISTLLM_COMM_TIMEOUT=5 DISTLLM_TEST_KILL_RANK=1 DISTLLM_TEST_KILL_STEP=3
start=$(date +%s)
set +e
timeout 60 "${MPIRUN[@]}" --enable-recovery -x DISTLLM_COMM_TIMEOUT -x DISTLLM_TEST_KILL_RANK -x DISTLLM_TEST_KILL_STEP \
  -n 4 "$D" train --text "$T/a.txt" "${M[@]}" --steps 20 --batch 2 --mesh dp=2,tp=2 > "$T/kill.out" 2>&1
rc=$?
set -e
elapsed=$(( $(date +%s) - start ))
[ $rc -ne 124 ] || { cat "$T/kill.out"; fail "the job hung after a rank died"; }
grep -q "MPI_ABORT was invoked on rank [023]" "$T/kill.out" || { cat "$T/kill.out"; fail "survivors did not end the job with an error"; }
# Its tp peer names it (group rank 1 = world rank 1). Ranks blocked behind that
# peer time out too and name whom they waited for (with world ranks in groups
# whose ranks are not the world's).
grep -q "aborting the job: .*'world/tp0'.*ranks \[1\] did not arrive" "$T/kill.out" || { cat "$T/kill.out"; fail "the missing rank was not named"; }
[ $elapsed -lt 40 ] || fail "took ${elapsed}s to notice the dead rank"
echo "PASS"
