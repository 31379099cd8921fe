#!/usr/bin/env bash
# A two-node Slurm cluster over two fake hosts (network namespaces, see
# tests/support/fake_hosts.sh; deploy/slurm/local-cluster.sh with NODES): the
# multi-node sbatch template runs 2 nodes x 2 ranks with HSDP (srun --mpi=pmix, shared
# memory inside a node, MPI over TCP across the veth) and every step's loss equals the
# single process on 4x the batch within 1e-5.
#   slurm_two_hosts_test.sh DISTLLM SOURCE_DIR
set -euo pipefail
SRC="$(realpath "$2")"
fail() { echo "FAIL: $*" >&2; exit 1; }

source "$SRC/tests/support/fake_hosts.sh"
T="$(mktemp -d /var/tmp/distllm-slurm2.XXXXXX)"
chmod 755 "$T"
cleanup() {
  bash "$SRC/deploy/slurm/local-cluster.sh" stop "$T/cluster" || true
  fake_hosts_down
  rm -rf "$T"
}
trap cleanup EXIT
# Each fake host's slurmd has a /tmp of its own (the PMIx plugins would collide in a
# shared one), so the job must not run a binary from /tmp (a build there, as in CI).
mkdir -p "$T/bin"
cp "$1" "$T/bin/distllm"
D="$T/bin/distllm"
fake_hosts_up
NODES="$H1=$A1 $H2=$A2" bash "$SRC/deploy/slurm/local-cluster.sh" start "$T/cluster" 2 ||
  fail "the two-node Slurm cluster did not start"
export SLURM_CONF="$T/cluster/slurm.conf"
in_h1() { timeout 20 nsenter --net="/run/netns/$H1" "$@"; }  # the cluster's addresses live there; bounded

head -c 60000 /usr/share/games/fortunes/fortunes > "$T/corpus.txt"
[ -s "$T/corpus.txt" ] || fail "no corpus: install Debian's fortunes"
STEPS=8
M=(--text "$T/corpus.txt" --family gpt2 --n-layer 2 --n-head 2 --n-embd 36 --vocab-size 256 --seq 16 --seed 11
   --progress off --steps $STEPS --threads 1)

echo "== single process, batch 4 (the reference)"
"$D" train "${M[@]}" --batch 4 --metrics-file "$T/ref.jsonl" > "$T/ref.out" 2>&1 || { cat "$T/ref.out"; fail "reference failed"; }

echo "== sbatch the multi-node template: 2 nodes x 2 ranks, HSDP"
cd "$T"
job="$(DISTLLM="$D" CKPT_DIR="$T/ckpt" in_h1 sbatch --parsable --time=10 \
       "$SRC/deploy/slurm/train-multinode.sbatch" "${M[@]}" --batch 1 --strategy hsdp \
       --metrics-file "$T/run.jsonl")" || fail "sbatch failed"
state=""
for _ in $(seq 600); do  # at most about 2-3 minutes
  state="$(in_h1 scontrol show job "$job" 2>/dev/null | tr ' ' '\n' | sed -n 's/^JobState=//p')"
  case "$state" in COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY) break ;; esac
  sleep 0.2
done
out="$T/distllm-train-mn-$job.out"
if [ "$state" != COMPLETED ]; then
  in_h1 scontrol show job "$job" || true
  for f in "$out" "$T"/logs/"$job"/run_0/attempt_0/*.log "$T"/cluster/log/*.log; do
    [ -f "$f" ] && { echo "--- $f"; tail -15 "$f"; }
  done
  fail "the job ended as '${state:-unknown}', not COMPLETED"
fi
grep -m1 "4 ranks on 2 hosts" "$out" || { cat "$out"; fail "the ranks did not see two hosts"; }

python3 - "$T/ref.jsonl" "$T/run.jsonl" "$STEPS" <<'PY' || fail "the losses differ from the single process"
import json, sys
def losses(p):
    return [json.loads(l)["loss"] for l in open(p) if '"type":"step"' in l]
a, b, n = losses(sys.argv[1]), losses(sys.argv[2]), int(sys.argv[3])
worst = max(abs(x - y) / abs(x) for x, y in zip(a, b)) if a and len(a) == len(b) else 1.0
print(f"  {len(b)} steps, worst relative loss difference {worst:.2e}")
sys.exit(0 if len(a) == n and worst <= 1e-5 else 1)
PY
echo PASS
