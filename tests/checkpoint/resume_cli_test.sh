#!/usr/bin/env bash
# Which checkpoint a run continues, through `distllm train` and `distllm launch`:
# a rerun without --resume does not start over a folder's checkpoints (nor does a
# launcher restart turn that refusal into a resume); another run's checkpoints
# (seed, learning rate, data) are refused naming the setting unless
# --resume-other-run; `latest` is honoured, else the newest checkpoint of this run,
# and the log says which; --resume auto over nothing but corrupt checkpoints is
# refused unless --start-over; retention never removes checkpoints of a run that did
# not resume from them.
#   resume_cli_test.sh DISTLLM
set -euo pipefail
D="$(realpath "$1")"; shift
T="$(mktemp -d)"
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

head -c 40000 /usr/share/games/fortunes/fortunes > "$T/corpus.txt"
tac /usr/share/games/fortunes/fortunes > "$T/other.txt"  # other data, as long
[ -s "$T/corpus.txt" ] || fail "no corpus: install Debian's fortunes"
# A constant schedule: --steps may grow between the legs of a run (not so a cosine one's).
M0=(--family gpt2 --n-layer 1 --n-head 2 --n-embd 32 --vocab-size 256 --seq 16 --batch 2 --progress off
    --checkpoint-async false)
M=("${M0[@]}" --schedule constant)
A=(--text "$T/corpus.txt" --seed 5 "${M[@]}")  # run A
B=(--text "$T/corpus.txt" --seed 6 "${M[@]}")  # run B: another seed

