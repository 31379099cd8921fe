// tokenizer.json: the forms Hugging Face writes, and a clear error for everything
// else (the file and the field named).
#include <gtest/gtest.h>

#include "distllm/tokenizer/byte_level.h"
#include "distllm/tokenizer/tokenizer.h"
#include "test_util.h"
#include "tiny_tokenizer.h"

namespace distllm {
namespace {

using nlohmann::json;
using test::added_token;
using test::expect_error;
using test::tiny_tokenizer_json;
using Ids = std::vector<int32_t>;

json hello_json() {
  // 256 bytes, then "he" 256, "ll" 257, "hell" 258, "hello" 259, " w" 260.
  return tiny_tokenizer_json({"he", "ll", "hell", "hello", " w"},
                             {{"h", "e"}, {"l", "l"}, {"he", "ll"}, {"hell", "o"}, {" ", "w"}});
}

Tokenizer load(const json& j) { return Tokenizer::from_json(j.dump(), "tok.json"); }

void expect_load_error(const json& j, const std::string& message) {
  expect_error([&] { load(j); }, message);
}

TEST(TokenizerJson, MergesInEitherForm) {
  json strings = hello_json();
  json pairs = strings;
  for (json& m : pairs["model"]["merges"]) {
    std::string s = m;
    m = json::array({s.substr(0, s.find(' ')), s.substr(s.find(' ') + 1)});
  }
  Ids want{259, 260, 'o', 'r', 'l', 'd'};
  EXPECT_EQ(load(strings).encode("hello world"), want);
  EXPECT_EQ(load(pairs).encode("hello world"), want);
  EXPECT_EQ(load(pairs).to_json(), load(strings).to_json());
}

// A merge of tokens that contain spaces can only be written in the pair form.
TEST(TokenizerJson, PairFormWrittenWhenATokenHasASpace) {
  json j = tiny_tokenizer_json({}, {});
  j["model"]["vocab"]["a b"] = 256;  // not byte-level (a raw space), but a valid vocab key
  j["model"]["vocab"]["a bc"] = 257;
  j["model"]["merges"] = json::array({json::array({"a b", "c"})});
  Tokenizer t = load(j);
  json written = json::parse(t.to_json());
  EXPECT_EQ(written["model"]["merges"][0], json::array({"a b", "c"}));
  EXPECT_EQ(load(written).to_json(), t.to_json());
}

TEST(TokenizerJson, SequenceOfSplitAndByteLevel) {
  json j = hello_json();
  j["pre_tokenizer"] = json::parse(R"({"type": "Sequence", "pretokenizers": [
      {"type": "Split", "pattern": {"Regex": "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"},
       "behavior": "Isolated", "invert": false},
      {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false}]})");
  Tokenizer t = load(j);
  EXPECT_EQ(t.encode("hello world  hello"), load(hello_json()).encode("hello world  hello"));
  EXPECT_EQ(json::parse(t.to_json())["pre_tokenizer"]["type"], "Sequence");
  EXPECT_EQ(load(json::parse(t.to_json())).to_json(), t.to_json());
}

TEST(TokenizerJson, AddPrefixSpace) {
  json j = hello_json();
  j["pre_tokenizer"]["add_prefix_space"] = true;
  j["added_tokens"] = json::array({added_token(261, "<|sep|>", true)});
  Tokenizer t = load(j);
  // "hello" is encoded as " hello"; each stretch between added tokens gets its space.
  EXPECT_EQ(t.encode("hello"), (Ids{' ', 259}));
  EXPECT_EQ(t.encode(" hello"), (Ids{' ', 259}));
  EXPECT_EQ(t.encode("hello<|sep|>hello"), (Ids{' ', 259, 261, ' ', 259}));
  EXPECT_EQ(t.decode(t.encode("hello")), " hello");
}

TEST(TokenizerJson, UseRegexFalseKeepsTheTextWhole) {
  json j = hello_json();
  j["pre_tokenizer"]["use_regex"] = false;
  // " w" merges across what the pattern would split ("hello", " world").
  EXPECT_EQ(load(j).encode("hello world"), (Ids{259, 260, 'o', 'r', 'l', 'd'}));
  EXPECT_EQ(load(j).encode("o world"), (Ids{'o', 260, 'o', 'r', 'l', 'd'}));
}

