// The Tokenizer API on GPT-2's vocabulary, and on the raw-byte tokenizer.
#include "distllm/tokenizer/tokenizer.h"

#include <gtest/gtest.h>

#include <thread>

#include "distllm/base/parallel.h"
#include "distllm/base/rng.h"
#include "distllm/tokenizer/pretokenizer.h"
#include "test_util.h"

namespace distllm {
namespace {

using test::gpt2;
using Ids = std::vector<int32_t>;

std::string random_bytes(CounterRng& rng, size_t n) {
  std::string s(n, '\0');
  for (char& c : s) {
    uint64_t r = rng.next_u64();
    // Mostly text-like, sometimes any byte: invalid UTF-8 appears often.
    c = static_cast<char>((r & 3) == 0 ? (r >> 8) & 0xFF : " etaoin\n\t'sd\xC3\xA9\xE4\xB8\xAD"[(r >> 8) % 16]);
  }
  return s;
}

TEST(Gpt2Tokenizer, KnownIds) {
  SKIP_WITHOUT_GPT2();
  const Tokenizer& t = gpt2();
  EXPECT_EQ(t.vocab_size(), 50257);
  EXPECT_EQ(t.encode("Hello world"), (Ids{15496, 995}));
  EXPECT_EQ(t.encode(" Hello"), (Ids{18435}));
  EXPECT_EQ(t.encode("I'm here"), (Ids{40, 1101, 994}));
  EXPECT_EQ(t.encode("\n\n"), (Ids{628}));
  EXPECT_EQ(t.encode(""), (Ids{}));
  EXPECT_EQ(t.token_to_id("\xC4\xA0world"), 995);  // "Ġworld"
  EXPECT_EQ(t.token_to_id(" world"), std::nullopt);
  EXPECT_EQ(t.id_to_token(995), "\xC4\xA0world");
  EXPECT_EQ(t.token_bytes(995), " world");
  EXPECT_EQ(t.token_bytes(198), "\n");
  EXPECT_EQ(t.decode(Ids{15496, 995}), "Hello world");
}

TEST(Gpt2Tokenizer, SpecialTokens) {
  SKIP_WITHOUT_GPT2();
  const Tokenizer& t = gpt2();
  EXPECT_EQ(t.eos_token_id(), 50256);
  EXPECT_EQ(t.bos_token_id(), 50256);
  EXPECT_TRUE(t.is_special(50256));
  EXPECT_FALSE(t.is_special(995));
  EXPECT_FALSE(t.is_special(-1));
  EXPECT_FALSE(t.is_special(50257));
  EXPECT_EQ(t.encode("<|endoftext|>"), (Ids{50256}));
  EXPECT_EQ(t.encode("a<|endoftext|>b<|endoftext|><|endoftext|>"), (Ids{64, 50256, 65, 50256, 50256}));
  // As plain text it is just characters.
  EXPECT_EQ(t.encode("<|endoftext|>", /*allow_special=*/false), (Ids{27, 91, 437, 1659, 5239, 91, 29}));
  EXPECT_EQ(t.encode("<|endoftext", true), (Ids{27, 91, 437, 1659, 5239}));
  EXPECT_EQ(t.decode(Ids{64, 50256, 65}), "a<|endoftext|>b");
  EXPECT_EQ(t.decode(Ids{64, 50256, 65}, /*skip_special=*/true), "ab");
  Tokenizer copy = t;
  copy.set_eos_token_id(198);
  copy.set_bos_token_id(std::nullopt);
  EXPECT_EQ(copy.eos_token_id(), 198);
  EXPECT_EQ(copy.bos_token_id(), std::nullopt);
  EXPECT_EQ(t.eos_token_id(), 50256);  // the original is untouched
  test::expect_error([&] { copy.set_eos_token_id(50257); }, "EOS token id 50257 is out of range [0, 50257)");
}

TEST(Gpt2Tokenizer, EveryByteAloneAndArbitraryBytesRoundTrip) {
  SKIP_WITHOUT_GPT2();
  const Tokenizer& t = gpt2();
  for (int b = 0; b < 256; ++b) {
    std::string one(1, static_cast<char>(b));
    Ids ids = t.encode(one);
    ASSERT_EQ(ids.size(), 1u) << b;
    EXPECT_EQ(t.token_bytes(ids[0]), one);
  }
  CounterRng rng(7);
  for (int i = 0; i < 300; ++i) {
    std::string s = random_bytes(rng, rng.below(400));
    EXPECT_EQ(t.decode(t.encode(s)), s);
  }
}

// Invalid UTF-8 is defined: each bad byte is an "other" character of the pattern,
// and its byte goes through BPE like any other.
TEST(Gpt2Tokenizer, InvalidUtf8EncodesPieceByPiece) {
  SKIP_WITHOUT_GPT2();
  const Tokenizer& t = gpt2();
  std::string text = "caf\xC3 ok \xFF\xFEhello \xE4\xB8";
  Ids whole = t.encode(text), pieces;
  for (const std::string& p : gpt2_pretokenize(text)) {
    Ids ids = t.encode(p);
    pieces.insert(pieces.end(), ids.begin(), ids.end());
  }
  EXPECT_EQ(whole, pieces);
  EXPECT_EQ(gpt2_pretokenize(text), (std::vector<std::string>{"caf", "\xC3", " ok", " \xFF\xFE", "hello", " \xE4\xB8"}));
  EXPECT_EQ(t.decode(whole), text);
}

TEST(Gpt2Tokenizer, DecodeRejectsBadIds) {
  SKIP_WITHOUT_GPT2();
  test::expect_error([] { gpt2().decode(Ids{15496, 50257}); }, "decode: token id 50257 is out of range [0, 50257)");
  test::expect_error([] { gpt2().decode(Ids{-1}); }, "decode: token id -1 is out of range [0, 50257)");
  test::expect_error([] { gpt2().token_bytes(99999); }, "token id 99999 is out of range [0, 50257)");
}

TEST(Gpt2Tokenizer, JsonRoundTrip) {
  SKIP_WITHOUT_GPT2();
  const Tokenizer& t = gpt2();
  std::string json = t.to_json();
  Tokenizer back = Tokenizer::from_json(json);
  EXPECT_EQ(back.vocab_size(), t.vocab_size());
  EXPECT_TRUE(back.to_json() == json);  // (EXPECT_EQ would diff 100k lines on failure)
  EXPECT_EQ(back.eos_token_id(), 50256);
  EXPECT_TRUE(back.is_special(50256));
  for (int32_t id = 0; id < t.vocab_size(); ++id) ASSERT_EQ(back.id_to_token(id), t.id_to_token(id));
  CounterRng rng(11);
  for (int i = 0; i < 100; ++i) {
    std::string s = random_bytes(rng, rng.below(300)) + "<|endoftext|>";
    EXPECT_EQ(back.encode(s), t.encode(s));
  }
}

TEST(Gpt2Tokenizer, SaveIsAtomicAndLoads) {
  SKIP_WITHOUT_GPT2();
  std::string dir = test::scratch_dir("tokenizer_save");
  gpt2().save(dir + "/tokenizer.json");
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir), std::filesystem::directory_iterator()), 1);
  Tokenizer from_dir = Tokenizer::load(dir);
  EXPECT_EQ(from_dir.encode("Hello world<|endoftext|>"), (Ids{15496, 995, 50256}));
  test::expect_error([&] { gpt2().save(dir + "/missing/sub/tokenizer.json"); },
                     "cannot create " + dir + "/missing/sub/tokenizer.json.tmp." + std::to_string(getpid()) +
                         ": No such file or directory");
  std::filesystem::remove_all(dir);
}

