#!/usr/bin/env node
// Writes the GPT-2 parity corpus and what the reference implementations make of it.
//
//   node tests/tokenizer/gpt2_reference.js OUT_DIR
//
// For each case NAME: OUT_DIR/NAME.txt (the text, UTF-8) and OUT_DIR/NAME.ids.json (the
// ids the npm package gpt-3-encoder gives). OUT_DIR/cases.json lists the cases and
// holds the pre-tokenizer cases: [text, byte lengths of the pieces GPT-2's pattern
// makes of it in this Node's RegExp engine].
'use strict';
const fs = require('fs');
const path = require('path');

const out = process.argv[2];
if (!out) {
  console.error('usage: gpt2_reference.js OUT_DIR');
  process.exit(2);
}
fs.mkdirSync(out, { recursive: true });
const encoder = require('gpt-3-encoder');
const pattern = /'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+/gu;

// Deterministic random numbers (xorshift32), so every run writes the same corpus.
let state = 0x9e3779b9;
function rand() {
  state ^= state << 13; state >>>= 0;
  state ^= state >>> 17;
  state ^= state << 5; state >>>= 0;
  return state / 4294967296;
}
const pick = (list) => list[Math.floor(rand() * list.length)];
const unassigned = /^\p{Cn}$/u;

// A random assigned code point (no surrogates, no private use), from all planes.
function randomCodePoint() {
  for (;;) {
    const plane = rand();
    let cp;
    if (plane < 0.5) cp = Math.floor(rand() * 0x3000);               // scripts, symbols
    else if (plane < 0.8) cp = 0x3000 + Math.floor(rand() * 0xD000);  // CJK, Hangul, ...
    else cp = 0x10000 + Math.floor(rand() * 0x30000);                 // planes 1-3
    if (cp >= 0xD800 && cp <= 0xDFFF) continue;
    if (cp >= 0xE000 && cp <= 0xF8FF) continue;
    const s = String.fromCodePoint(cp);
    if (unassigned.test(s)) continue;
    return s;
  }
}

const cases = {};

cases.ascii_prose = `The committee met on Tuesday to review the budget. Nobody expected the numbers to add up,
and they didn't: the spreadsheet had been copied from last year's, with three columns shifted
one place to the right. "We'll fix it by Friday," said the treasurer, who'd said the same thing
in March. The chair's reply -- brief, polite, and entirely unconvinced -- was minuted anyway.

Meanwhile, in the basement, the printer jammed again (for the 4th time this week).
Q: Why is it always the printer?  A: Because it can sense fear.
`;

cases.code = `#include <vector>
int main(int argc, char** argv) {
\tstd::vector<int> xs = {1, 2, 3};
\tfor (auto& x : xs) x *= 2;   // double them
\treturn xs.size() == 3 ? 0 : 1;
}

def fib(n: int) -> int:
    """Return the n-th Fibonacci number."""
    a, b = 0, 1
    for _ in range(n):
        a, b = b, a + b
    return a

if __name__ == "__main__":
        print(fib(30))  # 832040
const re = /^[a-z_][a-z0-9_]*$/i; let s = \`\${x}px\`; x => x**2 !== 0x1F;
SELECT id, name FROM users WHERE age >= 18 AND name LIKE '%son' ORDER BY id DESC;
`;

cases.cjk = `机器学习是人工智能的一个分支。深度学习模型需要大量的数据和计算资源。
東京の天気は晴れです。今日はとても暑いですね！カタカナとひらがなを混ぜて書きます。
한국어 문장도 포함합니다. 서울은 대한민국의 수도입니다.
混合文本：GPT-2使用字节级BPE，中文字符通常被拆成多个token。（括号）「引号」、顿号。
`;

cases.emoji = `Hello 👋 world 🌍! Skin tones: 👋🏻 👋🏼 👋🏽 👋🏾 👋🏿.
Family: 👨‍👩‍👧‍👦 Couple: 👩‍❤️‍👨 Rainbow flag: 🏳️‍🌈 Pirate: 🏴‍☠️ Technologist: 🧑🏽‍💻
Flags: 🇺🇸🇯🇵🇫🇷🇩🇪 Keycaps: 1️⃣ 2️⃣ #️⃣ Hearts:❤️💔💕 Faces😀😃😄😁😆 no spaces🙂🙃
`;

cases.combining = `Cafe\u0301 vs Café; n\u0303 vs ñ; Zalgo: Z\u0334\u0351a\u0335\u0357l\u0336\u0301g\u0337\u0308o\u0338\u0303
Tiếng Việt có dấu: Người ta nói rằng học tập là suốt đời.
हिन्दी में लिखा गया वाक्य। संस्कृतम्। தமிழ் மொழி. ภาษาไทยไม่มีช่องว่างระหว่างคำ
العربية: السَّلَامُ عَلَيْكُمْ. עברית: שָׁלוֹם עוֹלָם. Ελληνικά: Καλημέρα κόσμε. Русский: Привет, мир!
`;

cases.whitespace = 'a  b   c    d\t\te\t \tf\n\ng\n\n\nh \n i\r\nj\r\n\r\nk    \n' +
  '    indented\n\t\ttabbed\n   \n\n  trailing   \n' +
  'nbsp\u00A0word ideographic\u3000space line\u2028sep para\u2029sep bom\uFEFFword nel\u0085word\n' +
  'vt\vff\fcr\rfs\u001Cgs\u001Dus\u001F thin\u2009space narrow\u202Fnbsp  \u00A0 \u3000\u3000x\n' +
  ' '.repeat(300) + 'end' + '\n'.repeat(50) + '\t'.repeat(40) + 'x' + ' \n \n \n' + '   ';

