// The character classes of GPT-2's split pattern, for every Unicode code point.
//
// GPT-2's pattern (run by the reference encoders as a JavaScript /u regex) only asks
// three questions of a character: is it a letter (\p{L}), a number (\p{N}), or white
// space (\s)? Everything else is "other". The answers come from ranges generated once
// from Node.js's RegExp engine (scripts/gen_unicode_tables.js -> unicode_data.cpp) and
// are packed into a two-stage lookup table so that a query is two loads.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace distllm {

enum class CharClass : uint8_t { kOther = 0, kLetter = 1, kNumber = 2, kSpace = 3 };

struct CodeRange {
  uint32_t first;
  uint32_t last;  // inclusive
};

namespace unicode_data {
extern const char kUnicodeVersion[];  // e.g. "17.0": the Unicode version of the tables
std::span<const CodeRange> letter_ranges();
std::span<const CodeRange> number_ranges();
std::span<const CodeRange> space_ranges();
}  // namespace unicode_data

class CharClassTable {
 public:
  static constexpr uint32_t kMaxCodePoint = 0x10FFFF;

  // Built on first use (about 40 KB), shared by all threads.
  static const CharClassTable& get();

  CharClass classify(uint32_t cp) const {
    if (cp > kMaxCodePoint) return CharClass::kOther;
    return static_cast<CharClass>(blocks_[static_cast<uint32_t>(stage1_[cp >> 8]) * 256 + (cp & 255)]);
  }

 private:
  CharClassTable();
  uint16_t stage1_[(kMaxCodePoint + 1) >> 8];
  std::vector<uint8_t> blocks_;  // the distinct 256-entry blocks, back to back
};

}  // namespace distllm
