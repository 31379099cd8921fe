#!/usr/bin/env bash
# The main job on built-in defaults (README command 1, after setup).
set -euo pipefail
cd "$(dirname "$0")/.."
exec build/release/bin/distllm version
