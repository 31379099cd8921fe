#!/usr/bin/env bash
# Ring attention (context parallelism): peak memory per rank and tokens/s of one
# training step against the sequence length, without and with --mesh cp=2 on the
# same 2 cores, and the longest sequence that fits a per-rank budget for each.
#   bench/train_context_parallel.sh [BUDGET_MIB=1400] [SEQS="1024 2048 4096 8192"]
# llama-tiny (RoPE, so any --max-seq), batch 1, 1 timed step after 1 warm-up.
set -euo pipefail
D="${DISTLLM:-$(dirname "$0")/../build/release/bin/distllm}"
BUDGET="${1:-1400}"
SEQS="${2:-1024 2048 4096 8192}"
MPIRUN=(mpirun --oversubscribe --allow-run-as-root --bind-to none)
exec 9>/tmp/bench.lock
flock 9
row() {  # layout seq -> "tokens/s peak_mib"
  local layout=$1 seq=$2
  local args=(bench train --json --preset llama-tiny --max-seq "$seq" --batch 1 --seq "$seq" --steps 1
              --warmup-steps 1 --peak-size 256)
  local out
  if [ "$layout" = cp2 ]; then
    out=$("${MPIRUN[@]}" -n 2 "$D" "${args[@]}" --threads 1 --mesh cp=2)
  else
    out=$("$D" "${args[@]}" --threads 2)
  fi
  echo "$out" | /usr/bin/python3 -c 'import json,sys
j = json.loads([l for l in sys.stdin if l.startswith("{")][-1])
print("%.0f %.1f %.1f" % (j["tokens_per_s"], max(r["peak_mem_mib"] for r in j["per_rank"]),
                         max(r["activation_mib"] for r in j["per_rank"])))'
}
printf "%-6s %-8s %10s %14s %16s\n" seq layout tokens/s "peak MiB/rank" "activation MiB"
declare -A longest=([one]=0 [cp2]=0)
for seq in $SEQS; do
  for layout in one cp2; do
    read -r tok peak act <<< "$(row $layout "$seq")"
    printf "%-6s %-8s %10s %14s %16s\n" "$seq" "$layout" "$tok" "$peak" "$act"
    if /usr/bin/python3 -c "import sys; sys.exit(0 if $peak <= $BUDGET else 1)"; then longest[$layout]=$seq; fi
  done
done
echo "longest sequence within ${BUDGET} MiB per rank: one process ${longest[one]}, cp=2 ${longest[cp2]}"
