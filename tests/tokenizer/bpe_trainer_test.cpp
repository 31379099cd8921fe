// The byte-level BPE trainer (bpe_trainer.h): merges worked out by hand on tiny
// corpora, the tokenizer.json it writes (our Tokenizer loads it and round-trips any
// text), and the same ids from transformers.js (@lenml/tokenizers) as from ours.
#include "distllm/tokenizer/bpe_trainer.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "distllm/base/parallel.h"
#include "distllm/tokenizer/utf8.h"
#include "test_util.h"

namespace distllm {
namespace {

using nlohmann::json;
using Merges = std::vector<std::pair<std::string, std::string>>;

BpeTrainerOptions options(int64_t vocab_size, uint64_t min_frequency = 0) {
  BpeTrainerOptions o;
  o.vocab_size = vocab_size;
  o.min_frequency = min_frequency;
  return o;
}

// The initial vocabulary: <|endoftext|> = 0, then the 256 byte symbols by code point
// ('!' = 1 ... 'a' = 65, 'b' = 66 ..., and the shifted ones: 'Ġ' (space) = 221).
TEST(BpeTrainer, InitialVocabulary) {
  TrainedBpe bpe = train_bpe(WordCounts(), options(1000));
  ASSERT_EQ(bpe.tokens.size(), 257u);
  EXPECT_EQ(bpe.num_special, 1u);
  EXPECT_EQ(bpe.tokens[0], "<|endoftext|>");
  EXPECT_EQ(bpe.tokens[1], "!");
  EXPECT_EQ(bpe.tokens[65], "a");
  EXPECT_EQ(bpe.tokens[221], "Ġ");
  EXPECT_EQ(bpe.tokens[256], "\u0143") << "byte 0xAD, the last of the shifted ones";
  EXPECT_TRUE(bpe.merges.empty());
}

// Words {abc: 2, ba: 2}. Pairs: (a,b) 2, (b,c) 2, (b,a) 2, a three-way tie that the
// smallest ids win: (a,b) = (65,66) -> "ab" (257). Now (ab,c) 2 and (b,a) 2 tie:
// ids say (b,a) = (66,65) before (ab,c) = (257,67) -> "ba" (258), where comparing
// the strings would have chosen ("ab","c"). Then (ab,c) -> "abc" (259); no pair is
// left, so the vocabulary stops at 260 of the 1000 asked for.
TEST(BpeTrainer, MergesByCountThenSmallestIds) {
  WordCounts words;
  words.add("abc", 2);
  words.add("ba", 2);
  TrainedBpe bpe = train_bpe(words, options(1000));
  EXPECT_EQ(bpe.merges, (Merges{{"a", "b"}, {"b", "a"}, {"ab", "c"}}));
  ASSERT_EQ(bpe.tokens.size(), 260u);
  EXPECT_EQ(bpe.tokens[257], "ab");
  EXPECT_EQ(bpe.tokens[258], "ba");
  EXPECT_EQ(bpe.tokens[259], "abc");
}

TEST(BpeTrainer, StopsAtVocabSizeAndMinFrequency) {
  WordCounts words;
  words.add("abc", 2);
  words.add("ba", 2);
  words.add("xy", 1);
  EXPECT_EQ(train_bpe(words, options(259)).merges, (Merges{{"a", "b"}, {"b", "a"}}));
  EXPECT_EQ(train_bpe(words, options(1000)).merges, (Merges{{"a", "b"}, {"b", "a"}, {"ab", "c"}, {"x", "y"}}));
  EXPECT_EQ(train_bpe(words, options(1000, 2)).merges, (Merges{{"a", "b"}, {"b", "a"}, {"ab", "c"}}));
}

// A count is per word occurrence: "aaaa" x3 has (a,a) at 3 places = 9, so it beats
// (b,c) 5; merging left to right gives [aa, aa]; then (aa,aa) 3 ("aaaa") before (b,c).
TEST(BpeTrainer, RepeatedSymbolsMergeLeftToRight) {
  WordCounts words;
  words.add("aaaa", 3);
  words.add("bc", 5);
  EXPECT_EQ(train_bpe(words, options(1000)).merges, (Merges{{"a", "a"}, {"b", "c"}, {"aa", "aa"}}));
}

// Text is cut into lines (each keeps its '\n', as Hugging Face's train_from_files
// reads files), then into GPT-2 pieces. Line 1 gives ab, Ġab, Ġabc, Ġbc, Ċ; line 2
// "  y" gives Ġ and Ġy (read as one text with line 1 it would be "\n " and " y").
//   (a,b) 3 -> ab (257);  (Ġ,ab) 2 -> Ġab (258);  then all pairs left occur once:
//   (b,c) = (66,67) is the smallest -> bc (259), which turns (Ġ,b) into (Ġ,bc);
//   then (Ġ,y) = (221,90), (Ġ,bc) = (221,259), (Ġab,c) = (258,67) in id order.
TEST(BpeTrainer, CountsGpt2PiecesLineByLine) {
  WordCounts words;
  words.add_text("ab ab abc bc\n  y");
  EXPECT_EQ(words.total_words(), 7u);
  EXPECT_EQ(words.counts().count("\n"), 1u);
  EXPECT_EQ(words.counts().count(" "), 1u);
  EXPECT_EQ(words.counts().count(" y"), 1u);
  TrainedBpe bpe = train_bpe(words, options(1000));
  EXPECT_EQ(bpe.merges, (Merges{{"a", "b"}, {"Ġ", "ab"}, {"b", "c"}, {"Ġ", "y"}, {"Ġ", "bc"}, {"Ġab", "c"}}));
}

// Counting on many threads gives the counts of one thread.
TEST(BpeTrainer, ParallelCountsMatchSerial) {
  std::string text;
  for (int i = 0; i < 20000; ++i) text += "line " + std::to_string(i % 97) + " of  text\n\t" + (i % 3 ? "x" : "yy");
  const int saved = num_threads();
  set_num_threads(1);
  WordCounts serial;
  serial.add_text(text);
  set_num_threads(4);
  WordCounts parallel;
  parallel.add_text(text);
  set_num_threads(saved);
  EXPECT_EQ(serial.counts(), parallel.counts());
  EXPECT_EQ(serial.total_words(), parallel.total_words());
}

TEST(BpeTrainer, RefusesBadOptions) {
  test::expect_error([] { train_bpe(WordCounts(), options(256)); },
                     "vocab size 256 is smaller than the initial vocabulary: 1 special token + 256 byte symbols = 257");
  BpeTrainerOptions two = options(257);
  two.special_tokens = {"<s>", "</s>", "<s>"};
  test::expect_error([&] { check_bpe_trainer_options(two); },
                     "vocab size 257 is smaller than the initial vocabulary: 2 special tokens + 256 byte symbols = 258");
  BpeTrainerOptions empty = options(1000);
  empty.special_tokens = {""};
  test::expect_error([&] { check_bpe_trainer_options(empty); }, "special tokens must not be empty");
  BpeTrainerOptions none = options(256);
  none.special_tokens.clear();
  EXPECT_NO_THROW(check_bpe_trainer_options(none));
}

// The Debian fortunes corpus (the quickstart's), the first `max_bytes` of it.
std::string fortunes(size_t max_bytes) {
  std::string text;
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator("/usr/share/games/fortunes")) {
    const std::string name = e.path().filename().string();
    if (e.is_regular_file() && !e.is_symlink() && !name.ends_with(".dat") && !name.ends_with(".u8"))
      files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  for (const auto& f : files) {
    if (text.size() >= max_bytes) break;
    text += test::read_text_file(f.string());
  }
  return text.substr(0, std::min(text.size(), max_bytes));
}

#define REQUIRE_FORTUNES()                                                                          \
  DISTLLM_REQUIRE_REFERENCE(std::filesystem::exists("/usr/share/games/fortunes/fortunes"), \
                            "the Debian fortunes corpus (apt-get install fortunes)")

// Strings that stress the pieces: CJK, emoji (with ZWJ and skin tones), combining
// marks, runs of every kind of white space, contractions, digits, the special token
// in text, and bytes that are not UTF-8.
std::vector<std::string> tricky_strings() {
  return {"Hello world",
          "中文字符和日本語のテキスト、한국어 텍스트",
          "emoji 👩‍👩‍👧‍👦 👍🏽 🇯🇵 ✨✨✨",
          "e\xcc\x81 n\xcc\x83 combining",
          "tabs\t\tand  spaces   and\n\n\nnewlines \r\n  \u00a0\u3000 ",
          "   leading and trailing   ",
          "I'm sure they'll've done it; it's 1234567 vs 3.14159",
          "text<|endoftext|>more text",
          "\n",
          " ",
          "bytes \xff\xfe\xc3 broken",
          "ℌ𝔢𝔩𝔩𝔬 𝕨𝕠𝕣𝕝𝕕 — “quotes” «guillemets»"};
}

class TrainedOnFortunes : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!std::filesystem::exists("/usr/share/games/fortunes/fortunes")) return;
    corpus_ = fortunes(600000);
    WordCounts words;
    words.add_text(corpus_);
    bpe_ = train_bpe(words, options(2000));
    json_ = trained_bpe_json(bpe_);
  }
  void SetUp() override { REQUIRE_FORTUNES(); }

  static inline std::string corpus_, json_;
  static inline TrainedBpe bpe_;
};

