#include <gtest/gtest.h>

#include "distllm/base/error.h"
#include "distllm/serve/detokenizer.h"
#include "serve/test_codec.h"

namespace distllm::serve {
namespace {

using testing::ByteCodec;

bool valid_utf8(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (len == 0 || i + len > s.size()) return false;
    for (size_t j = 1; j < len; ++j)
      if ((static_cast<unsigned char>(s[i + j]) & 0xC0) != 0x80) return false;
    i += len;
  }
  return true;
}

struct Detok {
  std::vector<std::string> pieces;
  std::string text;
  bool stopped = false;
  std::string stop;
};

Detok detok(const std::string& generated, std::vector<std::string> stops) {
  ByteCodec codec;
  Detokenizer d(codec.stream_decoder(), std::move(stops));
  Detok r;
  for (int32_t id : codec.encode(generated)) {
    auto out = d.push(id);
    EXPECT_TRUE(valid_utf8(out.text)) << out.text;
    r.pieces.push_back(out.text);
    r.text += out.text;
    if (out.stopped) {
      r.stopped = true;
      r.stop = out.stop;
      break;
    }
  }
  if (!r.stopped) {
    auto out = d.finish();
    r.text += out.text;
    r.stopped = out.stopped;
  }
  EXPECT_EQ(r.text, d.text());
  return r;
}

TEST(Detokenizer, StreamsUtf8WithoutSplittingCharacters) {
  std::string s = "héllo 世界 🙂 ok";
  Detok r = detok(s, {});
  EXPECT_EQ(r.text, s);
  // "世" is 3 bytes: the first two pushes produce nothing.
  size_t empty = 0;
  for (auto& p : r.pieces) empty += p.empty() ? 1 : 0;
  EXPECT_EQ(empty, 1u + 2u + 2u + 3u);
}

TEST(Detokenizer, ReplacesInvalidBytes) {
  Detok r = detok(std::string("a\xff" "b\xe4\xb8") , {});
  EXPECT_EQ(r.text, "a\xEF\xBF\xBD" "b\xEF\xBF\xBD");
}

TEST(Detokenizer, StopStringEndsOutputAndNeverLeaks) {
  Detok r = detok("Hello world. Bye", {"world"});
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.stop, "world");
  EXPECT_EQ(r.text, "Hello ");
  for (auto& p : r.pieces) EXPECT_EQ(p.find('w'), std::string::npos);
}

TEST(Detokenizer, HoldsBackOnlyPossibleStopPrefixes) {
  ByteCodec codec;
  Detokenizer d(codec.stream_decoder(), {"world"});
  std::string out;
  for (char c : std::string("Hello w")) out += d.push(static_cast<unsigned char>(c)).text;
  EXPECT_EQ(out, "Hello ");
  out += d.push('a').text;  // "wa" cannot start "world"
  EXPECT_EQ(out, "Hello wa");
  for (char c : std::string(" wor")) out += d.push(static_cast<unsigned char>(c)).text;
  EXPECT_EQ(out, "Hello wa ");
  auto fin = d.finish();  // generation ended (length): held text is released
  EXPECT_FALSE(fin.stopped);
  EXPECT_EQ(out + fin.text, "Hello wa wor");
}

TEST(Detokenizer, EarliestOfSeveralStopsWins) {
  Detok r = detok("one two three", {"three", "two", "xyz"});
  EXPECT_EQ(r.text, "one ");
  EXPECT_EQ(r.stop, "two");
  Detok m = detok("价格是 100 元", {"元"});
  EXPECT_EQ(m.text, "价格是 100 ");
}

TEST(Detokenizer, StopAtTheVeryStart) {
  Detok r = detok("\n\nabc", {"\n\n"});
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.text, "");
}

TEST(Detokenizer, RejectsEmptyStop) {
  ByteCodec codec;
  EXPECT_THROW(Detokenizer(codec.stream_decoder(), {""}), Error);
}

}  // namespace
}  // namespace distllm::serve
