// Token ids identical to implementations no one here wrote: the npm package
// gpt-3-encoder (GPT-2's encoder on Node.js) and Hugging Face's tokenizers.js.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "distllm/base/parallel.h"
#include "distllm/tokenizer/pretokenizer.h"
#include "distllm/tokenizer/unicode_classes.h"
#include "test_util.h"

namespace distllm {
namespace {

using nlohmann::json;
using test::gpt2;
using test::read_text_file;

// Runs gpt2_reference.js once into a scratch directory per test process.
class Gpt2Parity : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!test::have_node() || !test::have_gpt2_files()) return;
    dir_ = test::scratch_dir("gpt2_parity");
    std::string cmd = "cd '" DISTLLM_SOURCE_DIR "' && node tests/tokenizer/gpt2_reference.js '" + dir_ + "' 2>&1";
    std::string out;
    ok_ = test::run_command(cmd, &out) == 0;
    if (!ok_) error_ = out;
  }
  void SetUp() override {
    DISTLLM_REQUIRE_REFERENCE(test::have_node(), "node");
    SKIP_WITHOUT_GPT2();
    ASSERT_TRUE(ok_) << "gpt2_reference.js failed:\n" << error_;
  }
  static json manifest() { return json::parse(read_text_file(dir_ + "/cases.json")); }

  static inline std::string dir_;
  static inline bool ok_ = false;
  static inline std::string error_;
};

// Shows where two id sequences part, as text.
std::string first_difference(const std::vector<int32_t>& want, const std::vector<int32_t>& got) {
  size_t i = 0;
  while (i < want.size() && i < got.size() && want[i] == got[i]) ++i;
  if (i == want.size() && i == got.size()) return "";
  auto window = [&](const std::vector<int32_t>& ids) {
    std::string s;
    for (size_t j = i >= 3 ? i - 3 : 0; j < std::min(ids.size(), i + 4); ++j)
      s += std::to_string(ids[j]) + "='" + gpt2().token_bytes(ids[j]) + "' ";
    return s;
  };
  return "first difference at token " + std::to_string(i) + " of " + std::to_string(want.size()) + "/" +
         std::to_string(got.size()) + "\n  reference: " + window(want) + "\n  distllm:   " + window(got);
}

TEST_F(Gpt2Parity, IdsMatchGpt3Encoder) {
  json m = manifest();
  ASSERT_GE(m["ids"].size(), 10u);
  size_t bytes = 0;
  for (const auto& name : m["ids"]) {
    std::string text = read_text_file(dir_ + "/" + name.get<std::string>() + ".txt");
    std::vector<int32_t> want = json::parse(read_text_file(dir_ + "/" + name.get<std::string>() + ".ids.json"));
    std::vector<int32_t> got = gpt2().encode(text, /*allow_special=*/false);
    EXPECT_EQ(got, want) << name << ": " << first_difference(want, got);
    EXPECT_EQ(gpt2().decode(got), text) << name;
    bytes += text.size();
  }
  EXPECT_GE(bytes, size_t{1} << 20);
}

TEST_F(Gpt2Parity, ParallelEncodeOfOneMegabyteMatches) {
  std::string text = read_text_file(dir_ + "/one_megabyte.txt");
  ASSERT_GE(text.size(), size_t{1} << 20);
  std::vector<int32_t> want = json::parse(read_text_file(dir_ + "/one_megabyte.ids.json"));
  int saved = num_threads();
  for (int threads : {2, 3, 8}) {
    set_num_threads(threads);
    std::vector<int32_t> got = gpt2().encode_parallel(text, false);
    EXPECT_EQ(got, want) << threads << " threads: " << first_difference(want, got);
  }
  set_num_threads(saved);
}

// The pre-tokenizer alone against JavaScript's regex, on short strings over the
// characters that decide where pieces end (contractions, the kinds of white space,
// letters, marks, numbers, emoji).
TEST_F(Gpt2Parity, PiecesMatchJavaScriptRegex) {
  json m = manifest();
  ASSERT_GE(m["pieces"].size(), 1000u);
  int failures = 0;
  for (const auto& c : m["pieces"]) {
    std::string text = c[0];
    std::vector<size_t> want = c[1];
    std::vector<size_t> got;
    gpt2_pretokenize(text, [&](std::string_view piece) { got.push_back(piece.size()); });
    if (got != want && ++failures <= 5) ADD_FAILURE() << "pieces differ for " << json(text).dump();
  }
  EXPECT_EQ(failures, 0);
}