TEST_F(TrainedOnFortunes, WritesHuggingFaceSchema) {
  json doc = json::parse(json_);
  EXPECT_EQ(doc["version"], "1.0");
  EXPECT_EQ(doc["model"]["type"], "BPE");
  EXPECT_EQ(doc["model"]["vocab"].size(), 2000u);
  EXPECT_EQ(doc["model"]["vocab"]["<|endoftext|>"], 0);
  EXPECT_EQ(doc["model"]["vocab"]["Ġ"], 221);
  EXPECT_EQ(doc["model"]["merges"].size(), 2000u - 257u);
  EXPECT_EQ(doc["model"]["merges"][0], json::array({"Ġ", "t"}));
  EXPECT_EQ(doc["pre_tokenizer"], json::parse(R"({"type": "ByteLevel", "add_prefix_space": false,
                                                   "trim_offsets": true, "use_regex": true})"));
  EXPECT_EQ(doc["decoder"]["type"], "ByteLevel");
  EXPECT_EQ(doc["added_tokens"], json::parse(R"([{"id": 0, "content": "<|endoftext|>", "single_word": false,
      "lstrip": false, "rstrip": false, "normalized": false, "special": true}])"));
}

TEST_F(TrainedOnFortunes, LoadsAndRoundTrips) {
  Tokenizer tok = Tokenizer::from_json(json_);
  ASSERT_EQ(tok.vocab_size(), 2000);
  EXPECT_EQ(tok.eos_token_id(), 0);
  EXPECT_TRUE(tok.is_special(0));
  std::vector<int32_t> ids = tok.encode(corpus_);
  EXPECT_EQ(tok.decode(ids), corpus_);
  // 2000 tokens learned from this text compress it well below one token per byte.
  EXPECT_LT(static_cast<double>(ids.size()) / corpus_.size(), 0.4);
  for (const std::string& s : tricky_strings()) EXPECT_EQ(tok.decode(tok.encode(s)), s) << s;
  EXPECT_EQ(tok.encode("<|endoftext|>"), std::vector<int32_t>{0});
  // Each learned token is one id: its own text encodes to itself.
  for (int32_t id : {300, 1000, 1999}) {
    EXPECT_EQ(tok.encode(tok.token_bytes(id)), std::vector<int32_t>{id}) << tok.id_to_token(id);
  }
}

