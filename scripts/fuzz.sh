#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, ASan + UBSan) and runs each for a bounded time
# starting from its committed seeds in fuzz/corpus/<target>/.
#   bash scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]
# New inputs found during the run go to a scratch folder, not the repository; a crash
# leaves its input in build/fuzz/crashes/ and fails the script.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-30}
shift || true
cmake --preset fuzz >/dev/null
cmake --build --preset fuzz
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  for f in build/fuzz/bin/fuzz_*; do [ -x "$f" ] && targets+=("$(basename "$f")"); done
fi
mkdir -p build/fuzz/crashes
status=0
for t in "${targets[@]}"; do
  scratch=$(mktemp -d)
  seeds=fuzz/corpus/$t
  mkdir -p "$seeds"
  echo "fuzz: $t for ${seconds}s"
  if ! build/fuzz/bin/"$t" "$scratch" "$seeds" -max_total_time="$seconds" -rss_limit_mb=2048 \
       -timeout=10 -print_final_stats=1 -artifact_prefix=build/fuzz/crashes/"$t"- \
       >build/fuzz/"$t".log 2>&1; then
    echo "fuzz: $t FAILED; see build/fuzz/$t.log"
    tail -40 build/fuzz/"$t".log
    status=1
  else
    grep -E 'stat::number_of_executed_units|Done' build/fuzz/"$t".log | head -2 || true
  fi
  rm -rf "$scratch"
done
exit $status
