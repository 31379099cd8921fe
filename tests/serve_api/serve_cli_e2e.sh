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
# The tiny models have no chat template: ChatML by name for the chat checks.
with=(bash "$here/with_test_server.sh" "$distllm" serve --model "$tmp/tiny-gpt2" --port 0 --threads 2
      --served-model-name test-model --api-key test-key --kv-cache-memory 0.05 --chat-template chatml --)
"${with[@]}" bash "$here/curl_test.sh"
if [ -d node_modules/openai ]; then
  "${with[@]}" node "$here/openai_client_test.mjs"
fi
# A bf16 checkpoint (as published models are) served as bf16: read from the mapped
# files without an f32 copy (model/model_weights.h); the same API checks pass.
"$make_model" "$tmp/tiny-llama-bf16" --family llama --dtype bf16 > /dev/null
bash "$here/with_test_server.sh" "$distllm" serve --model "$tmp/tiny-llama-bf16" --dtype bf16 --port 0 --threads 2 \
  --served-model-name test-model --api-key test-key --kv-cache-memory 0.05 --chat-template chatml -- \
  bash "$here/curl_test.sh"
# Without a template chat requests are refused (400, saying how to give one), never
# silently wrapped in a format the model never saw; completions still work.
cat > "$tmp/no_template.sh" <<'EOF2'
set -euo pipefail
body='{"model":"test-model","messages":[{"role":"user","content":"hi"}],"max_tokens":2}'
code=$(curl -s -o "$1" -w '%{http_code}' -H 'Content-Type: application/json' -d "$body" "$SERVE_URL/v1/chat/completions")
[ "$code" = 400 ] || { echo "chat without a template: HTTP $code"; cat "$1"; exit 1; }
grep -q '"code":"chat_template_missing"' "$1" && grep -q -- "--chat-template" "$1" || { cat "$1"; exit 1; }
code=$(curl -s -o /dev/null -w '%{http_code}' -H 'Content-Type: application/json' \
  -d '{"model":"test-model","prompt":"hi","max_tokens":2}' "$SERVE_URL/v1/completions")
[ "$code" = 200 ] || { echo "completion: HTTP $code"; exit 1; }
echo "no template: chat refused with 400, completions served"
EOF2
bash "$here/with_test_server.sh" "$distllm" serve --model "$tmp/tiny-gpt2" --port 0 --threads 2 \
  --served-model-name test-model --kv-cache-memory 0.05 -- bash "$tmp/no_template.sh" "$tmp/chat_refused.json"
# --reasoning-parser and --tool-call-parser reach the server: with deepseek_r1 a
# random model never closes its thinking, so all its text is reasoning_content and
# content is null; an unknown parser is refused at start, naming the choices.
cat > "$tmp/reasoning.sh" <<'EOF2'
set -euo pipefail
body='{"model":"test-model","messages":[{"role":"user","content":"hi"}],"max_tokens":4,"temperature":0,"ignore_eos":true,"chat_template_kwargs":{"enable_thinking":false}}'
curl -s -H 'Content-Type: application/json' -d "$body" "$SERVE_URL/v1/chat/completions" > "$1"
python3 -c '
import json, sys
m = json.load(open(sys.argv[1]))["choices"][0]["message"]
assert m["content"] is None and isinstance(m["reasoning_content"], str) and m["reasoning_content"], m
' "$1" || { cat "$1"; exit 1; }
echo "reasoning parser: the thinking came back as reasoning_content"
EOF2
bash "$here/with_test_server.sh" "$distllm" serve --model "$tmp/tiny-gpt2" --port 0 --threads 2 \
  --served-model-name test-model --kv-cache-memory 0.05 --chat-template chatml --reasoning-parser deepseek_r1 \
  --tool-call-parser hermes -- bash "$tmp/reasoning.sh" "$tmp/reasoning.json"
if "$distllm" serve --model "$tmp/tiny-gpt2" --port 0 --reasoning-parser bogus > "$tmp/bogus.log" 2>&1; then
  echo "--reasoning-parser bogus was accepted"; exit 1
fi
grep -q "unknown reasoning parser 'bogus' (choose none, qwen3 or deepseek_r1)" "$tmp/bogus.log" || { cat "$tmp/bogus.log"; exit 1; }
# Qwen2 (q/k/v biases, tied embeddings), Qwen3 (q/k norms, head_dim 24 over a width of
# 64), Phi-3 (fused qkv_proj and gate_up_proj), Mistral (a 16-token sliding window),
# Gemma 2 (sandwich norms, GeGLU, capped logits) and Gemma 3 (q/k norms) checkpoints in
# bf16, served in bf16 and int8: the same API checks pass.
for fam in qwen2 qwen3 phi3 mistral gemma2 gemma3_text; do
  "$make_model" "$tmp/tiny-$fam" --family $fam --dtype bf16 > /dev/null
  for dt in bf16 int8; do
    bash "$here/with_test_server.sh" "$distllm" serve --model "$tmp/tiny-$fam" --dtype $dt --port 0 --threads 2 \
      --served-model-name test-model --api-key test-key --kv-cache-memory 0.05 --chat-template chatml -- \
      bash "$here/curl_test.sh"
  done
done
# A model in the Hugging Face hub cache, named by its id as vLLM takes it: the snapshot
# refs/main names is served, under the name ORG/NAME, and a request without `model`
# gets it.
cache="$tmp/hub/models--acme--tiny-gpt2"
mkdir -p "$cache/blobs" "$cache/snapshots/c0ffee" "$cache/refs"
for f in "$tmp/tiny-gpt2"/*; do
  cp "$f" "$cache/blobs/$(basename "$f").blob"
  ln -s "../../blobs/$(basename "$f").blob" "$cache/snapshots/c0ffee/$(basename "$f")"
done
printf c0ffee > "$cache/refs/main"
cat > "$tmp/hub_id.sh" <<'EOF2'
set -euo pipefail
curl -s "$SERVE_URL/v1/models" | grep -q '"id":"acme/tiny-gpt2"' || { curl -s "$SERVE_URL/v1/models"; exit 1; }
curl -s -H 'Content-Type: application/json' -d '{"prompt":"hi","max_tokens":2}' "$SERVE_URL/v1/completions" |
  grep -q '"model":"acme/tiny-gpt2"' || { echo "a request without model was not served"; exit 1; }
echo "hub id: served as acme/tiny-gpt2, a request without model answered"
EOF2
HF_HUB_CACHE="$tmp/hub" bash "$here/with_test_server.sh" "$distllm" serve --model acme/tiny-gpt2 --port 0 --threads 2 \
  --kv-cache-memory 0.05 -- bash "$tmp/hub_id.sh"