// Trained again from the same text: the same file, byte for byte.
TEST_F(TrainedOnFortunes, Deterministic) {
  WordCounts words;
  words.add_text(corpus_);
  EXPECT_EQ(trained_bpe_json(train_bpe(words, options(2000))), json_);
}

// transformers.js (@lenml/tokenizers) reads our file and gives the same ids as ours
// on a few hundred lines of fortunes and the tricky strings.
TEST_F(TrainedOnFortunes, SameIdsAsTransformersJs) {
  DISTLLM_REQUIRE_REFERENCE(test::have_node(), "node");
  DISTLLM_REQUIRE_REFERENCE(std::filesystem::exists(DISTLLM_SOURCE_DIR "/node_modules/@lenml/tokenizers"),
                            "node_modules/@lenml/tokenizers (npm ci)");
  const std::string dir = test::scratch_dir("trained_bpe_reference");
  test::write_text_file(dir + "/tokenizer.json", json_);
  // Cases: 300 lines from further into the corpus than the training text, then the
  // tricky strings (valid UTF-8 only: JavaScript strings cannot hold other bytes).
  std::vector<std::string> cases;
  std::string more = fortunes(900000).substr(600000);
  for (size_t pos = 0; cases.size() < 300 && pos < more.size();) {
    size_t nl = more.find('\n', pos);
    size_t end = nl == std::string::npos ? more.size() : nl + 1;
    cases.push_back(more.substr(pos, end - pos));
    pos = end;
  }
  ASSERT_EQ(cases.size(), 300u);
  for (const std::string& s : tricky_strings())
    if (utf8_is_valid(s)) cases.push_back(s);
  json manifest = {{"ids", json::array()}};
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::string name = "case" + std::to_string(i);
    manifest["ids"].push_back(name);
    test::write_text_file(dir + "/" + name + ".txt", cases[i]);
  }
  test::write_text_file(dir + "/cases.json", manifest.dump());
  std::string out;
  std::string cmd = "cd '" DISTLLM_SOURCE_DIR "' && node tests/tokenizer/trained_bpe_reference.js '" + dir +
                    "/tokenizer.json' '" + dir + "' '" + dir + "/js.json' 2>&1";
  ASSERT_EQ(test::run_command(cmd, &out), 0) << out;
  json js = json::parse(test::read_text_file(dir + "/js.json"));
  Tokenizer tok = Tokenizer::from_json(json_);
  int differences = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    std::vector<int32_t> want = js["case" + std::to_string(i)];
    std::vector<int32_t> got = tok.encode(cases[i]);
    if (got != want && ++differences <= 5) ADD_FAILURE() << "ids differ for " << json(cases[i]).dump();
  }
  EXPECT_EQ(differences, 0) << "of " << cases.size() << " cases";
}

}  // namespace
}  // namespace distllm