TEST(TokenizerJson, AddedTokens) {
  json j = hello_json();
  j["added_tokens"] = json::array({added_token(261, "<s>", true), added_token(262, "[name]", false),
                                   added_token(263, "<s>x", true)});
  Tokenizer t = load(j);
  EXPECT_EQ(t.vocab_size(), 264);
  // Longest match at the leftmost position.
  EXPECT_EQ(t.encode("<s>hello<s>x[name]"), (Ids{261, 259, 263, 262}));
  // Special tokens become text; other added tokens still match.
  Ids plain = t.encode("<s>[name]", /*allow_special=*/false);
  EXPECT_EQ(plain.back(), 262);
  EXPECT_EQ(t.decode(plain), "<s>[name]");
  EXPECT_TRUE(t.is_special(261));
  EXPECT_FALSE(t.is_special(262));
  EXPECT_EQ(t.token_to_id("[name]"), 262);
  EXPECT_EQ(t.bos_token_id(), 261);
  EXPECT_EQ(t.eos_token_id(), std::nullopt);
  EXPECT_EQ(t.decode(t.encode("a<s>b"), /*skip_special=*/true), "ab");
}

TEST(TokenizerJson, AddedTokenStripsWhiteSpace) {
  json j = hello_json();
  json left = added_token(261, "<L>", true), right = added_token(262, "<R>", true);
  left["lstrip"] = true;
  right["rstrip"] = true;
  j["added_tokens"] = json::array({left, right});
  Tokenizer t = load(j);
  EXPECT_EQ(t.encode("hello  \n<L>hello"), (Ids{259, 261, 259}));
  EXPECT_EQ(t.encode("hello<R> \t hello"), (Ids{259, 262, 259}));
  EXPECT_EQ(t.encode("hello <R>"), (Ids{259, ' ', 262}));
}

