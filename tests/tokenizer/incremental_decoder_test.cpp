// Streaming detokenization never emits half a character.
#include <gtest/gtest.h>

#include "distllm/base/rng.h"
#include "distllm/tokenizer/tokenizer.h"
#include "distllm/tokenizer/utf8.h"
#include "test_util.h"

namespace distllm {
namespace {

using test::gpt2;

// Streams `ids` one at a time; checks every chunk is valid UTF-8; returns the chunks.
std::vector<std::string> stream(const Tokenizer& t, const std::vector<int32_t>& ids, bool skip_special = true) {
  IncrementalDecoder dec(t, skip_special);
  std::vector<std::string> chunks;
  for (int32_t id : ids) {
    chunks.push_back(dec.push(id));
    EXPECT_TRUE(utf8_is_valid(chunks.back())) << "after id " << id;
  }
  chunks.push_back(dec.flush());
  EXPECT_TRUE(utf8_is_valid(chunks.back()));
  return chunks;
}

std::string join(const std::vector<std::string>& chunks) {
  std::string s;
  for (const auto& c : chunks) s += c;
  return s;
}

TEST(IncrementalDecoder, EmojiSplitAcrossTokens) {
  SKIP_WITHOUT_GPT2();
  // A family emoji is four people joined by ZWJ: 14 tokens, most of them partial bytes.
  std::string text = "Family: \xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9\xE2\x80\x8D\xF0\x9F\x91\xA7\xE2\x80\x8D\xF0\x9F\x91\xA6!";
  std::vector<int32_t> ids = gpt2().encode(text);
  std::vector<std::string> chunks = stream(gpt2(), ids);
  EXPECT_EQ(join(chunks), text);
  int empty = 0;
  for (size_t i = 0; i + 1 < chunks.size(); ++i) empty += chunks[i].empty();
  EXPECT_GE(empty, 4) << "the emoji's tokens should have been held back until complete";
}

TEST(IncrementalDecoder, CjkSplitAcrossTokens) {
  SKIP_WITHOUT_GPT2();
  std::string text = "\xE6\x9C\xBA\xE5\x99\xA8\xE5\xAD\xA6\xE4\xB9\xA0\xE6\x98\xAF\xE4\xBA\xBA\xE5\xB7\xA5\xE6\x99\xBA\xE8\x83\xBD";
  std::vector<int32_t> ids = gpt2().encode(text);
  ASSERT_GT(ids.size(), 9u);  // more tokens than characters: some split a character
  EXPECT_EQ(join(stream(gpt2(), ids)), text);
}

TEST(IncrementalDecoder, ValidTextAlwaysComesBackWhole) {
  SKIP_WITHOUT_GPT2();
  CounterRng rng(3);
  const char* pieces[] = {"a", " the", "\xC3\xA9", "\xE4\xB8\xAD", "\xF0\x9F\x98\x80", "\xE2\x80\x8D", "\n", "'s", "7"};
  for (int i = 0; i < 200; ++i) {
    std::string text;
    for (int k = 0; k < 30; ++k) text += pieces[rng.below(9)];
    EXPECT_EQ(join(stream(gpt2(), gpt2().encode(text))), text);
  }
}

TEST(IncrementalDecoder, InvalidBytes) {
  SKIP_WITHOUT_GPT2();
  const std::string r = "\xEF\xBF\xBD";
  IncrementalDecoder dec(gpt2());
  // A byte that can never start a character is replaced at once.
  EXPECT_EQ(dec.push(gpt2().encode("\xFF")[0]), r);
  // An unfinished character waits; at the end it becomes one U+FFFD.
  std::vector<int32_t> partial = gpt2().encode("\xE4\xB8");
  std::string out;
  for (int32_t id : partial) out += dec.push(id);
  EXPECT_EQ(out, "");
  EXPECT_EQ(dec.flush(), r);
  EXPECT_EQ(dec.flush(), "");
  // An unfinished character followed by something else is replaced then.
  std::vector<int32_t> ids = gpt2().encode("\xE4\xB8");
  for (int32_t id : gpt2().encode("x")) ids.push_back(id);
  EXPECT_EQ(join(stream(gpt2(), ids)), r + "x");
}

TEST(IncrementalDecoder, SpecialTokens) {
  SKIP_WITHOUT_GPT2();
  std::vector<int32_t> ids = gpt2().encode("Hi<|endoftext|>there");
  EXPECT_EQ(join(stream(gpt2(), ids)), "Hithere");
  EXPECT_EQ(join(stream(gpt2(), ids, /*skip_special=*/false)), "Hi<|endoftext|>there");
}

}  // namespace
}  // namespace distllm