cases.contractions = `I'm you're we've they'll she'd it's don't can't won't isn't
I'M YOU'RE WE'VE THEY'LL SHE'D IT'S DON'T CAN'T WON'T ISN'T
It'S We'Ve 'S 'T 'RE ''s '''ll 'ss 'tt 'rere rock'n'roll o'clock ma'am y'all
’s ’t typographic’s apostrophe’re 'd'd'd 'm'm 'll'll' ' 's 't
`;

cases.digits = `0 1 12 123 1234 12345 123456 1234567 12345678 123456789 1234567890
3.14159 2.71828 -42 +7 1e10 1,000,000 $19.99 50% 0x1F 0b1010 v1.2.3 2024-01-31 12:34:56
٠١٢٣٤٥٦٧٨٩ ०१२३४५६७८९ ０１２３ Ⅻ ⅻ ½ ¾ ² ³ ① ⑩ 𝟎𝟏𝟐 x²+y³
`;

cases.misc = `https://example.org/path?query=1&b=two#frag <user@example.com> [link](http://x.y)
{"key": "value", "list": [1, 2, 3], "nested": {"a": null, "b": true}}
# Heading\n* bullet\n> quote\n\`\`\`\ncode\n\`\`\`
<|endoftext|> <|endoftext|><|endoftext|> text<|endoftext|>text
!!!??? ... --- *** ### @@@ $$$ %%% ^^^ &&& (((( )))) ~~~ ||| \\\\ // ;; :: ,,
`;

cases.long_pieces = 'a'.repeat(2000) + ' ' + 'ab'.repeat(700) + '\n' +
  '机器学习是人工智能的一个分支深度学习模型需要大量的数据和计算资源'.repeat(20) + '\n' +
  '!?'.repeat(800) + '\n' + '9'.repeat(1500) + '\n';

{
  let s = '';
  for (let line = 0; line < 120; line++) {
    let l = '';
    const len = 1 + Math.floor(rand() * 60);
    for (let i = 0; i < len; i++) l += rand() < 0.15 ? pick([' ', '  ', '\t', '\'s', '\'T', '\u00A0']) : randomCodePoint();
    s += l + '\n';
  }
  cases.random_unicode = s;
}

// About 1 MB: lines drawn from everything above, random words and random characters.
// Each line ends in '.', so the reference can encode it line by line (see below).
{
  const sources = Object.values(cases).join('\n').split('\n').filter((l) => l.length > 0);
  const words = 'the of and to in is was for on that with as by at from this have not are be or it but'.split(' ');
  const parts = [];
  let size = 0;
  while (size < 1 << 20) {
    let line;
    const r = rand();
    if (r < 0.5) line = pick(sources);
    else if (r < 0.8) line = Array.from({ length: 5 + Math.floor(rand() * 15) }, () => pick(words)).join(pick([' ', ' ', ' ', '  ', ', ']));
    else line = Array.from({ length: 1 + Math.floor(rand() * 30) }, () => (rand() < 0.2 ? ' ' : randomCodePoint())).join('');
    line += '.';
    parts.push(line);
    size += Buffer.byteLength(line) + 1;
  }
  cases.one_megabyte = parts.join('\n') + '\n';
}

// gpt-3-encoder's encode() is quadratic in the number of tokens (it concatenates
// arrays), so long texts are encoded in pieces cut just before a '\n' that follows a
// printable ASCII character. GPT-2's pattern always ends a match there and starts the
// next one at the '\n' whatever came before, so the ids are the same as encoding the
// whole text at once (the C++ side does encode it whole).
function encodeLong(text) {
  const ids = [];
  let start = 0;
  for (let i = 1; i < text.length; i++) {
    const c = text.charCodeAt(i - 1);
    if (text[i] === '\n' && c > 0x20 && c < 0x7f && i - start > 2000) {
      for (const id of encoder.encode(text.slice(start, i))) ids.push(id);
      start = i;
    }
  }
  for (const id of encoder.encode(text.slice(start))) ids.push(id);
  return ids;
}

const manifest = { ids: [], pieces: [] };
for (const [name, text] of Object.entries(cases)) {
  fs.writeFileSync(path.join(out, name + '.txt'), text, 'utf8');
  fs.writeFileSync(path.join(out, name + '.ids.json'), JSON.stringify(encodeLong(text)));
  manifest.ids.push(name);
}

// Pre-tokenizer cases: short strings over an alphabet of the characters that decide
// where pieces end.
const alphabet = [' ', ' ', ' ', '\t', '\n', '\r', '\u000B', '\u000C', '\u0085', '\u00A0', '\u2028', '\u3000', '\uFEFF',
  '\u001C', "'", "'", 's', 't', 'r', 'e', 'v', 'l', 'd', 'm', 'S', 'T', 'x', 'é', '\u0301', '中', 'ж',
  '1', '9', '٣', 'Ⅻ', '½', '.', ',', '!', '-', '😀', '\u200D', '🏽', '’'];
for (let n = 0; n < 3000; n++) {
  let text = '';
  const len = 1 + Math.floor(rand() * 24);
  for (let i = 0; i < len; i++) text += rand() < 0.1 ? randomCodePoint() : pick(alphabet);
  manifest.pieces.push([text, text.match(pattern).map((p) => Buffer.byteLength(p))]);
}
manifest.unicode = process.versions.unicode;
fs.writeFileSync(path.join(out, 'cases.json'), JSON.stringify(manifest));
