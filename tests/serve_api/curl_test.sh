#!/usr/bin/env bash
# The API with curl, the way people poke at servers. Needs SERVE_URL (see
# with_test_server.sh) and a server started with --api-key test-key.
set -uo pipefail
url=$SERVE_URL
auth=(-H "Authorization: Bearer test-key")
failures=0
check() {  # check NAME CONDITION_EXIT_STATUS
  if [ "$2" -eq 0 ]; then echo "ok   $1"; else echo "FAIL $1"; failures=$((failures + 1)); fi
}
json_ok() {  # json_ok FILE PYTHON_EXPRESSION_ON_j
  /usr/bin/python3 -c "import json,sys; j=json.load(open(sys.argv[1])); sys.exit(0 if ($2) else 1)" "$1"
}
status() {  # status OUTFILE CURL_ARGS... -> prints the HTTP status
  local out=$1; shift
  curl -s -o "$out" -w '%{http_code}' "$@"
}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

s=$(status "$tmp/h" "$url/health"); check "health is 200 without a key" $([ "$s" = 200 ]; echo $?)
s=$(status "$tmp/m" "${auth[@]}" "$url/v1/models"); check "models" $([ "$s" = 200 ] && json_ok "$tmp/m" "j['data'][0]['id']=='test-model'"; echo $?)
s=$(status "$tmp/u" "$url/v1/models"); check "no key -> 401" $([ "$s" = 401 ] && json_ok "$tmp/u" "j['error']['type']=='authentication_error'"; echo $?)

body='{"model":"test-model","prompt":"Hello curl","max_tokens":7,"temperature":0}'
s=$(status "$tmp/c" "${auth[@]}" -H "Content-Type: application/json" -d "$body" "$url/v1/completions")
check "completion" $([ "$s" = 200 ] && json_ok "$tmp/c" "j['choices'][0]['finish_reason']=='length' and j['usage']['completion_tokens']==7 and len(j['choices'][0]['text'])>0"; echo $?)

sbody='{"model":"test-model","prompt":"Hello curl","max_tokens":7,"temperature":0,"stream":true}'
curl -sN "${auth[@]}" -d "$sbody" "$url/v1/completions" > "$tmp/s"
/usr/bin/python3 - "$tmp/s" "$tmp/c" <<'PY'
import json, sys
events = [l[6:] for l in open(sys.argv[1]).read().split("\n\n") if l.startswith("data: ")]
assert events[-1] == "[DONE]", events[-1]
chunks = [json.loads(e) for e in events[:-1]]
text = "".join(c["choices"][0]["text"] for c in chunks)
assert text == json.load(open(sys.argv[2]))["choices"][0]["text"], text
assert chunks[-1]["choices"][0]["finish_reason"] == "length"
PY
check "streamed completion equals non-streamed" $?

cbody='{"model":"test-model","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Hi!"}],"max_tokens":5}'
s=$(status "$tmp/ch" "${auth[@]}" -d "$cbody" "$url/v1/chat/completions")
check "chat" $([ "$s" = 200 ] && json_ok "$tmp/ch" "j['choices'][0]['message']['role']=='assistant' and j['object']=='chat.completion'"; echo $?)
curl -sN "${auth[@]}" -d "${cbody%\}},\"stream\":true}" "$url/v1/chat/completions" > "$tmp/cs"
check "chat stream" $(grep -q '"role":"assistant"' "$tmp/cs" && tail -c 20 "$tmp/cs" | grep -q 'data: \[DONE\]'; echo $?)

# Hostile requests: each gets its 4xx and an OpenAI error object.
hostile() {  # hostile NAME EXPECTED_STATUS CURL_DATA_ARGS...
  local name=$1 want=$2; shift 2
  local s; s=$(status "$tmp/e" "${auth[@]}" "$@" "$url/v1/completions")
  check "$name -> $want" $([ "$s" = "$want" ] && json_ok "$tmp/e" "set(j['error']) >= {'message','type','param','code'}"; echo $?)
}
hostile "malformed JSON" 400 -d '{"model": "test-model", "prompt": '
hostile "wrong type" 400 -d '{"model":"test-model","prompt":"x","max_tokens":"ten"}'
hostile "negative max_tokens" 400 -d '{"model":"test-model","prompt":"x","max_tokens":-5}'
hostile "huge max_tokens" 400 -d '{"model":"test-model","prompt":"x","max_tokens":1000000000000}'
hostile "unknown model" 404 -d '{"model":"gpt-5","prompt":"x"}'
hostile "missing prompt" 400 -d '{"model":"test-model"}'
printf '{"model":"test-model","prompt":"\xff\xfe bad utf8"}' > "$tmp/bad_utf8"
hostile "invalid UTF-8" 400 --data-binary @"$tmp/bad_utf8"
head -c $((10 * 1024 * 1024)) /dev/zero | tr '\0' 'a' > "$tmp/big"
hostile "10 MB body" 413 --data-binary @"$tmp/big"

# A client that hangs up mid-stream: its request is aborted and its blocks freed.
# It hangs up after the first bytes of the stream (head exits, curl gets SIGPIPE):
# a timer raced the tiny models, which can stream all 900 tokens in under 0.5 s.
{ curl -sN --max-time 10 "${auth[@]}" -d '{"model":"test-model","prompt":"long","max_tokens":900,"stream":true}' \
    "$url/v1/completions" || true; } | head -c 16 > /dev/null
for _ in $(seq 100); do
  curl -s "$url/metrics" > "$tmp/metrics"
  grep -q 'distllm:request_aborted_total{model_name="test-model"} 1' "$tmp/metrics" && grep -q 'distllm:num_requests_running{model_name="test-model"} 0' "$tmp/metrics" && break
  sleep 0.05
done
check "mid-stream disconnect is aborted" $(grep -q 'distllm:request_aborted_total{model_name="test-model"} 1' "$tmp/metrics"; echo $?)
check "and its blocks are freed" $(grep -q 'distllm:kv_cache_usage_perc{model_name="test-model"} 0$' "$tmp/metrics"; echo $?)

s=$(status "$tmp/c2" "${auth[@]}" -d "$body" "$url/v1/completions")
check "still serving after all that" $([ "$s" = 200 ]; echo $?)
[ "$failures" -eq 0 ] || { echo "$failures curl checks failed"; exit 1; }
