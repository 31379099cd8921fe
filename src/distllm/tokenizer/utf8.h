// UTF-8 decoding by the Unicode Standard's table of well-formed byte sequences
// (Table 3-7): no overlong forms, no surrogates, nothing above U+10FFFF.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace distllm {

struct Utf8Step {
  enum Kind : uint8_t {
    kChar,       // `length` bytes form the code point `cp`
    kTruncated,  // the input ends inside a sequence that could still become valid
    kInvalid,    // `length` bytes (>= 1) are a maximal ill-formed subpart: one U+FFFD
  };
  Kind kind;
  uint8_t length;
  uint32_t cp;
};

// Looks at the sequence starting at p (n >= 1 bytes available).
inline Utf8Step utf8_step(const unsigned char* p, size_t n) {
  unsigned char b0 = p[0];
  if (b0 < 0x80) return {Utf8Step::kChar, 1, b0};
  int need;
  unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  uint32_t cp;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 2, cp = b0 & 0x1F;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 3, cp = b0 & 0x0F;
    if (b0 == 0xE0) lo = 0xA0;  // no overlong forms
    if (b0 == 0xED) hi = 0x9F;  // no surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 4, cp = b0 & 0x07;
    if (b0 == 0xF0) lo = 0x90;  // no overlong forms
    if (b0 == 0xF4) hi = 0x8F;  // nothing above U+10FFFF
  } else {
    return {Utf8Step::kInvalid, 1, 0};  // continuation byte, C0, C1 or F5..FF
  }
  for (int i = 1; i < need; ++i) {
    if (static_cast<size_t>(i) >= n) return {Utf8Step::kTruncated, static_cast<uint8_t>(i), 0};
    unsigned char b = p[i];
    if (i == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF))
      return {Utf8Step::kInvalid, static_cast<uint8_t>(i), 0};
    cp = (cp << 6) | (b & 0x3F);
  }
  return {Utf8Step::kChar, static_cast<uint8_t>(need), cp};
}

// True when every byte of s belongs to a well-formed UTF-8 sequence.
bool utf8_is_valid(std::string_view s);

// Byte offset of the first ill-formed byte, or s.size() when s is valid.
size_t utf8_first_invalid(std::string_view s);

// s with each maximal ill-formed subpart (and a truncated tail) replaced by U+FFFD,
// the same replacements a WHATWG TextDecoder (and Python's "replace") makes.
std::string utf8_sanitize(std::string_view s);

// s for an error message: in single quotes, at most 64 bytes, control bytes escaped.
std::string quote_for_message(std::string_view s);

// Appends the UTF-8 encoding of cp (which must be a Unicode scalar value).
void utf8_append(std::string& out, uint32_t cp);

}  // namespace distllm
