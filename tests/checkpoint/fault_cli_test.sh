#!/usr/bin/env bash
# Checkpoints under faults, through `distllm train` and `distllm convert`:
# a disk that fills up during a save, no room left for `latest`, kill -9 during a
# save, a flipped byte, a truncated manifest, and conversion to and from Hugging
# Face model directories.
#   fault_cli_test.sh DISTLLM
set -euo pipefail
D="$(realpath "$1")"
T="$(mktemp -d)"
cleanup() { umount "$T/small" 2>/dev/null || true; rm -rf "$T"; }
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

head -c 40000 /usr/share/games/fortunes/fortunes > "$T/corpus.txt"
[ -s "$T/corpus.txt" ] || fail "no corpus: install Debian's fortunes"
M=(--text "$T/corpus.txt" --family gpt2 --n-layer 1 --n-head 2 --n-embd 32 --vocab-size 256 --seq 16 --batch 2
   --seed 5 --progress off --checkpoint-async false)
final_loss() { grep -E "^step +[0-9]+/" "$1" | tail -1 | sed -E 's/.*loss ([0-9.]+).*/\1/'; }
losses_from() { grep -E "^step +[0-9]+/" "$1" | awk -v from="$2" '{split($2, a, "/"); if (a[1] + 0 > from) print $2, $5}'; }

echo "== reference: 8 uninterrupted steps"
"$D" train "${M[@]}" --steps 8 > "$T/ref.out" 2>&1 || { cat "$T/ref.out"; fail "reference run failed"; }

echo "== kill -9 during the save of step 6: the rerun resumes from step 4, bit-exact"
set +e
DISTLLM_TEST_KILL_DURING_SAVE=6 "$D" train "${M[@]}" --steps 8 --checkpoint-dir "$T/ck" --checkpoint-every 2 \
  > "$T/killed.out" 2>&1
rc=$?
set -e
[ $rc -ne 0 ] || fail "the killed run exited 0"
[ "$(cat "$T/ck/latest")" = "step_00000004" ] || fail "latest is $(cat "$T/ck/latest"), not step 4"
ls -a "$T/ck" | grep -q "^.partial-step_00000006$" || fail "no partial directory left by the kill (test hook broken?)"
"$D" train "${M[@]}" --steps 8 --checkpoint-dir "$T/ck" --checkpoint-every 2 --resume auto > "$T/resumed.out" 2>&1 \
  || { cat "$T/resumed.out"; fail "resume failed"; }
grep -q "resumed from $T/ck at step 4" "$T/resumed.out" || fail "did not resume from step 4"
[ "$(losses_from "$T/resumed.out" 4)" = "$(losses_from "$T/ref.out" 4)" ] || fail "resumed losses differ"
! ls -a "$T/ck" | grep -q "^.partial-" || fail "the partial directory was not cleaned up"

