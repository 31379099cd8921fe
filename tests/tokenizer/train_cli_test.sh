#!/usr/bin/env bash
# `distllm tokenizer train` end to end: train on the fortunes corpus, load the file in
# `tokenize` and `data prepare`, and refuse bad input with one clear line each.
#   bash tests/tokenizer/train_cli_test.sh path/to/distllm
set -euo pipefail
distllm=$1
fail() { echo "FAIL: $*"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
corpus=/usr/share/games/fortunes
[ -f $corpus/fortunes ] || { echo "no fortunes corpus (Debian's fortunes package)"; exit 77; }

"$distllm" tokenizer train --input $corpus/fortunes $corpus/computers --vocab-size 1000 --out "$tmp/tok.json" \
  > "$tmp/log" || { cat "$tmp/log"; fail "training"; }
grep -Eq "^trained 1000 tokens \(1 special, 256 bytes, [0-9]+ merges\)" "$tmp/log" || fail "summary: $(cat "$tmp/log")"
[ "$("$distllm" tokenize --tokenizer "$tmp/tok.json" --text '<|endoftext|>')" = "[0]" ] || fail "special token id"
printf 'Q: What is a computer?\n\tA: \xe4\xb8\xad\xe6\x96\x87 \xf0\x9f\x98\x80   spaces\n' > "$tmp/in.txt"
"$distllm" tokenize --tokenizer "$tmp/tok.json" --file "$tmp/in.txt" > "$tmp/ids.json"
"$distllm" tokenize --tokenizer "$tmp/tok.json" --decode --file "$tmp/ids.json" > "$tmp/out.txt"
cmp "$tmp/in.txt" "$tmp/out.txt" || fail "round trip through tokenize"
# A model-directory form and data prepare.
mkdir "$tmp/dir" && cp "$tmp/tok.json" "$tmp/dir/tokenizer.json"
"$distllm" data prepare --input $corpus/fortunes --tokenizer "$tmp/dir" --doc-separator '\n%\n' \
  --out "$tmp/data" > "$tmp/prepare.log" 2>&1 || { cat "$tmp/prepare.log"; fail "data prepare"; }
want=$("$distllm" tokenize --tokenizer "$tmp/tok.json" --file "$tmp/in.txt")
[ "$("$distllm" tokenize --tokenizer "$tmp/data" --file "$tmp/in.txt")" = "$want" ] ||
  fail "the prepared data's tokenizer.json encodes differently"
# Special tokens and min frequency.
"$distllm" tokenizer train --input $corpus/fortunes --vocab-size 300 --special-tokens '<s>' '</s>' \
  --min-frequency 1000000 --out "$tmp/small.json" > "$tmp/log"
grep -q "^trained 258 tokens (2 special, 256 bytes, 0 merges)" "$tmp/log" || fail "min frequency: $(cat "$tmp/log")"
grep -q "^note: stopped at 258 of 300 tokens" "$tmp/log" || fail "stop note: $(cat "$tmp/log")"
[ "$("$distllm" tokenize --tokenizer "$tmp/small.json" --text '</s>')" = "[1]" ] || fail "--special-tokens"

# Errors are one clear line and a non-zero exit, and leave no file behind.
expect_error() {  # expect_error MESSAGE ARGS...
  local message=$1; shift
  if "$distllm" tokenizer train "$@" > /dev/null 2> "$tmp/err"; then fail "accepted: $*"; fi
  grep -qF "error: $message" "$tmp/err" || fail "for $*: expected 'error: $message', got: $(cat "$tmp/err")"
}
expect_error "vocab size 256 is smaller than the initial vocabulary: 1 special token + 256 byte symbols = 257" \
  --input $corpus/fortunes --vocab-size 256 --out "$tmp/bad.json"
expect_error "vocab size 257 is smaller than the initial vocabulary: 2 special tokens + 256 byte symbols = 258" \
  --input $corpus/fortunes --vocab-size 257 --special-tokens '<s>' '</s>' --out "$tmp/bad.json"
expect_error "--vocab-size N is required" --input $corpus/fortunes --out "$tmp/bad.json"
expect_error "$tmp/missing.txt: no such file" --input $corpus/fortunes "$tmp/missing.txt" --vocab-size 500 \
  --out "$tmp/bad.json"
expect_error "no input files: pass --input FILE..." --vocab-size 500 --out "$tmp/bad.json"
: > "$tmp/empty.txt"
expect_error "the input files contain no text (1 file, 0 bytes)" --input "$tmp/empty.txt" --vocab-size 500 \
  --out "$tmp/bad.json"
expect_error "$tmp is a directory; --input takes text files" --input "$tmp" --vocab-size 500 --out "$tmp/bad.json"
expect_error "special tokens must not be empty" --input $corpus/fortunes --vocab-size 500 --special-tokens '' \
  --out "$tmp/bad.json"
[ ! -e "$tmp/bad.json" ] || fail "a failed run wrote its output"
echo "train_cli_test: all passed"
