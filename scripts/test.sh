#!/usr/bin/env bash
# Builds (release) and runs the whole test suite: unit, multi-rank, parity with
# PyTorch, end-to-end, and each fuzz target for a bounded time.
#   bash scripts/test.sh           # everything
#   NO_FUZZ=1 bash scripts/test.sh # skip the fuzzers
set -euo pipefail
cd "$(dirname "$0")/.."
cmake --build --preset release
ctest --preset release -j "$(nproc)"
if [ "${NO_FUZZ:-0}" != 1 ] && [ -d fuzz ]; then
  bash scripts/fuzz.sh "${FUZZ_SECONDS:-30}"
fi
