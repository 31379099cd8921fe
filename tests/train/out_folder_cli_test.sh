#!/usr/bin/env bash
# `distllm train --out` never destroys data and fails before training, not after:
# a data folder or "." is refused (kept intact), --overwrite replaces only model
# files, a full or read-only filesystem is found at start, --clip -1 is refused, and
# a kill -9 at start-up leaves no probe file beside --out.
#   out_folder_cli_test.sh DISTLLM
set -euo pipefail
D="$(realpath "$1")"
T="$(mktemp -d)"
cleanup() { umount "$T/small" 2>/dev/null || true; rm -rf "$T"; }
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

mkdir -p "$T/data"
head -c 30000 /usr/share/games/fortunes/fortunes > "$T/data/corpus.txt"
[ -s "$T/data/corpus.txt" ] || fail "no corpus: install Debian's fortunes"
M=(--family gpt2 --n-layer 1 --n-head 2 --n-embd 32 --vocab-size 256 --seq 16 --batch 2 --progress off)
refused() {  # refused PATTERN LOG: the run failed, said PATTERN, and never trained
  grep -q "$1" "$2" || { cat "$2"; fail "expected '$1'"; }
  ! grep -q "^step " "$2" || fail "trained before refusing: $2"
}

echo "== --out naming the data folder is refused before training; nothing is deleted"
sum_before=$(sha1sum "$T/data/corpus.txt")
if "$D" train --text "$T/data/corpus.txt" "${M[@]}" --steps 2 --out "$T/data" > "$T/a.out" 2>&1; then
  fail "--out over the data folder was accepted"
fi
refused "is not a model directory written by distllm (it holds 'corpus.txt')" "$T/a.out"
[ "$(sha1sum "$T/data/corpus.txt")" = "$sum_before" ] || fail "the data changed"
(cd "$T/data" && ! "$D" train --text corpus.txt "${M[@]}" --steps 2 --out . > "$T/b.out" 2>&1) || fail "--out . accepted"
refused "pass --overwrite" "$T/b.out"
[ "$(ls "$T/data")" = "corpus.txt" ] || fail "the folder gained or lost files: $(ls "$T/data")"

echo "== --overwrite replaces only model files"
(cd "$T/data" && "$D" train --text corpus.txt "${M[@]}" --steps 2 --out . --overwrite > "$T/c.out" 2>&1) \
  || { cat "$T/c.out"; fail "--overwrite run failed"; }
[ "$(sha1sum "$T/data/corpus.txt")" = "$sum_before" ] || fail "--overwrite changed the data"
[ -f "$T/data/model.safetensors" ] && [ -f "$T/data/.distllm-model" ] || fail "no model written"
"$D" generate --model "$T/data" --prompt "a" --max-tokens 2 > /dev/null 2>&1 || fail "the saved model does not load"
# Now a model directory: saved again without --overwrite, the corpus still stays.
(cd "$T/data" && "$D" train --text corpus.txt "${M[@]}" --steps 1 --out . > "$T/d.out" 2>&1) \
  || { cat "$T/d.out"; fail "re-save failed"; }
[ "$(sha1sum "$T/data/corpus.txt")" = "$sum_before" ] || fail "re-save changed the data"

echo "== --clip -1 is refused"
! "$D" train --text "$T/data/corpus.txt" "${M[@]}" --steps 1 --clip -1 > "$T/e.out" 2>&1 || fail "--clip -1 accepted"
refused "must be >= 0" "$T/e.out"

echo "== a kill -9 at start-up, while the output folder is probed, leaves nothing beside --out"
command -v strace > /dev/null || fail "needs strace (Debian package strace) to kill the run at its probe"
mkdir -p "$T/kill"
# Probe files of processes that are gone (an older build's, killed) are removed by
# the next run; one of a live process is not. No pid is above 4194304 (PID_MAX_LIMIT).
touch "$T/kill/m.probe-4194305" "$T/kill/m.probe-$$"
set +e
# The probe is the first file the run fsyncs: SIGKILL it there.
strace -f -qq -o "$T/kill.strace" -e trace=openat,fsync -e inject=fsync:signal=KILL:when=1 \
  "$D" train --text "$T/data/corpus.txt" "${M[@]}" --steps 2 --out "$T/kill/m" > "$T/kill.out" 2>&1
rc=$?
set -e
[ $rc -eq 137 ] || { cat "$T/kill.out"; fail "the run was not killed at its first fsync (exit $rc)"; }
grep -q "$T/kill.*O_TMPFILE\|m\.probe-" "$T/kill.strace" || { cat "$T/kill.strace"; fail "the kill did not hit the probe"; }
! grep -q "^step " "$T/kill.out" || fail "killed after training started, not at start-up"
[ "$(ls -A "$T/kill")" = "m.probe-$$" ] || fail "left beside --out: $(ls -A "$T/kill" | tr '\n' ' ')"

echo "== a full or read-only filesystem is found at start (tmpfs in a private mount namespace)"
mkdir -p "$T/small"
# Root mounts directly; others use a user namespace that maps them to root.
ns=(unshare --mount --propagation private)
[ "$(id -u)" = 0 ] || ns=(unshare --user --map-root-user --mount --propagation private)
BIG=(--family gpt2 --n-layer 2 --n-head 2 --n-embd 128 --vocab-size 256 --seq 16 --batch 2 --progress off)
"${ns[@]}" bash -c "
  mount -t tmpfs -o size=256k tmpfs '$T/small' || exit 90
  '$D' train --text '$T/data/corpus.txt' ${BIG[*]} --steps 2 --out '$T/small/model' > '$T/f.out' 2>&1 && exit 91
  mount -o remount,ro '$T/small' || exit 92
  '$D' train --text '$T/data/corpus.txt' ${M[*]} --steps 2 --out '$T/small/model' > '$T/g.out' 2>&1 && exit 93
  exit 0" || fail "mount namespace step failed with code $? (90: no tmpfs mount, 91/93: accepted)"
refused "the model needs about [0-9.]* MB but the filesystem of $T/small has 0.[0-9]* MB free" "$T/f.out"
refused "cannot write in $T/small: Read-only file system" "$T/g.out"
echo "PASS"