# train NAME ARGS...: runs `distllm train`, output in $T/NAME.out; sets rc.
train() {
  local name="$1"; shift
  set +e
  "$D" train "$@" > "$T/$name.out" 2>&1
  rc=$?
  set -e
}
succeeded() { [ "$rc" = 0 ] || { cat "$T/$1.out"; fail "$1 failed (exit $rc)"; }; }
# refused NAME PATTERN...: the run exited non-zero, said every PATTERN, and never trained.
refused() {
  local name="$1"; shift
  [ "$rc" != 0 ] || { cat "$T/$name.out"; fail "$name was accepted"; }
  for p in "$@"; do grep -q -- "$p" "$T/$name.out" || { cat "$T/$name.out"; fail "$name: expected '$p'"; }; done
  ! grep -q "^step " "$T/$name.out" || fail "$name trained before refusing"
}
said() { grep -qF -- "$2" "$T/$1.out" || { cat "$T/$1.out"; fail "$1: expected '$2'"; }; }
# Every file of a folder with its checksum: what "untouched" compares.
snapshot() { (cd "$1" && find . -type f -print0 | sort -z | xargs -0 sha1sum); }
steps_in() { (cd "$1" && ls -d step_* | tr '\n' ' '); }
losses_from() { grep -E "^step +[0-9]+/" "$1" | awk -v from="$2" '{split($2, a, "/"); if (a[1] + 0 > from) print a[1], $5}'; }
flip_byte() {
  python3 - "$1" <<'PY'
import sys
p = sys.argv[1]
b = bytearray(open(p, "rb").read())
b[len(b) // 2] ^= 0x40
open(p, "wb").write(bytes(b))
PY
}
run_id() { python3 -c 'import json, sys; print(json.load(open(sys.argv[1])).get("run_id", ""))' "$1/manifest.json"; }

echo "== run A: 6 steps, uninterrupted (the reference), then 4 steps into ck"
train ref "${A[@]}" --steps 6
succeeded ref
train a "${A[@]}" --steps 4 --checkpoint-every 2 --checkpoint-dir "$T/ck"
succeeded a
[ "$(steps_in "$T/ck")" = "step_00000002 step_00000004 " ] || fail "expected steps 2 and 4: $(steps_in "$T/ck")"
[ -n "$(run_id "$T/ck/step_00000002")" ] || fail "the manifest records no run_id"
[ "$(run_id "$T/ck/step_00000002")" = "$(run_id "$T/ck/step_00000004")" ] || fail "one run, two run ids"
before="$(snapshot "$T/ck")"

echo "== the same command again, without --resume: refused, naming the newest checkpoint and the ways forward"
train again "${A[@]}" --steps 4 --checkpoint-every 2 --checkpoint-dir "$T/ck"
refused again "$T/ck already holds checkpoints (the newest: $T/ck/step_00000004)" "pass --resume auto" \
  "use a new or empty --checkpoint-dir" "pass --start-over"
[ "$(snapshot "$T/ck")" = "$before" ] || fail "the refused run changed the checkpoints"

echo "== ... and under distllm launch, whose restart must not turn the refusal into a resume"
set +e
"$D" launch -n 1 --max-restarts 1 --hang-timeout 60 --log-dir "$T/logs" -- "$D" train "${A[@]}" --steps 6 \
  --checkpoint-every 2 --checkpoint-dir "$T/ck" > "$T/launch.out" 2>&1
rc=$?
set -e
[ "$rc" != 0 ] || { cat "$T/launch.out"; fail "launch accepted a rerun over the checkpoints"; }
for attempt in 0 1; do
  grep -q "already holds checkpoints" "$T/logs/attempt_$attempt/rank_0.log" \
    || { cat "$T/launch.out"; fail "attempt $attempt was not refused the same way"; }
done
! grep -q "resumed from" "$T/launch.out" "$T"/logs/attempt_*/rank_0.log || fail "a launcher restart resumed the checkpoints"
[ "$(snapshot "$T/ck")" = "$before" ] || fail "the launched reruns changed the checkpoints"

echo "== another run's checkpoints: refused under --resume auto, naming the first setting that differs"
train seed "${B[@]}" --steps 6 --checkpoint-every 2 --checkpoint-dir "$T/ck" --resume auto
refused seed "no checkpoint in $T/ck can be continued by this run" \
  "$T/ck/step_00000004: written by another run: --seed is 5 in the checkpoint but 6 here" \
  "$T/ck/step_00000002: written by another run: --seed is 5" "Nothing was trained" "--start-over" "--resume-other-run"
train lr "${A[@]}" --steps 6 --lr 1e-3 --checkpoint-every 2 --checkpoint-dir "$T/ck" --resume auto
refused lr "written by another run: --lr is 0.0006 in the checkpoint but 0.001 here"
train data --text "$T/other.txt" --seed 5 "${M[@]}" --steps 6 --checkpoint-every 2 --checkpoint-dir "$T/ck" --resume auto
refused data "written by another run: training data is"
train cosine4 --text "$T/corpus.txt" --seed 5 "${M0[@]}" --steps 4 --checkpoint-dir "$T/ck_cosine"
succeeded cosine4
train cosine8 --text "$T/corpus.txt" --seed 5 "${M0[@]}" --steps 8 --checkpoint-dir "$T/ck_cosine" --resume auto
refused cosine8 "written by another run: --steps (the length of the cosine schedule) is 4 in the checkpoint but 8 here"
train named "${B[@]}" --steps 6 --checkpoint-every 2 --checkpoint-dir "$T/ck" --resume "$T/ck/step_00000002"
refused named "cannot resume from $T/ck/step_00000002: written by another run: --seed is 5 in the checkpoint but 6 here" \
  "pass --resume-other-run"
[ "$(snapshot "$T/ck")" = "$before" ] || fail "a refused run changed the checkpoints"

echo "== --resume-other-run continues it, and says so"
cp -a "$T/ck" "$T/ck_other"
train other "${B[@]}" --steps 6 --checkpoint-every 2 --checkpoint-dir "$T/ck_other" --resume auto --resume-other-run
succeeded other
said other "resumed from $T/ck_other at step 4 (named by \`latest\`; a checkpoint of another run (--seed is 5 in the checkpoint but 6 here), continued with this run's settings as --resume-other-run asks)"
[ "$(run_id "$T/ck_other/step_00000006")" = "$(run_id "$T/ck/step_00000004")" ] \
  || fail "the run that continued run A's checkpoint did not keep its run id"

echo "== --resume auto honours \`latest\` (a rollback), bit-exact"
cp -a "$T/ck" "$T/ck_latest"
echo "step_00000002" > "$T/ck_latest/latest"
train latest "${A[@]}" --steps 4 --checkpoint-every 2 --checkpoint-dir "$T/ck_latest" --resume auto
succeeded latest
said latest "resumed from $T/ck_latest at step 2 (named by \`latest\`)"
[ "$(losses_from "$T/latest.out" 2)" = "$(losses_from "$T/ref.out" 2 | head -2)" ] || fail "resumed losses differ"

echo "== ... falls back to the newest checkpoint of this run when \`latest\` names a bad one, and says which"
cp -a "$T/ck" "$T/ck_bad"
echo "step_00000002" > "$T/ck_bad/latest"
flip_byte "$T/ck_bad/step_00000002/rank_00000-of-00001.safetensors"
train bad "${A[@]}" --steps 6 --checkpoint-every 2 --checkpoint-dir "$T/ck_bad" --resume auto
succeeded bad
said bad "warning: skipping checkpoint $T/ck_bad/step_00000002: "
said bad "checksum mismatch"
said bad "resumed from $T/ck_bad at step 4 (the newest checkpoint this run can continue; \`latest\` names step_00000002, which was skipped (see above))"
[ "$(losses_from "$T/bad.out" 4)" = "$(losses_from "$T/ref.out" 4)" ] || fail "resumed losses differ"

echo "== a folder shared by two runs: each resumes its own; --start-over keeps the other's from retention"
cp -a "$T/ck" "$T/ck_two"
train b_over "${B[@]}" --steps 3 --checkpoint-every 3 --keep-last 1 --checkpoint-dir "$T/ck_two" --start-over
succeeded b_over
said b_over "warning: starting at step 0 in $T/ck_two, which holds checkpoints (the newest: $T/ck_two/step_00000004), as --start-over asks"
[ "$(steps_in "$T/ck_two")" = "step_00000002 step_00000003 step_00000004 " ] \
  || fail "retention of run B removed run A's checkpoints: $(steps_in "$T/ck_two")"
[ "$(cat "$T/ck_two/latest")" = "step_00000003" ] || fail "latest is not run B's step 3"
train b_back "${B[@]}" --steps 3 --checkpoint-every 3 --checkpoint-dir "$T/ck_two" --resume auto
succeeded b_back
said b_back "resumed from $T/ck_two at step 3 (named by \`latest\`)"
train a_back "${A[@]}" --steps 6 --checkpoint-every 2 --checkpoint-dir "$T/ck_two" --resume auto
succeeded a_back
said a_back "resumed from $T/ck_two at step 4 (the newest checkpoint this run can continue; \`latest\` names step_00000003, which was skipped (see above))"
[ "$(losses_from "$T/a_back.out" 4)" = "$(losses_from "$T/ref.out" 4)" ] || fail "run A's resumed losses differ"

echo "== --resume auto over nothing but corrupt checkpoints: refused, naming each and why"
cp -a "$T/ck" "$T/ck_corrupt"
for s in 2 4; do flip_byte "$T/ck_corrupt/step_0000000$s/rank_00000-of-00001.safetensors"; done
corrupt="$(snapshot "$T/ck_corrupt")"
train corrupt "${A[@]}" --steps 6 --keep-last 1 --checkpoint-every 2 --checkpoint-dir "$T/ck_corrupt" --resume auto
refused corrupt "no checkpoint in $T/ck_corrupt can be continued by this run" \
  "$T/ck_corrupt/step_00000004: .*checksum mismatch" "$T/ck_corrupt/step_00000002: .*checksum mismatch" \
  "Nothing was trained" "pass --start-over"
[ "$(snapshot "$T/ck_corrupt")" = "$corrupt" ] || fail "the refused run changed the checkpoints"

echo "== ... unless --start-over: step 0, and retention keeps the checkpoints this run did not resume from"
train over "${A[@]}" --steps 6 --checkpoint-every 3 --keep-last 1 --checkpoint-dir "$T/ck_corrupt" --resume auto \
  --start-over
succeeded over
said over "starting at step 0 as --start-over asks"
grep -Eq "^step +1/6" "$T/over.out" || fail "did not start at step 1"
[ "$(steps_in "$T/ck_corrupt")" = "step_00000002 step_00000004 step_00000006 " ] \
  || fail "expected the old steps 2 and 4 kept and this run's step 3 removed: $(steps_in "$T/ck_corrupt")"

echo "== --resume auto in a folder without checkpoints starts at step 0 and says so"
train empty "${A[@]}" --steps 2 --checkpoint-every 2 --checkpoint-dir "$T/ck_new" --resume auto
succeeded empty
said empty "resume auto: $T/ck_new holds no checkpoint yet; starting at step 0"
echo PASS
