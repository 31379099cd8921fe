#!/usr/bin/env node
// Encodes the parity corpus with Hugging Face's JavaScript tokenizers
// (@huggingface/tokenizers) loaded from a tokenizer.json that distllm wrote, to check
// that the file is read by Hugging Face's code the way distllm reads it.
//
//   node tests/tokenizer/hf_tokenizers_reference.js TOKENIZER_JSON CASES_DIR OUT_JSON
//
// OUT_JSON: {"case name": [ids...], ...}; added tokens such as <|endoftext|> match.
'use strict';
const fs = require('fs');
const path = require('path');
const { Tokenizer } = require('@huggingface/tokenizers');

const [tokenizerPath, casesDir, outPath] = process.argv.slice(2);
if (!outPath) {
  console.error('usage: hf_tokenizers_reference.js TOKENIZER_JSON CASES_DIR OUT_JSON');
  process.exit(2);
}
const tokenizer = new Tokenizer(JSON.parse(fs.readFileSync(tokenizerPath, 'utf8')), {});
const manifest = JSON.parse(fs.readFileSync(path.join(casesDir, 'cases.json'), 'utf8'));
const result = {};
for (const name of manifest.ids) {
  const text = fs.readFileSync(path.join(casesDir, name + '.txt'), 'utf8');
  result[name] = tokenizer.encode(text, { add_special_tokens: false }).ids;
}
fs.writeFileSync(outPath, JSON.stringify(result));
