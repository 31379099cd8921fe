#!/usr/bin/env bash
# Two real "hosts" on one machine: network namespaces h1 and h2 joined by a veth
# pair (shared/SCALEOUT.md), Open MPI over TCP between them, two ranks per host.
# HSDP (shard inside a host over shared memory, replicate across hosts over MPI)
# and ZeRO-3 over the hierarchical backend train to the single-process losses on 4x
# the batch. The hosts come from tests/support/fake_hosts.sh.
#   two_hosts_netns_test.sh DISTLLM MPIRUN
set -euo pipefail
D="$(realpath "$1")"
MPIRUN="$2"
fail() { echo "FAIL: $*" >&2; exit 1; }

source "$(dirname "$0")/../support/fake_hosts.sh"
T="$(mktemp -d /var/tmp/distllm-hosts.XXXXXX)"
cleanup() {
  fake_hosts_down
  rm -rf "$T"
}
trap cleanup EXIT
fake_hosts_up

# mpirun starts its remote daemon through this "ssh": run it in that host's
# namespace with that host's name (Open MPI tells nodes apart by hostname).
cat > "$T/agent" <<AGENT
#!/bin/sh
host="\$1"; shift
exec ip netns exec "\$host" unshare --uts sh -c "hostname \$host; \$*"
AGENT
chmod +x "$T/agent"
printf '%s slots=2\n%s slots=2\n' "$H1" "$H2" > "$T/hostfile"

head -c 60000 /usr/share/games/fortunes/fortunes > "$T/corpus.txt"
[ -s "$T/corpus.txt" ] || fail "no corpus: install Debian's fortunes"
M=(--text "$T/corpus.txt" --family gpt2 --n-layer 2 --n-head 2 --n-embd 36 --vocab-size 256 --seq 16 --seed 11
   --progress off --steps 8 --threads 1)
run_hosts() {  # run_hosts OUT ARGS...: 4 ranks, 2 per host, mpirun started inside h1
  local out="$1"; shift
  ip netns exec "$H1" unshare --uts sh -c "hostname $H1; exec \"\$0\" \"\$@\"" \
    "$MPIRUN" --allow-run-as-root --oversubscribe --bind-to none -n 4 --hostfile "$T/hostfile" \
    --mca plm_rsh_agent "$T/agent" --mca btl tcp,self,vader \
    --mca btl_tcp_if_include "$NET.0/24" --mca oob_tcp_if_include "$NET.0/24" \
    -x OMP_NUM_THREADS=1 -x DISTLLM_COMM_TIMEOUT=120 \
    "$D" train "${M[@]}" --batch 1 "$@" --metrics-file "$out.jsonl" > "$out" 2>&1 || { cat "$out"; fail "run failed: $*"; }
}

echo "== single process, batch 4 (the reference)"
"$D" train "${M[@]}" --batch 4 --metrics-file "$T/ref.jsonl" > "$T/ref.out" 2>&1 || { cat "$T/ref.out"; fail "reference failed"; }

compare() {  # compare NAME: every step's loss within 1e-5 relative of the reference
  python3 - "$T/ref.jsonl" "$T/$1.jsonl" <<'PY' || fail "$1: losses differ from the single process"
import json, sys
def losses(p):
    return [json.loads(l)["loss"] for l in open(p) if '"type":"step"' in l]
a, b = losses(sys.argv[1]), losses(sys.argv[2])
worst = max(abs(x - y) / abs(x) for x, y in zip(a, b)) if a and len(a) == len(b) else 1.0
print(f"  {len(b)} steps, worst relative loss difference {worst:.2e}")
sys.exit(0 if len(a) == 8 and worst <= 1e-5 else 1)
PY
}

echo "== HSDP across 2 hosts x 2 ranks (shard in a host, replicate across)"
run_hosts "$T/hsdp" --strategy hsdp
grep -m1 "2 hosts" "$T/hsdp" || { head -5 "$T/hsdp"; fail "the run did not see two hosts"; }
compare hsdp

echo "== ZeRO-3 across the hosts (hierarchical backend)"
run_hosts "$T/zero3" --strategy zero3
compare zero3
echo PASS