TEST(Gpt2Tokenizer, LoadResolvesPaths) {
  SKIP_WITHOUT_GPT2();
  EXPECT_EQ(Tokenizer::load(test::gpt2_dir()).encode("Hello"), (Ids{15496}));
  EXPECT_EQ(Tokenizer::load("gpt2").vocab_size(), 50257);
  test::expect_error([] { Tokenizer::load("/nonexistent/tok"); }, "/nonexistent/tok: no such file or directory");
  std::string dir = test::scratch_dir("tokenizer_load");
  test::expect_error([&] { Tokenizer::load(dir); },
                     dir + ": the directory has neither tokenizer.json nor encoder.json + vocab.bpe");
  std::filesystem::remove_all(dir);
}

TEST(Gpt2Tokenizer, DefaultDirHonoursEnvironment) {
  SKIP_WITHOUT_GPT2();
  EXPECT_TRUE(std::filesystem::exists(default_gpt2_tokenizer_dir() + "/vocab.bpe"));
  setenv("DISTLLM_GPT2_DIR", "/nonexistent", 1);
  test::expect_error([] { default_gpt2_tokenizer_dir(); }, "DISTLLM_GPT2_DIR=/nonexistent: no encoder.json + vocab.bpe there");
  setenv("DISTLLM_GPT2_DIR", test::gpt2_dir().c_str(), 1);
  EXPECT_EQ(default_gpt2_tokenizer_dir(), test::gpt2_dir());
  unsetenv("DISTLLM_GPT2_DIR");
}

