#!/usr/bin/env node
// Encodes test cases with transformers.js's tokenizers (@lenml/tokenizers) loaded
// from a tokenizer.json that `distllm tokenizer train` wrote, to check that code
// we did not write reads the trained file as we do.
//
//   node tests/tokenizer/trained_bpe_reference.js TOKENIZER_JSON CASES_DIR OUT_JSON
//
// CASES_DIR/cases.json: {"ids": [NAME, ...]}, each case's text in NAME.txt.
// OUT_JSON: {"NAME": [ids...], ...}; added tokens such as <|endoftext|> match.
'use strict';
const fs = require('fs');
const path = require('path');
const { TokenizerLoader } = require('@lenml/tokenizers');

const [tokenizerPath, casesDir, outPath] = process.argv.slice(2);
if (!outPath) {
  console.error('usage: trained_bpe_reference.js TOKENIZER_JSON CASES_DIR OUT_JSON');
  process.exit(2);
}
const tokenizer = TokenizerLoader.fromPreTrained({
  tokenizerJSON: JSON.parse(fs.readFileSync(tokenizerPath, 'utf8')),
  tokenizerConfig: {},
});
const manifest = JSON.parse(fs.readFileSync(path.join(casesDir, 'cases.json'), 'utf8'));
const result = {};
for (const name of manifest.ids) {
  const text = fs.readFileSync(path.join(casesDir, name + '.txt'), 'utf8');
  result[name] = tokenizer.encode(text, { add_special_tokens: false });
}
fs.writeFileSync(outPath, JSON.stringify(result));
