#include "distllm/tokenizer/utf8.h"

#include <gtest/gtest.h>

namespace distllm {
namespace {

Utf8Step step(std::string_view s) { return utf8_step(reinterpret_cast<const unsigned char*>(s.data()), s.size()); }

TEST(Utf8, WellFormedSequences) {
  EXPECT_EQ(step("A").kind, Utf8Step::kChar);
  EXPECT_EQ(step("\xC3\xA9").cp, 0xE9u);
  EXPECT_EQ(step("\xE4\xB8\xAD").cp, 0x4E2Du);
  EXPECT_EQ(step("\xF0\x9F\x98\x80").cp, 0x1F600u);
  EXPECT_EQ(step("\xF4\x8F\xBF\xBF").cp, 0x10FFFFu);
  EXPECT_EQ(step("\xEF\xBB\xBF").length, 3);
}

TEST(Utf8, IllFormedSequences) {
  for (std::string_view bad : {"\x80", "\xBF", "\xC0\x80", "\xC1\xBF", "\xF5\x80\x80\x80", "\xFF"}) {
    EXPECT_EQ(step(bad).kind, Utf8Step::kInvalid) << bad;
    EXPECT_EQ(step(bad).length, 1) << bad;
  }
  EXPECT_EQ(step("\xE0\x80\x80").kind, Utf8Step::kInvalid);  // overlong
  EXPECT_EQ(step("\xED\xA0\x80").kind, Utf8Step::kInvalid);  // surrogate
  EXPECT_EQ(step("\xF4\x90\x80\x80").kind, Utf8Step::kInvalid);  // above U+10FFFF
  Utf8Step s = step("\xE4\xB8x");  // a valid prefix, then a non-continuation byte
  EXPECT_EQ(s.kind, Utf8Step::kInvalid);
  EXPECT_EQ(s.length, 2);
  s = step("\xF0\x9F\x98");  // the input ends inside a character
  EXPECT_EQ(s.kind, Utf8Step::kTruncated);
  EXPECT_EQ(s.length, 3);
}

TEST(Utf8, SanitizeReplacesEachMaximalSubpart) {
  const std::string r = "\xEF\xBF\xBD";
  EXPECT_EQ(utf8_sanitize("plain"), "plain");
  EXPECT_EQ(utf8_sanitize("a\xFF" "b"), "a" + r + "b");
  EXPECT_EQ(utf8_sanitize("\xE4\xB8x"), r + "x");              // one U+FFFD for the prefix
  EXPECT_EQ(utf8_sanitize("\xED\xA0\x80"), r + r + r);          // a surrogate: three
  EXPECT_EQ(utf8_sanitize("\xF0\x80\x80"), r + r + r);          // overlong: three
  EXPECT_EQ(utf8_sanitize("ok\xF0\x9F\x98"), "ok" + r);         // truncated tail: one
  EXPECT_EQ(utf8_sanitize("\xF0\x9F\x98\x80"), "\xF0\x9F\x98\x80");
  EXPECT_TRUE(utf8_is_valid("caf\xC3\xA9"));
  EXPECT_FALSE(utf8_is_valid("caf\xC3"));
  EXPECT_EQ(utf8_first_invalid("ab\xC3\xA9\xFF"), 4u);
}

TEST(Utf8, AppendEncodesEveryLength) {
  for (uint32_t cp : {0x41u, 0xE9u, 0x4E2Du, 0x1F600u, 0x10FFFFu}) {
    std::string s;
    utf8_append(s, cp);
    Utf8Step st = step(s);
    EXPECT_EQ(st.kind, Utf8Step::kChar);
    EXPECT_EQ(st.cp, cp);
    EXPECT_EQ(st.length, s.size());
  }
}

}  // namespace
}  // namespace distllm