TEST(Gpt2Tokenizer, ParallelEncodeEqualsSerial) {
  SKIP_WITHOUT_GPT2();
  CounterRng rng(5);
  std::string text;
  while (text.size() < (600u << 10)) {
    text += random_bytes(rng, rng.below(120));
    text += rng.below(3) == 0 ? "<|endoftext|>" : ".\n";
  }
  int saved = num_threads();
  for (int threads : {1, 2, 5}) {
    set_num_threads(threads);
    EXPECT_EQ(gpt2().encode_parallel(text), gpt2().encode(text)) << threads;
    EXPECT_EQ(gpt2().encode_parallel(text, false), gpt2().encode(text, false)) << threads;
  }
  set_num_threads(saved);
}

// Many threads share one tokenizer; each has its own piece cache.
TEST(Gpt2Tokenizer, ConcurrentEncodesAgree) {
  SKIP_WITHOUT_GPT2();
  CounterRng rng(9);
  std::vector<std::string> texts;
  for (int i = 0; i < 40; ++i) texts.push_back(random_bytes(rng, 2000));
  std::vector<Ids> want;
  for (const auto& s : texts) want.push_back(gpt2().encode(s));
  std::vector<std::thread> threads;
  std::atomic<int> mismatches{0};
  for (int k = 0; k < 4; ++k) {
    threads.emplace_back([&, k] {
      for (int round = 0; round < 3; ++round)
        for (size_t i = 0; i < texts.size(); ++i) {
          size_t j = (i * 7 + k) % texts.size();
          if (gpt2().encode(texts[j]) != want[j]) ++mismatches;
          if (i == 20 && k == 0) gpt2().clear_encode_cache();
        }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(mismatches.load(), 0);
}

TEST(ByteLevelTokenizer, OneTokenPerByte) {
  Tokenizer t = Tokenizer::byte_level();
  EXPECT_EQ(t.vocab_size(), 256);
  EXPECT_EQ(t.encode("hi \xFF"), (Ids{'h', 'i', ' ', 0xFF}));
  EXPECT_EQ(t.eos_token_id(), std::nullopt);
  std::string all;
  for (int b = 0; b < 256; ++b) all += static_cast<char>(b);
  Ids ids = t.encode(all);
  ASSERT_EQ(ids.size(), 256u);
  for (int b = 0; b < 256; ++b) EXPECT_EQ(ids[b], b);
  EXPECT_EQ(t.decode(ids), all);
  Tokenizer back = Tokenizer::from_json(t.to_json());
  EXPECT_EQ(back.encode(all), ids);
}

}  // namespace
}  // namespace distllm
