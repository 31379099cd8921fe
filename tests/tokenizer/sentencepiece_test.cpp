// SentencePiece-style BPE (Llama 2, Mistral, Gemma) on a small hand-made vocabulary:
// byte fallback, unknown tokens, subword prefixes and suffixes, the Llama 2 pipeline
// end to end, added-token flags, special tokens around a text, tokenizer_config.json
// and streaming of byte-fallback tokens.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "distllm/base/rng.h"
#include "distllm/tokenizer/bpe_model.h"
#include "distllm/tokenizer/utf8.h"
#include "test_util.h"

namespace distllm {
namespace {

using nlohmann::json;
using Ids = std::vector<int32_t>;

// <unk> 0, <s> 1, </s> 2, <0x00>..<0xFF> 3..258, then `extra` from 259 on.
json sp_vocab(const std::vector<std::string>& extra) {
  json vocab = json::object();
  vocab["<unk>"] = 0;
  vocab["<s>"] = 1;
  vocab["</s>"] = 2;
  for (int b = 0; b < 256; ++b) vocab[strprintf("<0x%02X>", b)] = 3 + b;
  int id = 259;
  for (const std::string& t : extra) vocab[t] = id++;
  return vocab;
}

constexpr int kFirstExtra = 259;
// 259 ▁, 260 a, 261 b, 262 c, 263 ▁a, 264 ab, 265 ▁ab, 266 ▁▁, 267 é, 268 ▁b
const std::vector<std::string> kExtra = {"▁", "a", "b", "c", "▁a", "ab", "▁ab", "▁▁", "é", "▁b"};
const json kMerges = json::array({"▁ a", "a b", "▁a b", "▁ ▁", "▁ b"});

// The Llama 2 / Mistral tokenizer.json layout.
json llama2_style() {
  return json::parse(R"({
    "version": "1.0",
    "added_tokens": [
      {"id": 0, "content": "<unk>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true},
      {"id": 1, "content": "<s>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true},
      {"id": 2, "content": "</s>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true}],
    "normalizer": {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "▁"},
                   {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]},
    "pre_tokenizer": null,
    "post_processor": {"type": "TemplateProcessing",
      "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
      "pair": [], "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
    "decoder": {"type": "Sequence", "decoders": [
      {"type": "Replace", "pattern": {"String": "▁"}, "content": " "}, {"type": "ByteFallback"}, {"type": "Fuse"},
      {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
    "model": {"type": "BPE", "dropout": null, "unk_token": "<unk>", "continuing_subword_prefix": null,
              "end_of_word_suffix": null, "fuse_unk": true, "byte_fallback": true}})");
}

json llama2_style_with_vocab() {
  json j = llama2_style();
  j["model"]["vocab"] = sp_vocab(kExtra);
  j["model"]["merges"] = kMerges;
  return j;
}

Tokenizer load(const json& j) { return Tokenizer::from_json(j.dump(), "tok.json"); }

TEST(SentencePieceBpe, Llama2Pipeline) {
  Tokenizer t = load(llama2_style_with_vocab());
  // "ab ab" -> "▁ab▁ab" -> ▁ab ▁ab.
  EXPECT_EQ(t.encode("ab ab"), (Ids{265, 265}));
  EXPECT_EQ(t.decode(Ids{265, 265}), "ab ab");
  EXPECT_EQ(t.encode_with_special_tokens("ab"), (Ids{1, 265}));
  EXPECT_EQ(t.bos_token_id(), 1);
  EXPECT_EQ(t.eos_token_id(), 2);
  // Byte fallback: "€" is not in the vocabulary.
  EXPECT_EQ(t.encode("€"), (Ids{259, 3 + 0xE2, 3 + 0x82, 3 + 0xAC}));
  EXPECT_EQ(t.decode(t.encode("a €c")), "a €c");
  EXPECT_EQ(t.token_bytes(3 + 0xE2), "\xE2");
  EXPECT_EQ(t.token_bytes(265), " ab");
  // A character in the vocabulary is not split into bytes.
  EXPECT_EQ(t.encode("é"), (Ids{259, 267}));
  // Each stretch between added tokens gets its own "▁".
  EXPECT_EQ(t.encode("a<s>b"), (Ids{263, 1, 268}));
  EXPECT_EQ(t.encode("a<s>b", /*allow_special=*/false), (Ids{263, 3 + '<', 3 + 's', 3 + '>', 261}));
  EXPECT_EQ(t.decode(Ids{1, 263}), "<s> a");
  EXPECT_EQ(t.decode(Ids{1, 263}, /*skip_special=*/true), "a");
  // Bytes that are not UTF-8 are their own fallback tokens.
  EXPECT_EQ(t.encode("a\xFF"), (Ids{263, 3 + 0xFF}));
  EXPECT_EQ(t.decode(t.encode("a\xFF\xC3")), "a\xFF\xC3");
  // The written file reads back the same.
  Tokenizer again = Tokenizer::from_json(t.to_json(), "again.json");
  EXPECT_EQ(again.to_json(), t.to_json());
  EXPECT_EQ(again.encode("ab €é<s>"), t.encode("ab €é<s>"));
}

TEST(SentencePieceBpe, StreamingByteFallback) {
  Tokenizer t = load(llama2_style_with_vocab());
  IncrementalDecoder stream(t);
  EXPECT_EQ(stream.push(1), "");  // <s>: special
  EXPECT_EQ(stream.push(263), "a");  // the first "▁" of the text is stripped, as decode does
  EXPECT_EQ(stream.push(259), " ");
  EXPECT_EQ(stream.push(3 + 0xE2), "");
  EXPECT_EQ(stream.push(3 + 0x82), "");
  EXPECT_EQ(stream.push(3 + 0xAC), "€");
  EXPECT_EQ(stream.push(3 + 0xF0), "");
  EXPECT_EQ(stream.push(265), "\xEF\xBF\xBD ab");  // a lone lead byte can never complete
  EXPECT_EQ(stream.flush(), "");
  // A text that starts with spaces keeps all but the one stripped: "▁▁" "▁" "▁a" is
  // four spaces and "a", less the first space.
  IncrementalDecoder spaces(t);
  std::string text;
  for (int32_t id : Ids{266, 259, 263}) text += spaces.push(id);
  EXPECT_EQ(text + spaces.flush(), t.decode(Ids{266, 259, 263}));
  EXPECT_EQ(text, "   a");
}

TEST(SentencePieceBpe, UnknownCharacters) {
  json j = llama2_style_with_vocab();
  j["model"]["byte_fallback"] = false;
  EXPECT_EQ(load(j).encode("xyz a"), (Ids{259, 0, 263}));  // fused: one <unk> for "xyz"
  j["model"]["fuse_unk"] = false;
  EXPECT_EQ(load(j).encode("xyz a"), (Ids{259, 0, 0, 0, 263}));
  j["model"]["unk_token"] = nullptr;
  test::expect_error([&] { load(j).encode("x"); },
                     "tok.json: cannot encode U+0078: the vocab has no token for it, no byte_fallback and no unk_token");
}

TEST(SentencePieceBpe, SubwordPrefixAndSuffix) {
  json j = llama2_style();
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = {{"type", "WhitespaceSplit"}};
  j["decoder"] = {{"type", "BPEDecoder"}, {"suffix", "</w>"}};
  j["model"]["byte_fallback"] = false;
  j["model"]["continuing_subword_prefix"] = "##";
  j["model"]["end_of_word_suffix"] = "</w>";
  // a ##b ##c</w> ab ##b</w> ...: merges join "a" + "##b" into "ab".
  j["model"]["vocab"] = sp_vocab({"a", "##b", "##c</w>", "ab", "##b</w>", "abc</w>", "b</w>", "a</w>"});
  j["model"]["merges"] = json::array({"a ##b", "ab ##c</w>"});
  Tokenizer t = load(j);
  EXPECT_EQ(t.encode("abc"), (Ids{kFirstExtra + 5}));
  EXPECT_EQ(t.encode("ab b a"), (Ids{kFirstExtra, kFirstExtra + 4, kFirstExtra + 6, kFirstExtra + 7}));
  EXPECT_EQ(t.decode(t.encode("abc a")), "abc a");
  EXPECT_EQ(load(json::parse(t.to_json())).encode("abc ab"), t.encode("abc ab"));
}

// Cutting a SentencePiece word before "▁" never changes its tokens.
TEST(SentencePieceBpe, PartsEncodeLikeTheWhole) {
  std::unordered_map<std::string, int32_t> vocab;
  json v = sp_vocab({"▁", "a", "b", "x", "▁a", "ab", "▁ab", "▁▁", "x▁", "b▁▁"});
  for (auto it = v.begin(); it != v.end(); ++it) vocab[it.key()] = it.value();
  BpeModelSpec spec;
  spec.merges = {{"▁", "a"}, {"a", "b"}, {"▁a", "b"}, {"▁", "▁"}, {"x", "▁"}, {"b", "▁▁"}};
  spec.merge_where = [](size_t i) { return std::to_string(i); };
  spec.byte_fallback = true;
  spec.unk_token = "<unk>";
  BpeModel model(vocab, spec, "test");
  const char* atoms[] = {"▁", "a", "b", "x", "y", "é"};
  CounterRng rng(3);
  BpeScratch scratch;
  size_t cut = 0;
  for (int n = 0; n < 2000; ++n) {
    std::string word;
    for (uint64_t k = 1 + rng.next_u64() % 12; k > 0; --k) word += atoms[rng.next_u64() % 6];
    Ids whole, parts;
    model.encode(word, false, whole, scratch);
    size_t count = 0;
    model.split_parts(word, [&](std::string_view p) {
      ++count;
      model.encode(p, false, parts, scratch);
    });
    cut += count > 1;
    ASSERT_EQ(parts, whole) << word;
  }
  EXPECT_GT(cut, 500u);  // the cuts happen ("x▁" and "b▁▁" are merged tokens: no cut there)
}

json with_added(json j, const json& token) {
  j["added_tokens"].push_back(token);
  j["model"]["vocab"][token["content"].get<std::string>()] = token["id"];
  return j;
}

json added_token(int id, const std::string& content) {
  return json{{"id", id},         {"content", content}, {"single_word", false}, {"lstrip", false},
              {"rstrip", false}, {"normalized", false}, {"special", false}};
}

TEST(AddedTokens, Flags) {
  json base = llama2_style_with_vocab();
  base["normalizer"] = nullptr;
  // "ba" is not in the vocabulary: the model alone would give b (261), a (260).
  json word = added_token(269, "ba");
  word["single_word"] = true;
  Tokenizer t = load(with_added(base, word));
  // Only where no word character touches it; elsewhere the model spells it out (no
  // normalizer here, so " " is the byte-fallback token <0x20>).
  EXPECT_EQ(t.encode("ba cba bac ba"), (Ids{269, 3 + ' ', 262, 261, 260, 3 + ' ', 261, 260, 262, 3 + ' ', 269}));
  EXPECT_EQ(t.encode("ba_ ba"), (Ids{261, 260, 3 + '_', 3 + ' ', 269}));  // "_" is a word character
  word["single_word"] = false;
  EXPECT_EQ(load(with_added(base, word)).encode("cbac"), (Ids{262, 269, 262}));
  json strip = added_token(269, "<x>");
  strip["lstrip"] = true;
  strip["rstrip"] = true;
  t = load(with_added(base, strip));
  EXPECT_EQ(t.encode("a \xE3\x80\x80<x>\t\nb"), (Ids{260, 269, 261}));  // U+3000 is white space too
  // normalized=true: matched in the normalized text, by its normalized form.
  json lower = base;
  lower["normalizer"] = {{"type", "Lowercase"}};
  json hello = added_token(269, "HeLLo");
  hello["normalized"] = true;
  t = load(with_added(lower, hello));
  EXPECT_EQ(t.encode("xHELLOx"), (Ids{3 + 'x', 269, 3 + 'x'}));
  EXPECT_EQ(t.encode("hello"), (Ids{269}));
}

TEST(SpecialTokensTemplate, PostProcessors) {
  json j = llama2_style_with_vocab();
  j["post_processor"] = json::parse(R"({"type": "Sequence", "processors": [
      {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": false, "use_regex": true},
      {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
        {"Sequence": {"id": "A", "type_id": 0}}, {"SpecialToken": {"id": "</s>", "type_id": 0}}],
       "pair": [], "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]},
                                      "</s>": {"id": "</s>", "ids": [2], "tokens": ["</s>"]}}}]})");
  EXPECT_EQ(load(j).encode_with_special_tokens("a"), (Ids{1, 263, 2}));
  j["post_processor"] = json::parse(R"({"type": "BertProcessing", "sep": ["</s>", 2], "cls": ["<s>", 1]})");
  EXPECT_EQ(load(j).encode_with_special_tokens("a"), (Ids{1, 263, 2}));
  j["post_processor"] = json::parse(R"({"type": "RobertaProcessing", "sep": ["</s>", 1], "cls": ["<s>", 1]})");
  test::expect_error([&] { load(j); }, "tok.json: post_processor.sep: '</s>' has id 2 in the vocabulary, not 1");
  j["post_processor"] = nullptr;
  EXPECT_EQ(load(j).encode_with_special_tokens("a"), (Ids{263}));
}

TEST(TokenizerConfig, BosEosAndTheirPlaces) {
  Tokenizer t = load(llama2_style_with_vocab());
  t.apply_config(R"({"add_bos_token": false, "add_eos_token": true, "bos_token": "<s>",
                     "eos_token": {"__type": "AddedToken", "content": "</s>"}})");
  EXPECT_EQ(t.encode_with_special_tokens("a"), (Ids{263, 2}));
  EXPECT_EQ(t.add_special_tokens(Ids{5}), (Ids{5, 2}));
  EXPECT_EQ(t.eos_token_id(), 2);
  t = load(llama2_style_with_vocab());
  t.apply_config(R"({"eos_token": "<unk>", "model_max_length": 4096})");
  EXPECT_EQ(t.eos_token_id(), 0);
  EXPECT_EQ(t.encode_with_special_tokens("a"), (Ids{1, 263}));  // the file's template stays
  test::expect_error([&] { t.apply_config(R"({"bos_token": "<nope>"})", "cfg.json"); },
                     "cfg.json: bos_token: '<nope>' is not a token of the tokenizer");
  test::expect_error([&] { t.apply_config(R"({"add_bos_token": true, "bos_token": null})", "cfg.json"); },
                     "cfg.json: add_bos_token: true, but there is no bos_token");
  test::expect_error([&] { t.apply_config("{", "cfg.json"); },
                     "cfg.json: not valid JSON: parse error at line 1, column 2: syntax error while parsing object "
                     "key - unexpected end of input; expected string literal");
}

TEST(TokenizerConfig, LoadReadsTheFileBesideTokenizerJson) {
  std::string dir = test::scratch_dir("tokenizer_config");
  test::write_text_file(dir + "/tokenizer.json", llama2_style_with_vocab().dump());
  test::write_text_file(dir + "/tokenizer_config.json", R"({"add_bos_token": false, "eos_token": "<unk>"})");
  for (const std::string& path : {dir, dir + "/tokenizer.json"}) {
    Tokenizer t = Tokenizer::load(path);
    EXPECT_EQ(t.encode_with_special_tokens("a"), (Ids{263})) << path;
    EXPECT_EQ(t.eos_token_id(), 0) << path;
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace distllm
