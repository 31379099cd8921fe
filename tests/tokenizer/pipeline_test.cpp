// The parts of the tokenizer.json pipeline one by one: regular expressions, splits,
// normalizers, pre-tokenizers and decoders, on the examples Hugging Face documents.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "distllm/tokenizer/decoder.h"
#include "distllm/tokenizer/normalizer.h"
#include "distllm/tokenizer/pre_tokenizer_chain.h"
#include "distllm/tokenizer/regex.h"
#include "distllm/tokenizer/split.h"
#include "test_util.h"

namespace distllm {
namespace {

using nlohmann::json;
using Strings = std::vector<std::string>;

std::vector<std::pair<size_t, size_t>> matches(const std::string& pattern, const std::string& text) {
  Regex re(pattern, "test");
  std::vector<MatchSpan> found;
  re.find_all(text, found);
  std::vector<std::pair<size_t, size_t>> out;
  for (const MatchSpan& m : found) out.emplace_back(m.begin, m.end);
  return out;
}

using Spans = std::vector<std::pair<size_t, size_t>>;

TEST(Regex, WhiteSpaceIsOniguruma) {
  // \s is White_Space: U+0085 and U+3000 are spaces, U+FEFF is not (JavaScript's \s
  // would say the opposite for both U+0085 and U+FEFF).
  EXPECT_EQ(matches("\\s+", "a\xC2\x85" "b\xEF\xBB\xBF" "c\xE3\x80\x80" "d"), (Spans{{1, 3}, {8, 11}}));
  EXPECT_EQ(matches("\\S+", "a\xC2\x85" "b"), (Spans{{0, 1}, {3, 4}}));
  EXPECT_EQ(matches("[^\\s\\p{L}]+", "x\xEF\xBB\xBF!\t"), (Spans{{1, 5}}));
  EXPECT_EQ(Regex::translate("\\u0041[\\s]", "t"),
            "\\x{0041}[\\t-\\r\\x{20}\\x{85}\\x{a0}\\x{1680}\\x{2000}-\\x{200a}\\x{2028}\\x{2029}\\x{202f}\\x{205f}\\x{3000}]");
  // Escapes and character classes are left alone.
  EXPECT_EQ(Regex::translate("\\\\s[]s]\\[s", "t"), "\\\\s[]s]\\[s");
}

TEST(Regex, IteratesAsTheOnigCrate) {
  EXPECT_EQ(matches("a*", "baac"), (Spans{{0, 0}, {1, 3}, {4, 4}}));
  EXPECT_EQ(matches("(?i:'s|'t)", "IT'S it's"), (Spans{{2, 4}, {7, 9}}));
  EXPECT_EQ(matches("\\p{N}{1,3}", "12345"), (Spans{{0, 3}, {3, 5}}));
  EXPECT_EQ(matches("\\s+(?!\\S)|\\s+", "a   b"), (Spans{{1, 3}, {3, 4}}));
  EXPECT_EQ(matches("\\u00e9", "caf\xC3\xA9"), (Spans{{3, 5}}));
}

TEST(Regex, IllFormedBytesMatchAsReplacementCharacters) {
  EXPECT_EQ(matches("\\p{L}+", "ab\xFF" "cd"), (Spans{{0, 2}, {3, 5}}));
  EXPECT_EQ(matches("[^\\s\\p{L}]+", "a\xFF\xFE!b"), (Spans{{1, 4}}));
  EXPECT_EQ(matches("\\x{FFFD}", "\xE2\x82"), (Spans{{0, 1}, {1, 2}}));
}

TEST(Regex, ErrorsNameThePattern) {
  // (PCRE2 has written this message the same way since its first release.)
  test::expect_error([] { Regex("a(b", "tok.json: x"); },
                     "tok.json: x: the regular expression does not compile: missing closing parenthesis "
                     "(at offset 3 of 'a(b')");
  // A pattern that backtracks without end stops with an error instead of hanging.
  Regex evil("(a+)+$", "t");
  std::vector<MatchSpan> out;
  test::expect_error([&] { evil.find_all(std::string(40, 'a') + "b", out); },
                     "regular expression '(a+)+$': matching failed: match limit exceeded");
}

Strings split(const std::string& text, const std::string& delimiter, SplitBehavior behavior, bool invert = false) {
  auto pattern = SplitPattern::literal(delimiter);
  std::vector<MatchSpan> found, pieces;
  pattern->find(text, found);
  split_by_matches(text, found, invert, behavior, pieces);
  Strings out;
  for (const MatchSpan& p : pieces) out.push_back(text.substr(p.begin, p.end - p.begin));
  return out;
}

TEST(Split, Behaviours) {
  // Hugging Face's documentation of SplitDelimiterBehavior.
  const std::string s = "the-final--countdown";
  EXPECT_EQ(split(s, "-", SplitBehavior::kRemoved), (Strings{"the", "final", "countdown"}));
  EXPECT_EQ(split(s, "-", SplitBehavior::kIsolated), (Strings{"the", "-", "final", "-", "-", "countdown"}));
  EXPECT_EQ(split(s, "-", SplitBehavior::kMergedWithPrevious), (Strings{"the-", "final-", "-", "countdown"}));
  EXPECT_EQ(split(s, "-", SplitBehavior::kMergedWithNext), (Strings{"the", "-final", "-", "-countdown"}));
  EXPECT_EQ(split(s, "-", SplitBehavior::kContiguous), (Strings{"the", "-", "final", "--", "countdown"}));
  EXPECT_EQ(split(s, "-", SplitBehavior::kRemoved, /*invert=*/true), (Strings{"-", "-", "-"}));
  EXPECT_EQ(split("", "-", SplitBehavior::kIsolated), Strings{});
}

std::string normalize(const json& node, const std::string& text) {
  JsonReader r("tok.json");
  auto n = Normalizer::parse(r, node, "normalizer");
  if (!n) return text;
  std::string out;
  n->normalize(text, out);
  return out;
}

TEST(Normalizer, UnicodeForms) {
  EXPECT_EQ(normalize({{"type", "NFC"}}, "Cafe\xCC\x81 \xE2\x84\xAB"), "Caf\xC3\xA9 \xC3\x85");
  EXPECT_EQ(normalize({{"type", "NFD"}}, "Caf\xC3\xA9"), "Cafe\xCC\x81");
  EXPECT_EQ(normalize({{"type", "NFKC"}}, "\xEF\xAC\x81 \xE2\x91\xA0 \xC2\xBD"), "fi 1 1\xE2\x81\x84" "2");
  EXPECT_EQ(normalize({{"type", "NFKD"}}, "\xC3\xA9\xEF\xAC\x81"), "e\xCC\x81" "fi");
  // An ill-formed byte stays where it is, and nothing composes across it.
  EXPECT_EQ(normalize({{"type", "NFC"}}, "e\xFF\xCC\x81"), "e\xFF\xCC\x81");
  EXPECT_EQ(normalize({{"type", "NFC"}}, "plain ASCII"), "plain ASCII");
}

TEST(Normalizer, LowercaseStripReplacePrepend) {
  EXPECT_EQ(normalize({{"type", "Lowercase"}}, "HELLO \xCE\xA3\xCE\x91\xCE\xA3 \xC4\xB0"),
            "hello \xCF\x83\xCE\xB1\xCF\x82 i\xCC\x87");  // final sigma; İ -> i + U+0307
  EXPECT_EQ(normalize({{"type", "Strip"}, {"strip_left", true}, {"strip_right", true}}, " \xE3\x80\x80 x y \n"), "x y");
  EXPECT_EQ(normalize({{"type", "Strip"}, {"strip_left", false}, {"strip_right", true}}, "  x  "), "  x");
  EXPECT_EQ(normalize(json::parse(R"({"type": "Sequence", "normalizers": [{"type": "NFD"}, {"type": "StripAccents"}]})"),
                      "caf\xC3\xA9 na\xC3\xAFve"),
            "cafe naive");
  EXPECT_EQ(normalize(json::parse(R"({"type": "Replace", "pattern": {"String": " "}, "content": "▁"})"), " a b"),
            "▁a▁b");
  EXPECT_EQ(normalize(json::parse(R"({"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": " "})"), "a    b  c"),
            "a b c");
  json prepend = json::parse(R"({"type": "Prepend", "prepend": "▁"})");
  EXPECT_EQ(normalize(prepend, "x"), "▁x");
  EXPECT_EQ(normalize(prepend, ""), "");
  EXPECT_EQ(normalize(json::parse(R"({"type": "Append", "append": "</w>"})"), "x"), "x</w>");
  EXPECT_EQ(normalize(json::parse(R"({"type": "Sequence", "normalizers": []})"), "x"), "x");
}

struct Collect : PieceSink {
  Strings pieces;
  void piece(std::string_view p) override { pieces.emplace_back(p); }
};

Strings pre_tokenize(const json& node, const std::string& text, PieceFlags flags = {}) {
  JsonReader r("tok.json");
  auto chain = PreTokenizer::parse(r, node, "pre_tokenizer");
  Collect c;
  chain->run(text, flags, c);
  return c.pieces;
}

TEST(PreTokenizer, Metaspace) {
  json always = json::parse(R"({"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": true})");
  EXPECT_EQ(pre_tokenize(always, "Hey friend!"), (Strings{"▁Hey", "▁friend!"}));
  EXPECT_EQ(pre_tokenize(always, "Hey   friend!"), (Strings{"▁Hey", "▁", "▁", "▁friend!"}));
  EXPECT_EQ(pre_tokenize(always, " x"), (Strings{"▁x"}));
  json first = always;
  first["prepend_scheme"] = "first";
  EXPECT_EQ(pre_tokenize(first, "Hey"), (Strings{"▁Hey"}));
  EXPECT_EQ(pre_tokenize(first, "Hey", PieceFlags{false, true}), (Strings{"Hey"}));  // after an added token
  json never = json::parse(R"({"type": "Metaspace", "replacement": "_", "prepend_scheme": "never", "split": false})");
  EXPECT_EQ(pre_tokenize(never, "a b  c"), (Strings{"a_b__c"}));
  json legacy = json::parse(R"({"type": "Metaspace", "replacement": "▁", "add_prefix_space": false})");
  EXPECT_EQ(pre_tokenize(legacy, "a b"), (Strings{"a", "▁b"}));
}

TEST(PreTokenizer, SplittersOfHuggingFacesDocumentation) {
  EXPECT_EQ(pre_tokenize({{"type", "Digits"}, {"individual_digits", true}}, "Call 123 please"),
            (Strings{"Call ", "1", "2", "3", " please"}));
  EXPECT_EQ(pre_tokenize({{"type", "Digits"}, {"individual_digits", false}}, "Call 123 please"),
            (Strings{"Call ", "123", " please"}));
  EXPECT_EQ(pre_tokenize({{"type", "Whitespace"}}, "Hey man!  How's it going?"),
            (Strings{"Hey", "man", "!", "How", "'", "s", "it", "going", "?"}));
  EXPECT_EQ(pre_tokenize({{"type", "WhitespaceSplit"}}, "Hey man!\t x"), (Strings{"Hey", "man!", "x"}));
  EXPECT_EQ(pre_tokenize({{"type", "Punctuation"}}, "Hey friend!     How are you?!?"),
            (Strings{"Hey friend", "!", "     How are you", "?", "!", "?"}));
  EXPECT_EQ(pre_tokenize({{"type", "BertPreTokenizer"}}, "Hey friend!     How are you?!?"),
            (Strings{"Hey", "friend", "!", "How", "are", "you", "?", "!", "?"}));
  EXPECT_EQ(pre_tokenize({{"type", "CharDelimiterSplit"}, {"delimiter", "-"}}, "a-b--c"), (Strings{"a", "b", "c"}));
  EXPECT_EQ(pre_tokenize(json::parse(R"({"type": "Split", "pattern": {"Regex": "\\w+"}, "behavior": "Removed",
                                         "invert": true})"),
                         "hello, world"),
            (Strings{"hello", "world"}));
  // Each step works on the previous step's pieces.
  EXPECT_EQ(pre_tokenize(json::parse(R"({"type": "Sequence", "pretokenizers": [{"type": "WhitespaceSplit"},
                                         {"type": "Digits", "individual_digits": true}]})"),
                         "ab12 c3"),
            (Strings{"ab", "1", "2", "c", "3"}));
}

