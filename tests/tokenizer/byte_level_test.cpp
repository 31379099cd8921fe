#include "distllm/tokenizer/byte_level.h"

#include <gtest/gtest.h>

#include <set>

#include "distllm/tokenizer/utf8.h"

namespace distllm {
namespace {

TEST(ByteLevel, EveryByteHasItsOwnPrintableCharacter) {
  std::set<uint32_t> seen;
  for (int b = 0; b < 256; ++b) {
    uint32_t c = byte_level_char(static_cast<uint8_t>(b));
    EXPECT_TRUE(seen.insert(c).second) << "byte " << b;
    EXPECT_EQ(byte_level_byte(c), b);
    // No white space, control character or soft hyphen in the alphabet.
    EXPECT_FALSE(c <= 0x20 || (c >= 0x7F && c <= 0xA0) || c == 0xAD) << "byte " << b << " -> U+" << c;
  }
  EXPECT_EQ(byte_level_byte(' '), -1);
  EXPECT_EQ(byte_level_byte(0x144), -1);
  EXPECT_EQ(byte_level_byte(0x4E2D), -1);
}

TEST(ByteLevel, KnownCharacters) {
  EXPECT_EQ(byte_level_char(' '), 0x120u);   // 'Ġ'
  EXPECT_EQ(byte_level_char('\n'), 0x10Au);  // 'Ċ'
  EXPECT_EQ(byte_level_char('\t'), 0x109u);
  EXPECT_EQ(byte_level_char(0x00), 0x100u);
  EXPECT_EQ(byte_level_char(0x7F), 0x121u);
  EXPECT_EQ(byte_level_char(0xAD), 0x143u);
  EXPECT_EQ(byte_level_char('A'), static_cast<uint32_t>('A'));
  EXPECT_EQ(byte_level_char(0xE9), 0xE9u);  // 'é' stands for itself
  EXPECT_EQ(bytes_to_byte_level(" world"), "\xC4\xA0world");
}

TEST(ByteLevel, AllBytesRoundTrip) {
  std::string all;
  for (int b = 0; b < 256; ++b) all += static_cast<char>(b);
  std::string encoded = bytes_to_byte_level(all);
  EXPECT_TRUE(utf8_is_valid(encoded));
  std::string decoded;
  ASSERT_TRUE(byte_level_to_bytes(encoded, &decoded));
  EXPECT_EQ(decoded, all);
  for (int b = 0; b < 256; ++b) {
    std::string one(1, static_cast<char>(b));
    ASSERT_TRUE(byte_level_to_bytes(bytes_to_byte_level(one), &decoded));
    EXPECT_EQ(decoded, one);
  }
}

TEST(ByteLevel, RejectsStringsOutsideTheAlphabet) {
  std::string out;
  EXPECT_FALSE(byte_level_to_bytes("a b", &out));      // a raw space
  EXPECT_FALSE(byte_level_to_bytes("\xE4\xB8\xAD", &out));  // U+4E2D
  EXPECT_FALSE(byte_level_to_bytes("\xFF", &out));     // not UTF-8
  EXPECT_TRUE(byte_level_to_bytes("", &out));
  EXPECT_EQ(out, "");
}

}  // namespace
}  // namespace distllm