TEST(TokenizerJson, EosAndBosFromTemplate) {
  json j = hello_json();
  j["added_tokens"] = json::array({added_token(261, "<|begin|>", true), added_token(262, "</s>", true)});
  j["post_processor"] = json::parse(R"({"type": "TemplateProcessing",
      "single": [{"SpecialToken": {"id": "<|begin|>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
      "pair": [], "special_tokens": {}})");
  Tokenizer t = load(j);
  EXPECT_EQ(t.bos_token_id(), 261);
  EXPECT_EQ(t.eos_token_id(), 262);
  // Templates are kept in the file but never applied by encode().
  EXPECT_EQ(t.encode("hello"), (Ids{259}));
  EXPECT_EQ(json::parse(t.to_json())["post_processor"]["type"], "TemplateProcessing");
}

TEST(TokenizerJson, IgnoreMergesTakesWholeVocabTokens) {
  // "hlo" is a vocab token no merge builds.
  json j = tiny_tokenizer_json({"hlo"}, {});
  EXPECT_EQ(load(j).encode("hlo"), (Ids{'h', 'l', 'o'}));
  j["model"]["ignore_merges"] = true;
  EXPECT_EQ(load(j).encode("hlo"), (Ids{256}));
  EXPECT_EQ(load(json::parse(load(j).to_json())).encode("hlo"), (Ids{256}));
}

TEST(TokenizerJson, MissingByteTokens) {
  json j = hello_json();
  j["model"]["vocab"].erase("z");
  j["model"]["vocab"]["<unk>"] = 'z';
  EXPECT_EQ(load(j).encode("h"), (Ids{'h'}));
  expect_error([&] { load(j).encode("zz"); },
               "tok.json: cannot encode byte 0x7A: the vocab has no token for it and no unk_token");
  j["model"]["unk_token"] = "<unk>";
  EXPECT_EQ(load(j).encode("zz"), (Ids{'z', 'z'}));
  j["model"]["fuse_unk"] = true;
  EXPECT_EQ(load(j).encode("zzhzz"), (Ids{'z', 'h', 'z'}));
}

TEST(TokenizerJson, MalformedDocuments) {
  expect_error([] { Tokenizer::from_json("{\"model\": ", "tok.json"); },
               "tok.json: not valid JSON: parse error at line 1, column 11: syntax error while parsing value - "
               "unexpected end of input; expected '[', '{', or a literal");
  expect_error([] { Tokenizer::from_json("{\"a\": \"\xFF\"}", "tok.json"); },
               "tok.json: not UTF-8 (byte 0xFF at offset 7)");
  expect_error([] { Tokenizer::from_json("[1, 2]", "tok.json"); }, "tok.json: top level: expected an object, got an array");
  expect_error([] { Tokenizer::from_json(std::string(300, '[') + std::string(300, ']'), "tok.json"); },
               "tok.json: JSON nested deeper than 256 levels");
  expect_error([] { Tokenizer::from_json("{}", "tok.json"); }, "tok.json: model: missing");
  expect_error([] { Tokenizer::from_file("/nonexistent/tokenizer.json"); },
               "cannot open /nonexistent/tokenizer.json: No such file or directory");
}

// What distllm still refuses, each by name. (Normalizers, other split patterns, null
// pre-tokenizers, byte_fallback, continuing_subword_prefix and single_word, refused
// here before, are read now: pipeline_test.cpp and real_tokenizers_test.cpp.)
TEST(TokenizerJson, UnsupportedParts) {
  json j = hello_json();
  j["model"]["type"] = "WordPiece";
  expect_load_error(j, "tok.json: model.type: 'WordPiece' is not supported (only BPE)");
  j = hello_json();
  j["normalizer"] = {{"type", "Precompiled"}, {"precompiled_charsmap", "AAAA"}};
  expect_load_error(j, "tok.json: normalizer.type: 'Precompiled' is not supported (supported: NFC, NFD, NFKC, NFKD, "
                       "Lowercase, Strip, StripAccents, Replace, Prepend, Append, Sequence)");
  j["normalizer"] = {{"type", "Sequence"}, {"normalizers", json::array({{{"type", "NFC"}}, {{"type", "BertNormalizer"}}})}};
  expect_load_error(j, "tok.json: normalizer.normalizers[1].type: 'BertNormalizer' is not supported (supported: NFC, NFD, "
                       "NFKC, NFKD, Lowercase, Strip, StripAccents, Replace, Prepend, Append, Sequence)");
  j = hello_json();
  j["pre_tokenizer"] = {{"type", "UnicodeScripts"}};
  expect_load_error(j, "tok.json: pre_tokenizer.type: 'UnicodeScripts' is not supported (supported: ByteLevel, Split, "
                       "Metaspace, Digits, Whitespace, WhitespaceSplit, Punctuation, CharDelimiterSplit, "
                       "BertPreTokenizer, Sequence)");
  j = hello_json();
  j["pre_tokenizer"] = json::parse(R"({"type": "Sequence", "pretokenizers": [
      {"type": "Split", "pattern": {"Regex": "(\\p{L}+"}, "behavior": "Isolated", "invert": false},
      {"type": "ByteLevel", "add_prefix_space": false}]})");
  expect_load_error(j, "tok.json: pre_tokenizer.pretokenizers[0].pattern.Regex: the regular expression does not "
                       "compile: missing closing parenthesis (at offset 7 of '(\\p{L}+')");
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {{"Regex", "[^\\S]"}};
  expect_load_error(j, "tok.json: pre_tokenizer.pretokenizers[0].pattern.Regex: \\S inside a character class is not "
                       "supported");
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {{"Regex", "x"}};
  j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Sideways";
  expect_load_error(j, "tok.json: pre_tokenizer.pretokenizers[0].behavior: unknown behavior 'Sideways' (expected "
                       "Removed, Isolated, MergedWithPrevious, MergedWithNext or Contiguous)");
  j = hello_json();
  j["decoder"] = {{"type", "WordPiece"}};
  expect_load_error(j, "tok.json: decoder.type: 'WordPiece' is not supported (supported: ByteLevel, Metaspace, "
                       "ByteFallback, Fuse, Strip, Replace, BPEDecoder, Sequence)");
  j = hello_json();
  j["post_processor"] = {{"type", "Unknown"}};
  expect_load_error(j, "tok.json: post_processor.type: 'Unknown' is not supported (supported: TemplateProcessing, "
                       "BertProcessing, RobertaProcessing, ByteLevel, Sequence)");
  j = hello_json();
  j["model"]["dropout"] = 0.1;
  expect_load_error(j, "tok.json: model.dropout: BPE dropout is not supported (must be null)");
}