TEST(PreTokenizer, ByteLevelLeavesBytesToTheModel) {
  JsonReader r("tok.json");
  json bl = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"use_regex", true}};
  EXPECT_TRUE(PreTokenizer::parse(r, bl, "pre_tokenizer")->byte_level_output());
  EXPECT_EQ(pre_tokenize(bl, "Hello world"), (Strings{" Hello", " world"}));
  EXPECT_EQ(pre_tokenize(bl, "x", PieceFlags{false, false}), (Strings{"x"}));  // a chunk of encode_parallel
  bl["add_prefix_space"] = false;
  bl["use_regex"] = false;
  EXPECT_EQ(pre_tokenize(bl, "Hello world"), (Strings{"Hello world"}));
  // Before another step, ByteLevel writes its characters (" " is "Ġ").
  json seq = json::parse(R"({"type": "Sequence", "pretokenizers": [
      {"type": "ByteLevel", "add_prefix_space": false, "use_regex": false}, {"type": "WhitespaceSplit"}]})");
  EXPECT_EQ(pre_tokenize(seq, "a b"), (Strings{"a\xC4\xA0" "b"}));
  EXPECT_FALSE(PreTokenizer::parse(r, seq, "pre_tokenizer")->byte_level_output());
}

std::string decode(const json& node, const Strings& tokens) {
  JsonReader r("tok.json");
  auto d = Decoder::parse(r, node, "decoder");
  std::vector<std::string_view> views(tokens.begin(), tokens.end());
  return d->decode(views);
}

