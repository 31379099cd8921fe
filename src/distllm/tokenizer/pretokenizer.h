// GPT-2's pre-tokenizer: splits text into the pieces that BPE then encodes one by one.
//
// It reproduces, exactly and without a regex engine, what JavaScript does with
//   /'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+/gu
// (the pattern of GPT-2, gpt-3-encoder and Hugging Face's ByteLevel pre-tokenizer).
// Every character falls in exactly one of the classes letter / number / space / other,
// and some alternative always matches at the current position, so the regex's
// matches tile the text; at each position the first alternative that matches wins:
//   1. an apostrophe followed by s, t, re, ve, m, ll or d (case-sensitive);
//   2. an optional U+0020 then a run of letters, or of numbers, or of "other"s;
//   3. a run of white space: all of it at the end of the text, otherwise all but its
//      last character (which then starts the next piece, e.g. as the space of " word");
//      a run of one before a non-space is matched by the final `\s+` alone.
// Bytes that are not well-formed UTF-8 count as "other" characters, one byte each (as
// if each were U+FFFD, which is "other"), and stay in the pieces unchanged, so any
// byte string can be encoded and decoded back exactly.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "distllm/tokenizer/unicode_classes.h"
#include "distllm/tokenizer/utf8.h"

namespace distllm {

namespace pretokenizer_detail {

// Class of each ASCII byte, for the fast path.
struct AsciiClasses {
  CharClass c[128];
  constexpr AsciiClasses() : c() {
    for (int b = 0; b < 128; ++b) {
      CharClass k = CharClass::kOther;
      if ((b >= 'a' && b <= 'z') || (b >= 'A' && b <= 'Z')) k = CharClass::kLetter;
      else if (b >= '0' && b <= '9') k = CharClass::kNumber;
      else if (b == ' ' || (b >= '\t' && b <= '\r')) k = CharClass::kSpace;
      c[b] = k;
    }
  }
};
inline constexpr AsciiClasses kAscii{};

// Decodes the character at p[i] (i < n): its class and byte length.
struct CharAt {
  CharClass cls;
  size_t len;
};
inline CharAt char_at(const unsigned char* p, size_t i, size_t n, const CharClassTable& table) {
  unsigned char b = p[i];
  if (b < 0x80) return {kAscii.c[b], 1};
  Utf8Step step = utf8_step(p + i, n - i);
  if (step.kind != Utf8Step::kChar) return {CharClass::kOther, 1};
  return {table.classify(step.cp), step.length};
}

// End of the run of characters of class `cls` that starts at i.
inline size_t run_end(const unsigned char* p, size_t i, size_t n, CharClass cls, const CharClassTable& table) {
  while (i < n) {
    unsigned char b = p[i];
    if (b < 0x80) {
      if (kAscii.c[b] != cls) break;
      ++i;
    } else {
      CharAt c = char_at(p, i, n, table);
      if (c.cls != cls) break;
      i += c.len;
    }
  }
  return i;
}

// Length of a contraction ('s 't 're 've 'm 'll 'd) at p[i] == '\'', or 0.
inline size_t contraction_length(const unsigned char* p, size_t i, size_t n) {
  if (i + 1 >= n) return 0;
  unsigned char c1 = p[i + 1];
  if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') return 2;
  if (i + 2 >= n) return 0;
  unsigned char c2 = p[i + 2];
  if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) return 3;
  return 0;
}

}  // namespace pretokenizer_detail

// Calls emit(std::string_view piece) for each piece of `text`, in order. The pieces
// concatenate to `text`.
template <typename Emit>
void gpt2_pretokenize(std::string_view text, Emit&& emit) {
  using namespace pretokenizer_detail;
  const CharClassTable& table = CharClassTable::get();
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    const size_t start = i;
    if (p[i] == '\'') {
      size_t len = contraction_length(p, i, n);
      if (len != 0) {
        emit(text.substr(start, len));
        i += len;
        continue;
      }
    }
    // " ?\p{L}+", " ?\p{N}+", " ?[^\s\p{L}\p{N}]+": an optional space, then a run.
    size_t body = (p[i] == ' ' && i + 1 < n) ? i + 1 : i;
    CharAt first = char_at(p, body, n, table);
    if (first.cls != CharClass::kSpace) {
      size_t end = run_end(p, body + first.len, n, first.cls, table);
      emit(text.substr(start, end - start));
      i = end;
      continue;
    }
    // White space: "\s+(?!\S)" then "\s+".
    size_t end = i, last = i;  // `last` = start of the run's final character
    while (end < n) {
      CharAt c = char_at(p, end, n, table);
      if (c.cls != CharClass::kSpace) break;
      last = end;
      end += c.len;
    }
    if (end < n && last > start) end = last;  // leave the final space to the next piece
    emit(text.substr(start, end - start));
    i = end;
  }
}

// The pieces as a vector (for tests and tools; encoding streams them instead).
std::vector<std::string> gpt2_pretokenize(std::string_view text);

}  // namespace distllm