// A field distllm does not know is refused by name, never silently ignored.
TEST(TokenizerJson, UnknownFieldsAreRefused) {
  json j = hello_json();
  j["model"]["scores"] = json::array();
  expect_load_error(j, "tok.json: model.scores: is not a field distllm knows here (known: type, dropout, unk_token, "
                       "continuing_subword_prefix, end_of_word_suffix, fuse_unk, byte_fallback, ignore_merges, vocab, "
                       "merges)");
  j = hello_json();
  j["pre_tokenizers"] = nullptr;  // a typo of pre_tokenizer
  expect_load_error(j, "tok.json: pre_tokenizers: is not a field distllm knows here (known: version, truncation, "
                       "padding, added_tokens, normalizer, pre_tokenizer, post_processor, decoder, model)");
  j = hello_json();
  json token = added_token(260, " w", false);
  token["strip"] = true;
  j["added_tokens"] = json::array({token});
  expect_load_error(j, "tok.json: added_tokens[0].strip: is not a field distllm knows here (known: id, content, "
                       "special, single_word, lstrip, rstrip, normalized)");
}

TEST(TokenizerJson, WrongTypes) {
  json j = hello_json();
  j["model"]["vocab"]["he"] = "256";
  expect_load_error(j, "tok.json: model.vocab[\"he\"]: expected an integer, got a string");
  j = hello_json();
  j["model"]["vocab"] = json::array();
  expect_load_error(j, "tok.json: model.vocab: expected an object, got an array");
  j = hello_json();
  j["model"]["merges"][1] = 7;
  expect_load_error(j, "tok.json: model.merges[1]: expected a string or a pair, got an integer");
  j["model"]["merges"][1] = "l l l";
  expect_load_error(j, "tok.json: model.merges[1]: expected two tokens separated by one space, got 'l l l'");
  j["model"]["merges"][1] = json::array({"l"});
  expect_load_error(j, "tok.json: model.merges[1]: expected a pair of tokens, got 1 entries");
  j = hello_json();
  j["pre_tokenizer"]["add_prefix_space"] = "no";
  expect_load_error(j, "tok.json: pre_tokenizer.add_prefix_space: expected a boolean, got a string");
  j = hello_json();
  j["added_tokens"] = json::array({{{"id", 1.5}, {"content", "x"}}});
  expect_load_error(j, "tok.json: added_tokens[0].id: expected an integer, got a number");
}

TEST(TokenizerJson, InconsistentVocabularies) {
  json j = hello_json();
  j["model"]["merges"].push_back(bytes_to_byte_level("he") + " " + bytes_to_byte_level("xyz"));
  expect_load_error(j, "tok.json: model.merges[5]: 'xyz' is not in the vocab");
  j = hello_json();
  j["model"]["merges"].push_back("h l");
  expect_load_error(j, "tok.json: model.merges[5]: the merged token 'hl' is not in the vocab");
  j = hello_json();
  j["model"]["vocab"]["ll"] = 256;
  expect_load_error(j, "tok.json: model.vocab: id 256 is used by both 'he' and 'll'");
  j = hello_json();
  j["model"]["vocab"]["ll"] = 900;
  expect_load_error(j, "tok.json: model.vocab: token 'll' has id 900, but the file defines only 261 tokens");
  j = hello_json();
  j["model"]["vocab"]["ll"] = -1;
  expect_load_error(j, "tok.json: model.vocab: token 'll' has id -1, outside [0, 2^31-1)");
  j = hello_json();
  j["model"]["vocab"]["ll"] = 261;
  j["model"]["merges"] = json::array();
  expect_load_error(j, "tok.json: model.vocab: token 'll' has id 261, but the file defines only 261 tokens");
  // An added token that repeats a vocab entry counts once: 257 is left without a token.
  j["added_tokens"] = json::array({added_token(259, "hello", true)});
  expect_load_error(j, "tok.json: no token has id 257 (ids must run from 0 to 261 without gaps)");
  j = hello_json();
  j["added_tokens"] = json::array({added_token(259, "<s>", true)});
  expect_load_error(j, "tok.json: added_tokens[0]: id 259 is the vocab token 'hello', not '<s>'");
  j["added_tokens"] = json::array({added_token(261, "hello", true)});
  expect_load_error(j, "tok.json: added_tokens[0]: 'hello' has id 261 here but id 259 in the vocab");
  j["added_tokens"] = json::array({added_token(261, "<s>", true), added_token(261, "</s>", true)});
  expect_load_error(j, "tok.json: added_tokens[1]: id 261 is already used by added token '<s>'");
  j["added_tokens"] = json::array({added_token(261, "<s>", true), added_token(262, "<s>", true)});
  expect_load_error(j, "tok.json: added_tokens[1]: '<s>' is already tok.json: added_tokens[0]");
  j["added_tokens"] = json::array({added_token(261, "", true)});
  expect_load_error(j, "tok.json: added_tokens[0]: content is empty");
  j = hello_json();
  j["model"]["unk_token"] = "<unk>";
  expect_load_error(j, "tok.json: model.unk_token '<unk>' is not in the vocab");
}

