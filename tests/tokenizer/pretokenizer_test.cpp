// GPT-2's split pattern on hand-picked cases (parity_test.cpp compares thousands of
// random ones with JavaScript's regex engine).
#include "distllm/tokenizer/pretokenizer.h"

#include <gtest/gtest.h>

namespace distllm {
namespace {

using Pieces = std::vector<std::string>;

TEST(Pretokenizer, WordsKeepTheirLeadingSpace) {
  EXPECT_EQ(gpt2_pretokenize("Hello world"), (Pieces{"Hello", " world"}));
  EXPECT_EQ(gpt2_pretokenize("Hello, world!"), (Pieces{"Hello", ",", " world", "!"}));
  EXPECT_EQ(gpt2_pretokenize("abc123def"), (Pieces{"abc", "123", "def"}));
  EXPECT_EQ(gpt2_pretokenize(" 42 ...!?"), (Pieces{" 42", " ...!?"}));
  EXPECT_EQ(gpt2_pretokenize(""), (Pieces{}));
}

TEST(Pretokenizer, ContractionsAreLowerCaseOnly) {
  EXPECT_EQ(gpt2_pretokenize("I'm you're we've they'll she'd it's don't"),
            (Pieces{"I", "'m", " you", "'re", " we", "'ve", " they", "'ll", " she", "'d", " it", "'s", " don", "'t"}));
  // Upper case is not a contraction: the apostrophe is punctuation, the letters a word.
  EXPECT_EQ(gpt2_pretokenize("I'M IT'S"), (Pieces{"I", "'", "M", " IT", "'", "S"}));
  // No look-ahead: "'s" is taken even at the start of a longer word.
  EXPECT_EQ(gpt2_pretokenize("'still"), (Pieces{"'s", "till"}));
  // Inside a run of punctuation the apostrophe is punctuation.
  EXPECT_EQ(gpt2_pretokenize("?'s"), (Pieces{"?'", "s"}));
  EXPECT_EQ(gpt2_pretokenize(" 's"), (Pieces{" '", "s"}));
}

TEST(Pretokenizer, WhiteSpaceRuns) {
  // All but the last space of a run; the last one joins the next word.
  EXPECT_EQ(gpt2_pretokenize("a   b"), (Pieces{"a", "  ", " b"}));
  // A single newline before a word stands alone; a run leaves its last character.
  EXPECT_EQ(gpt2_pretokenize("a\nb"), (Pieces{"a", "\n", "b"}));
  EXPECT_EQ(gpt2_pretokenize("a\n\nb"), (Pieces{"a", "\n", "\n", "b"}));
  EXPECT_EQ(gpt2_pretokenize("a \n\tb"), (Pieces{"a", " \n", "\t", "b"}));
  // At the end of the text the whole run is one piece.
  EXPECT_EQ(gpt2_pretokenize("a \n\n "), (Pieces{"a", " \n\n "}));
  EXPECT_EQ(gpt2_pretokenize("   "), (Pieces{"   "}));
  // Only U+0020 attaches to a word: a no-break space does not.
  EXPECT_EQ(gpt2_pretokenize("a\xC2\xA0" "b"), (Pieces{"a", "\xC2\xA0", "b"}));
}

TEST(Pretokenizer, UnicodeClasses) {
  // CJK ideographs are letters; a run without spaces is one piece.
  EXPECT_EQ(gpt2_pretokenize("\xE4\xB8\xAD\xE6\x96\x87 ok"), (Pieces{"\xE4\xB8\xAD\xE6\x96\x87", " ok"}));
  // A combining mark (U+0301) is not a letter: it splits the word.
  EXPECT_EQ(gpt2_pretokenize("Cafe\xCC\x81s"), (Pieces{"Cafe", "\xCC\x81", "s"}));
  // Emoji and ZWJ are "other" and run together; Arabic-Indic digits are numbers.
  EXPECT_EQ(gpt2_pretokenize(" \xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9 \xD9\xA3\xD9\xA4"),
            (Pieces{" \xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9", " \xD9\xA3\xD9\xA4"}));
  // U+FEFF is white space for JavaScript, U+0085 is not.
  EXPECT_EQ(gpt2_pretokenize("a\xEF\xBB\xBF" "b"), (Pieces{"a", "\xEF\xBB\xBF", "b"}));
  EXPECT_EQ(gpt2_pretokenize("a\xC2\x85" "b"), (Pieces{"a", "\xC2\x85", "b"}));
}

// Bytes that are not UTF-8 are "other" characters, one byte each, kept as they are.
TEST(Pretokenizer, InvalidUtf8IsOtherAndPreserved) {
  EXPECT_EQ(gpt2_pretokenize("\xFF" "abc"), (Pieces{"\xFF", "abc"}));
  EXPECT_EQ(gpt2_pretokenize(" \xFF\xFE!x"), (Pieces{" \xFF\xFE!", "x"}));
  EXPECT_EQ(gpt2_pretokenize("ab\xE4\xB8" "cd"), (Pieces{"ab", "\xE4\xB8", "cd"}));
  EXPECT_EQ(gpt2_pretokenize("\xE4\xB8"), (Pieces{"\xE4\xB8"}));
  std::string all;
  for (int b = 0; b < 256; ++b) all += static_cast<char>(b);
  std::string joined;
  for (const std::string& p : gpt2_pretokenize(all)) joined += p;
  EXPECT_EQ(joined, all);
}

}  // namespace
}  // namespace distllm