const char* kLlama2Decoder = R"({"type": "Sequence", "decoders": [
    {"type": "Replace", "pattern": {"String": "▁"}, "content": " "}, {"type": "ByteFallback"}, {"type": "Fuse"},
    {"type": "Strip", "content": " ", "start": 1, "stop": 0}]})";

TEST(Decoder, Chains) {
  json meta = json::parse(R"({"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always"})");
  EXPECT_EQ(decode(meta, {"▁Hey", "▁friend!"}), "Hey friend!");
  EXPECT_EQ(decode(meta, {"▁▁x", "▁▁"}), "x  ");  // the first token loses every "▁"
  meta["prepend_scheme"] = "never";
  EXPECT_EQ(decode(meta, {"▁Hey", "▁friend!"}), " Hey friend!");
  EXPECT_EQ(decode({{"type", "ByteFallback"}}, {"<0xE2>", "<0x82>", "<0xAC>", "x", "<0x41>"}), "\xE2\x82\xAC" "xA");
  EXPECT_EQ(decode({{"type", "ByteFallback"}}, {"<0xE2>", "y"}), "\xE2y");  // bytes are kept as they are
  EXPECT_EQ(decode(json::parse(kLlama2Decoder), {"▁Hello", "▁", "<0xF0>", "<0x9F>", "<0xA6>", "<0x99>", "▁x"}),
            "Hello \xF0\x9F\xA6\x99 x");
  EXPECT_EQ(decode(json::parse(kLlama2Decoder), {"<s>", "▁Hi"}), "<s> Hi");
  EXPECT_EQ(decode({{"type", "Strip"}, {"content", "x"}, {"start", 1}, {"stop", 2}}, {"xxaxx", "ax", "xb"}), "xaab");
  EXPECT_EQ(decode({{"type", "BPEDecoder"}, {"suffix", "</w>"}}, {"hel", "lo</w>", "world</w>"}), "hello world");
  EXPECT_EQ(decode(nullptr, {"a", "b"}), "a b");
  EXPECT_EQ(decode({{"type", "ByteLevel"}}, {"Hello", "\xC4\xA0world", "<|im_end|>"}), "Hello world<|im_end|>");
  EXPECT_EQ(decode(json::parse(R"({"type": "Replace", "pattern": {"Regex": "a+"}, "content": "b"})"), {"caaat"}), "cbt");
}

TEST(Decoder, TokenByTokenForm) {
  JsonReader r("tok.json");
  auto llama2 = Decoder::parse(r, json::parse(kLlama2Decoder), "decoder");
  EXPECT_TRUE(llama2->by_token());
  EXPECT_EQ(llama2->ends().strip, " ");
  EXPECT_EQ(llama2->ends().start, 1u);
  EXPECT_EQ(llama2->token_text("▁Hello", /*first=*/false), " Hello");
  EXPECT_EQ(llama2->token_text("<0xE2>", false), "\xE2");
  auto meta = Decoder::parse(r, json::parse(R"({"type": "Metaspace"})"), "decoder");
  EXPECT_EQ(meta->token_text("▁Hello", true), "Hello");
  EXPECT_EQ(meta->token_text("▁Hello", false), " Hello");
  EXPECT_FALSE(Decoder::parse(r, {{"type", "BPEDecoder"}}, "decoder")->by_token());
  EXPECT_FALSE(Decoder::parse(r, json::parse(R"({"type": "Sequence", "decoders": [{"type": "Fuse"},
      {"type": "Replace", "pattern": {"String": "ab"}, "content": "c"}]})"), "decoder")->by_token());
}

}  // namespace
}  // namespace distllm