TEST(Gpt2Files, Errors) {
  std::string dir = test::scratch_dir("gpt2_files");
  test::write_text_file(dir + "/encoder.json", R"({"a": 0, "b": 1, "ab": 2})");
  test::write_text_file(dir + "/vocab.bpe", "#version: 0.2\na b\n");
  EXPECT_EQ(Tokenizer::from_gpt2_files(dir + "/encoder.json", dir + "/vocab.bpe").encode("ab"), (Ids{2}));
  test::write_text_file(dir + "/vocab.bpe", "#version: 0.2\na b\na b c\n");
  expect_error([&] { Tokenizer::from_gpt2_files(dir + "/encoder.json", dir + "/vocab.bpe"); },
               dir + "/vocab.bpe: line 3: expected two tokens separated by a space, got 'a b c'");
  test::write_text_file(dir + "/vocab.bpe", "#version: 0.2\na c\n");
  expect_error([&] { Tokenizer::from_gpt2_files(dir + "/encoder.json", dir + "/vocab.bpe"); },
               dir + "/vocab.bpe: line 2: 'c' is not in the vocab");
  test::write_text_file(dir + "/encoder.json", R"(["a"])");
  expect_error([&] { Tokenizer::from_gpt2_files(dir + "/encoder.json", dir + "/vocab.bpe"); },
               dir + "/encoder.json: expected a JSON object of token -> id");
  test::write_text_file(dir + "/encoder.json", R"({"a": 0, "b": 0})");
  expect_error([&] { Tokenizer::from_gpt2_files(dir + "/encoder.json", dir + "/vocab.bpe"); },
               dir + "/encoder.json: id 0 is used by both 'a' and 'b'");
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace distllm

namespace distllm {
namespace {

// Inputs on which the fuzz target (fuzz/fuzz_tokenizer_json.cpp) stopped. Both were
// mistakes in the target's expectations, not in the library; they stay as tests of
// the behaviour it had wrong.
std::string fuzz_input(const std::string& name) {
  return test::read_text_file(DISTLLM_SOURCE_DIR "/fuzz/corpus/fuzz_tokenizer_json/" + name);
}

// The vocab's key for byte 's' is "s " (unreachable), so text with an 's' cannot be
// encoded; the special token "</s>" still can, unless it is encoded as text.
TEST(FuzzRegression, SpecialTokenWhoseBytesHaveNoTokens) {
  Tokenizer t = Tokenizer::from_json(fuzz_input("regress_special_token_without_byte_tokens.json"), "fuzz.json");
  EXPECT_EQ(t.encode("<s>hello</s>"), (std::vector<int32_t>{262, 259, 263}));
  test::expect_error([&] { t.encode("</s>", /*allow_special=*/false); },
                     "fuzz.json: cannot encode byte 0x73: the vocab has no token for it and no unk_token");
}

// With add_prefix_space, decode(encode(x)) is " " + x, not x.
TEST(FuzzRegression, PrefixSpaceIsPartOfTheRoundTrip) {
  Tokenizer t = Tokenizer::from_json(fuzz_input("regress_prefix_space_round_trip.json"), "fuzz.json");
  EXPECT_EQ(t.decode(t.encode("Hello world, it's 2024!")), " Hello world, it's 2024!");
  EXPECT_EQ(t.decode(t.encode(" x")), " x");
}

}  // namespace
}  // namespace distllm