// Hugging Face's own (JavaScript) tokenizers library reads the tokenizer.json that
// to_json() writes and produces the same ids, added tokens included.
TEST_F(Gpt2Parity, HuggingFaceTokenizersReadOurJson) {
  DISTLLM_REQUIRE_REFERENCE(std::filesystem::exists(DISTLLM_SOURCE_DIR "/node_modules/@huggingface/tokenizers"),
                            "node_modules/@huggingface/tokenizers (npm ci)");
  std::string path = dir_ + "/gpt2.tokenizer.json";
  gpt2().save(path);
  std::string out;
  std::string cmd = "cd '" DISTLLM_SOURCE_DIR "' && node tests/tokenizer/hf_tokenizers_reference.js '" + path + "' '" +
                    dir_ + "' '" + dir_ + "/hf.json' 2>&1";
  ASSERT_EQ(test::run_command(cmd, &out), 0) << out;
  json hf = json::parse(read_text_file(dir_ + "/hf.json"));
  json m = manifest();
  for (const auto& name : m["ids"]) {
    std::string text = read_text_file(dir_ + "/" + name.get<std::string>() + ".txt");
    std::vector<int32_t> want = hf[name.get<std::string>()];
    std::vector<int32_t> got = gpt2().encode(text, /*allow_special=*/true);
    EXPECT_EQ(got, want) << name << ": " << first_difference(want, got);
  }
}

// The generated Unicode tables against the running Node's RegExp engine, on every
// code point. When this Node implements an older Unicode version than the tables,
// characters it does not know yet (\p{Cn}) may differ; anything else is a bug. When
// it is newer, regenerate: node scripts/gen_unicode_tables.js > src/distllm/tokenizer/unicode_data.cpp
TEST(UnicodeTables, MatchNodeRegExp) {
  DISTLLM_REQUIRE_REFERENCE(test::have_node(), "node");
  std::string out;
  ASSERT_EQ(test::run_command("node '" DISTLLM_SOURCE_DIR "/scripts/gen_unicode_tables.js' --json", &out), 0);
  json node = json::parse(out);
  const std::string node_version = node["unicode"];
  std::vector<uint8_t> want(0x110000, static_cast<uint8_t>(CharClass::kOther)), unassigned(0x110000, 0);
  auto paint = [](std::vector<uint8_t>& v, const json& ranges, uint8_t value) {
    for (const auto& r : ranges)
      for (uint32_t cp = r[0]; cp <= r[1].get<uint32_t>(); ++cp) v[cp] = value;
  };
  paint(want, node["letter"], static_cast<uint8_t>(CharClass::kLetter));
  paint(want, node["number"], static_cast<uint8_t>(CharClass::kNumber));
  paint(want, node["space"], static_cast<uint8_t>(CharClass::kSpace));
  paint(unassigned, node["unassigned"], 1);
  const CharClassTable& table = CharClassTable::get();
  int differences = 0, tolerated = 0;
  for (uint32_t cp = 0; cp < 0x110000; ++cp) {
    if (static_cast<uint8_t>(table.classify(cp)) == want[cp]) continue;
    if (node_version != unicode_data::kUnicodeVersion && unassigned[cp]) {
      ++tolerated;
      continue;
    }
    if (++differences <= 5)
      ADD_FAILURE() << strprintf("U+%04X: tables say %d, Node (Unicode %s) says %d", cp, (int)table.classify(cp),
                                 node_version.c_str(), want[cp]);
  }
  EXPECT_EQ(differences, 0) << "tables are Unicode " << unicode_data::kUnicodeVersion << ", Node is " << node_version;
  if (tolerated) std::printf("note: %d code points unassigned in Node's Unicode %s differ\n", tolerated, node_version.c_str());
}

}  // namespace
}  // namespace distllm
