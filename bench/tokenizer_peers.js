#!/usr/bin/env node
// Encode throughput of two JavaScript peers on the corpus `distllm bench tokenizer`
// uses: gpt-3-encoder (GPT-2's encoder, the parity reference) and Hugging Face's
// tokenizers.js reading the tokenizer.json distllm writes. One thread each, starting
// from an empty cache; compare with distllm's "1 thread, cold" row. Also checks that
// all three give the same number of tokens.
//
//   node bench/tokenizer_peers.js [FILE...]      # default: Debian's fortunes files
// Needs `npm ci` and a release build (build/release/bin/distllm).
'use strict';
const fs = require('fs');
const os = require('os');
const path = require('path');
const { execFileSync } = require('child_process');

let files = process.argv.slice(2);
if (files.length === 0) {
  const dir = '/usr/share/games/fortunes';
  files = fs.readdirSync(dir).sort().map((f) => path.join(dir, f))
    .filter((f) => fs.lstatSync(f).isFile() && !/\.(dat|u8)$/.test(f));
}
const corpus = files.map((f) => fs.readFileSync(f, 'utf8')).join('');
const mb = Buffer.byteLength(corpus) / 1e6;

// gpt-3-encoder is quadratic in the length of one call (it concatenates arrays), so
// the corpus goes in by chunks cut where GPT-2's pattern always cuts (before a '\n'
// that follows a printable ASCII character): the ids are those of the whole text.
const chunks = [];
let start = 0;
for (let i = 1; i < corpus.length; i++) {
  const c = corpus.charCodeAt(i - 1);
  if (corpus[i] === '\n' && c > 0x20 && c < 0x7f && i - start > 4000) {
    chunks.push(corpus.slice(start, i));
    start = i;
  }
}
chunks.push(corpus.slice(start));

function time(name, encode) {
  const t0 = process.hrtime.bigint();
  let tokens = 0;
  for (const c of chunks) tokens += encode(c).length;
  const s = Number(process.hrtime.bigint() - t0) / 1e9;
  console.log(`${name.padEnd(34)} ${(mb / s).toFixed(2).padStart(8)} MB/s  ${tokens} tokens`);
}

console.log(`corpus: ${files.length} file(s), ${mb.toFixed(2)} MB`);
const gpt3 = require('gpt-3-encoder');
time('gpt-3-encoder', gpt3.encode);

const bin = path.join(__dirname, '..', 'build', 'release', 'bin', 'distllm');
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'distllm-tok-'));
try {
  const json = path.join(tmp, 'tokenizer.json');
  execFileSync(bin, ['tokenize', '--tokenizer', 'gpt2', '--save', json]);
  const { Tokenizer } = require('@huggingface/tokenizers');
  const hf = new Tokenizer(JSON.parse(fs.readFileSync(json, 'utf8')), {});
  time('@huggingface/tokenizers (JS)', (text) => hf.encode(text, { add_special_tokens: false }).ids);
  const corpusFile = path.join(tmp, 'corpus.txt');
  fs.writeFileSync(corpusFile, corpus);
  const ids = JSON.parse(execFileSync(bin, ['tokenize', '--tokenizer', 'gpt2', '--no-special', '--file', corpusFile],
                                      { maxBuffer: 1 << 30 }));
  console.log(`distllm: ${ids.length} tokens (throughput: distllm bench tokenizer)`);
} finally {
  fs.rmSync(tmp, { recursive: true, force: true });
}
