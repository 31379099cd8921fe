#!/usr/bin/env bash
# `distllm serve` end to end on a tiny random GPT-2 with GPT-2's real tokenizer:
# curl checks and the official openai npm client, as for the test server; then the
# curl checks again on a bf16 Llama checkpoint served as bf16.
#   serve_cli_e2e.sh DISTLLM_BINARY MAKE_TINY_MODEL_BINARY
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
distllm=$1 make_model=$2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
set +e
"$make_model" "$tmp/tiny-gpt2" > /dev/null
rc=$?
set -e
[ $rc -eq 77 ] && exit 77
[ $rc -eq 0 ] || exit $rc
with=(bash "$here/with_test_server.sh" "$distllm" serve --model "$tmp/tiny-gpt2" --port 0 --threads 2
      --served-model-name test-model --api-key test-key --kv-cache-memory 0.05 --)
"${with[@]}" bash "$here/curl_test.sh"
if [ -d node_modules/openai ]; then
  "${with[@]}" node "$here/openai_client_test.mjs"
fi
# A bf16 checkpoint (as published models are) served as bf16: read from the mapped
# files without an f32 copy (model/model_weights.h); the same API checks pass.
"$make_model" "$tmp/tiny-llama-bf16" --family llama --dtype bf16 > /dev/null
bash "$here/with_test_server.sh" "$distllm" serve --model "$tmp/tiny-llama-bf16" --dtype bf16 --port 0 --threads 2 \
  --served-model-name test-model --api-key test-key --kv-cache-memory 0.05 -- bash "$here/curl_test.sh"