echo "== a flipped byte: caught by the checksum; auto falls back, an explicit path is refused"
f="$T/ck/step_00000008/rank_00000-of-00001.safetensors"
python3 - "$f" <<'PY'
import sys
p = sys.argv[1]
b = bytearray(open(p, "rb").read())
b[len(b) // 2] ^= 0x40
open(p, "wb").write(bytes(b))
PY
! "$D" train "${M[@]}" --steps 9 --checkpoint-dir "$T/ck2" --resume "$T/ck/step_00000008" > "$T/flip2.out" 2>&1 \
  || fail "an explicitly named damaged checkpoint was accepted"
grep -q "step_00000008/rank_00000-of-00001.safetensors" "$T/flip2.out" || { cat "$T/flip2.out"; fail "file not named"; }
"$D" train "${M[@]}" --steps 8 --checkpoint-dir "$T/ck" --resume auto > "$T/flip.out" 2>&1 \
  || { cat "$T/flip.out"; fail "auto resume with a damaged newest checkpoint failed"; }
grep -q "rank_00000-of-00001.safetensors.*checksum" "$T/flip.out" || { cat "$T/flip.out"; fail "no checksum report"; }
grep -q "resumed from $T/ck at step 6" "$T/flip.out" || fail "did not fall back to step 6"

echo "== a truncated manifest is refused"
m="$T/ck/step_00000006/manifest.json"
head -c 100 "$m" > "$m.cut" && mv "$m.cut" "$m"
! "$D" train "${M[@]}" --steps 9 --checkpoint-dir "$T/ck3" --resume "$T/ck/step_00000006" > "$T/trunc.out" 2>&1 \
  || fail "a truncated manifest was accepted"
grep -q "manifest.json" "$T/trunc.out" || { cat "$T/trunc.out"; fail "manifest not named"; }

echo "== disk full during a save (tmpfs): reported, latest kept, training goes on; a failed final save fails the run"
mkdir -p "$T/small"
ns=(unshare --mount --propagation private)
[ "$(id -u)" = 0 ] || ns=(unshare --user --map-root-user --mount --propagation private)
# Each checkpoint of this model is about 650 kB: two fit in 1600 kB, a third does not.
set +e
"${ns[@]}" bash -c "
  mount -t tmpfs -o size=1600k tmpfs '$T/small' || exit 90
  '$D' train ${M[*]} --steps 8 --checkpoint-dir '$T/small/ck' --checkpoint-every 2 --keep-last 5 > '$T/full.out' 2>&1
  echo \$? > '$T/full.rc'
  cat '$T/small/ck/latest' > '$T/full.latest'
  exit 0"
ns_rc=$?
set -e
[ $ns_rc -eq 0 ] || fail "mount namespace step failed ($ns_rc; 90: no tmpfs)"
grep -q "checkpoint FAILED at step 6 (training goes on; the previous checkpoint is kept)" "$T/full.out" \
  || { cat "$T/full.out"; fail "the failed save was not reported"; }
grep -q "No space left on device" "$T/full.out" || fail "the cause was not named"
grep -Eq "^step +8/8" "$T/full.out" || fail "training did not go on to step 8"
[ "$(cat "$T/full.latest")" = "step_00000004" ] || fail "latest is $(cat "$T/full.latest"), not the last complete step 4"
[ "$(cat "$T/full.rc")" != 0 ] || fail "a run whose final checkpoint failed exited 0"
grep -q "the final checkpoint could not be written; the newest complete one is step 4" "$T/full.out" || fail "no final error"

echo "== no room for \`latest\` (tmpfs out of inodes): the checkpoint is reported saved, and resume auto takes it"
# Measure the inodes of one checkpoint and of the folder with it, then allow exactly
# one checkpoint more: step 4 is written whole, and only the temporary file that
# would replace \`latest\` finds no room.
MC=("${M[@]}" --schedule constant)  # --steps may grow when it resumes
"$D" train "${MC[@]}" --steps 6 > "$T/ref_c.out" 2>&1 || { cat "$T/ref_c.out"; fail "constant reference failed"; }
set +e
"${ns[@]}" bash -c "
  mount -t tmpfs -o size=8m tmpfs '$T/small' || exit 90
  '$D' train ${MC[*]} --steps 2 --checkpoint-dir '$T/small/ck' > /dev/null 2>&1 || exit 91
  used=\$(df --output=iused '$T/small' | tail -1)
  per=\$(find '$T/small/ck/step_00000002' | wc -l)
  umount '$T/small'
  mount -t tmpfs -o size=8m,nr_inodes=\$((used + per)) tmpfs '$T/small' || exit 92
  '$D' train ${MC[*]} --steps 4 --checkpoint-dir '$T/small/ck' --checkpoint-every 2 > '$T/inodes.out' 2>&1
  echo \$? > '$T/inodes.rc'
  cp -a '$T/small/ck' '$T/ck_inodes'
  exit 0"
ns_rc=$?
set -e
[ $ns_rc -eq 0 ] || fail "mount namespace step failed ($ns_rc; 90/92: no tmpfs, 91: the measuring run failed)"
grep -q "checkpoint saved: $T/small/ck/step_00000004 .*; only the \`latest\` pointer could not be updated (.*No space left on device): it was removed, so --resume auto takes the newest checkpoint of this run, this one" \
  "$T/inodes.out" || { cat "$T/inodes.out"; fail "the save of step 4 was not reported as saved with \`latest\` not updated"; }
! grep -q "FAILED\|not saved\|could not be written" "$T/inodes.out" || { cat "$T/inodes.out"; fail "a saved checkpoint was reported as not saved"; }
[ "$(cat "$T/inodes.rc")" = 0 ] || { cat "$T/inodes.out"; fail "the run whose final checkpoint was saved exited $(cat "$T/inodes.rc")"; }
[ ! -e "$T/ck_inodes/latest" ] || fail "\`latest\` was left naming $(cat "$T/ck_inodes/latest")"
"$D" train "${MC[@]}" --steps 6 --checkpoint-dir "$T/ck_inodes" --resume auto > "$T/inodes_resumed.out" 2>&1 \
  || { cat "$T/inodes_resumed.out"; fail "resume failed"; }
grep -q "resumed from $T/ck_inodes at step 4 (the newest checkpoint this run can continue; there is no \`latest\`)" \
  "$T/inodes_resumed.out" || { cat "$T/inodes_resumed.out"; fail "resume auto did not take step 4"; }
[ "$(losses_from "$T/inodes_resumed.out" 4)" = "$(losses_from "$T/ref_c.out" 4)" ] || fail "resumed losses differ"
[ "$(cat "$T/ck_inodes/latest")" = "step_00000006" ] || fail "the next save did not write \`latest\` again"

echo "== convert: checkpoint -> HF equals --out; HF -> checkpoint resumes"
"$D" train "${M[@]}" --steps 4 --checkpoint-dir "$T/ck4" --out "$T/out4" > "$T/c.out" 2>&1 || { cat "$T/c.out"; fail "train failed"; }
"$D" convert --checkpoint "$T/ck4" --to-hf "$T/hf4" > "$T/conv.out" 2>&1 || { cat "$T/conv.out"; fail "convert failed"; }
grep -q "step_00000004 -> $T/hf4" "$T/conv.out" || fail "convert did not name the step"
python3 - "$T/out4/model.safetensors" "$T/hf4/model.safetensors" <<'PY' || fail "converted weights differ from --out"
import json, struct, sys
def tensors(p):
    b = open(p, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    h.pop("__metadata__", None)
    return {k: b[8 + n + v["data_offsets"][0]: 8 + n + v["data_offsets"][1]] for k, v in h.items()}
a, b = tensors(sys.argv[1]), tensors(sys.argv[2])
sys.exit(0 if a == b and len(a) > 0 else 1)
PY
"$D" generate --model "$T/hf4" --prompt "a" --max-tokens 2 > /dev/null 2>&1 || fail "the converted model does not load"
"$D" convert --hf "$T/hf4" --to-checkpoint "$T/ck5" > /dev/null || fail "HF -> checkpoint failed"
"$D" train "${M[@]}" --steps 2 --checkpoint-dir "$T/ck5" --resume auto > "$T/r5.out" 2>&1 || { cat "$T/r5.out"; fail "resume of a converted checkpoint failed"; }
grep -q "resumed from $T/ck5 at step 0" "$T/r5.out" || fail "did not resume the converted checkpoint"
"$D" train "${M[@]}" --steps 2 --init-from "$T/hf4" > "$T/i5.out" 2>&1 || { cat "$T/i5.out"; fail "init-from failed"; }
[ "$(final_loss "$T/r5.out")" = "$(final_loss "$T/i5.out")" ] || fail "converted checkpoint and --init-from differ"
! "$D" convert --hf "$T/hf4" --to-checkpoint "$T/ck5" > "$T/again.out" 2>&1 || fail "converting into a used directory"
grep -q "already holds checkpoints" "$T/again.out" || fail "no clear refusal"
echo PASS
