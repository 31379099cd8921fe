#!/usr/bin/env node
// Token ids of the real tokenizers (Llama 3, Qwen3, Gemma 3, a 32k SentencePiece-style
// vocabulary) by two JavaScript implementations of Hugging Face's tokenizers that no
// one here wrote: @lenml/tokenizers (a tokenizers-only transformers.js) and
// @huggingface/tokenizers. real_tokenizers_test.cpp compares distllm with both.
//
//   node tests/tokenizer/real_tokenizers_reference.js TOKENIZER_DIR CASES_JSON OUT_JSON
//
// CASES_JSON: {"texts": [string, ...],
//              "invalid": [{"text": string, "bytes": [int, ...]}, ...]}
// "invalid" cases stand for byte strings that are not UTF-8: `text` has U+FFFD where
// each ill-formed byte was, `bytes` those bytes in order. Their reference is the
// tokenizer's own normalizer, pre-tokenizer and BPE model run on `text`, with each
// U+FFFD put back as its byte after pre-tokenization (distllm's rule: such a byte splits
// like U+FFFD and is encoded as itself). For SentencePiece-style tokenizers (byte
// fallback) the rule is that such a byte is one symbol no merge touches and becomes its
// <0xXX> token: the reference encodes `text` with each U+FFFD replaced by U+10FFFD (in
// no vocabulary, so it falls back to its four byte tokens) and puts the byte's token in
// place of those four.
//
// OUT_JSON: {"lenml": {"ids": [[...]], "ids_special": [[...]], "decoded": [string],
//                      "decoded_skip": [string], "invalid_ids": [[...]]},
//            "hf": {"ids": ..., "ids_special": ..., "decoded": ..., "decoded_skip": ...,
//                   "invalid_ids": ... (SentencePiece-style only)}}
// Decoding is Hugging Face's decoder alone (no clean_up_tokenization_spaces).
'use strict';
const fs = require('fs');
const path = require('path');
const { TokenizerLoader } = require('@lenml/tokenizers');
const { Tokenizer } = require('@huggingface/tokenizers');

const [dir, casesPath, outPath] = process.argv.slice(2);
if (!outPath) {
  console.error('usage: real_tokenizers_reference.js TOKENIZER_DIR CASES_JSON OUT_JSON');
  process.exit(2);
}
const tokenizerJSON = JSON.parse(fs.readFileSync(path.join(dir, 'tokenizer.json'), 'utf8'));
const tokenizerConfig = JSON.parse(fs.readFileSync(path.join(dir, 'tokenizer_config.json'), 'utf8'));
const cases = JSON.parse(fs.readFileSync(casesPath, 'utf8'));

const noCleanUp = { clean_up_tokenization_spaces: false };

function run(encode, decode) {
  const ids = cases.texts.map((t) => encode(t, false));
  return {
    ids,
    ids_special: cases.texts.map((t) => encode(t, true)),
    // (lenml refuses to decode no ids: that text is empty.)
    decoded: ids.map((x) => (x.length ? decode(x, false) : '')),
    decoded_skip: ids.map((x) => (x.length ? decode(x, true) : '')),
  };
}

// GPT-2's byte <-> character table (the ByteLevel alphabet).
function byteLevelTables() {
  const bs = [];
  for (let b = 33; b <= 126; ++b) bs.push(b);
  for (let b = 161; b <= 172; ++b) bs.push(b);
  for (let b = 174; b <= 255; ++b) bs.push(b);
  const cs = bs.slice();
  let n = 0;
  for (let b = 0; b < 256; ++b) {
    if (!bs.includes(b)) {
      bs.push(b);
      cs.push(256 + n++);
    }
  }
  const toChar = new Array(256);
  const toByte = new Map();
  bs.forEach((b, i) => {
    toChar[b] = String.fromCodePoint(cs[i]);
    toByte.set(String.fromCodePoint(cs[i]), b);
  });
  return { toChar, toByte };
}

// The invalid-UTF-8 reference: lenml's own steps, U+FFFD swapped for the byte after
// pre-tokenization. Added tokens are not involved in these cases.
function encodeWithBytes(tok, text, bytes) {
  const { toChar, toByte } = byteLevelTables();
  let x = tok.normalizer ? tok.normalizer(text) : text;
  const pieces = tok.pre_tokenizer ? tok.pre_tokenizer(x, { section_index: 0 }) : [x];
  let next = 0;
  const swapped = pieces.map((piece) => {
    const raw = Array.from(piece).map((c) => toByte.get(c));
    if (raw.some((b) => b === undefined)) throw new Error('not a byte-level piece: ' + piece);
    const out = [];
    for (let i = 0; i < raw.length; ++i) {
      if (raw[i] === 0xef && raw[i + 1] === 0xbf && raw[i + 2] === 0xbd) {
        out.push(bytes[next++]);
        i += 2;
      } else {
        out.push(raw[i]);
      }
    }
    return out.map((b) => toChar[b]).join('');
  });
  if (next !== bytes.length) throw new Error('U+FFFD count does not match the bytes');
  return tok.model.convert_tokens_to_ids(tok.model(swapped));
}

// The SentencePiece-style (byte_fallback) invalid-UTF-8 reference: see the top.
function encodeWithFallbackBytes(encode, vocab, text, bytes) {
  const byteId = (b) => {
    const id = vocab['<0x' + b.toString(16).toUpperCase().padStart(2, '0') + '>'];
    if (id === undefined) throw new Error('no byte-fallback token for ' + b);
    return id;
  };
  if ('\u{10FFFD}' in vocab) throw new Error('U+10FFFD is in the vocabulary: choose another stand-in');
  const stand = Array.from(Buffer.from('\u{10FFFD}', 'utf8')).map(byteId);
  const ids = encode(text.replace(/\uFFFD/g, '\u{10FFFD}'));
  const out = [];
  let next = 0;
  for (let i = 0; i < ids.length; ++i) {
    if (stand.every((id, k) => ids[i + k] === id)) {
      out.push(byteId(bytes[next++]));
      i += stand.length - 1;
    } else {
      out.push(ids[i]);
    }
  }
  if (next !== bytes.length) throw new Error('stand-in count does not match the bytes');
  return out;
}

const byteFallback = tokenizerJSON.model.byte_fallback === true;
const invalid = cases.invalid || [];

const lenml = TokenizerLoader.fromPreTrained({ tokenizerJSON, tokenizerConfig });
const lenmlEncode = (t, special) => lenml.encode(t, { add_special_tokens: special });
const out = {
  lenml: run(lenmlEncode, (ids, skip) => lenml.decode(ids, { skip_special_tokens: skip, ...noCleanUp })),
};
out.lenml.invalid_ids = invalid.map((c) =>
  byteFallback
    ? encodeWithFallbackBytes((t) => lenmlEncode(t, false), tokenizerJSON.model.vocab, c.text, c.bytes)
    : encodeWithBytes(lenml, c.text, c.bytes),
);

const hf = new Tokenizer(tokenizerJSON, tokenizerConfig);
const hfEncode = (t, special) => hf.encode(t, { add_special_tokens: special }).ids;
out.hf = run(hfEncode, (ids, skip) => hf.decode(ids, { skip_special_tokens: skip, ...noCleanUp }));
if (byteFallback)
  out.hf.invalid_ids = invalid.map((c) =>
    encodeWithFallbackBytes((t) => hfEncode(t, false), tokenizerJSON.model.vocab, c.text, c.bytes),
  );
fs.writeFileSync(outPath, JSON.stringify(out));
