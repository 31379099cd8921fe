// One request must never stop the engine: whatever fails for one sequence (its
// grammar, its sampling parameters, its logits, its detokenizer, the runner's answer
// for its step) ends that request with FinishReason::kError and the error in its
// final delta, and the engine goes on serving the next request.
#include <gtest/gtest.h>

#include <atomic>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "distllm/serve/engine.h"
#include "distllm/serve/structured/compiler.h"
#include "distllm/serve/structured/grammar.h"
#include "serve/engine_harness.h"
#include "serve/test_codec.h"
#include "serve/test_runner.h"

namespace distllm::serve {
namespace {

using testing::ByteCodec;
using testing::Choice;
using testing::collect;
using testing::TestRunner;

EngineConfig small_config() {
  EngineConfig c;
  c.block_size = 4;
  c.num_blocks = 256;
  c.scheduler.max_num_seqs = 8;
  c.scheduler.max_num_batched_tokens = 64;
  c.check_invariants = true;
  c.first_request_id = 1;  // request ids are known in advance: 1, 2, ...
  return c;
}

GenerationRequest greedy(const ByteCodec& codec, const std::string& prompt, int max_tokens) {
  GenerationRequest r;
  r.prompt = codec.encode(prompt);
  r.sampling.temperature = 0.0f;
  r.max_tokens = max_tokens;
  return r;
}

Choice run_one(Engine& engine, GenerationRequest r) {
  auto q = std::make_shared<OutputQueue>();
  engine.submit({std::move(r)}, q);
  return collect(*q, 1)[0];
}

// After a failed request: the engine is alive and the next request gets exactly
// the output it would have got anyway.
void expect_engine_serves(Engine& engine, TestRunner& runner, const ByteCodec& codec) {
  ASSERT_TRUE(engine.alive());
  GenerationRequest r = greedy(codec, "after the failure", 12);
  const std::vector<int32_t> want = runner.reference_greedy(r.prompt, 12);
  Choice c = run_one(engine, r);
  EXPECT_EQ(c.finish, FinishReason::kLength) << c.error;
  EXPECT_EQ(c.tokens, want);
  EXPECT_TRUE(engine.alive());
  EXPECT_TRUE(engine.wait_idle(10));
}

structured::GrammarCompiler byte_compiler(const ByteCodec& codec) {
  std::vector<std::string> vocab;
  for (int32_t i = 0; i < codec.vocab_size(); ++i) vocab.push_back(codec.token_bytes(i));
  vocab[ByteCodec::kEos].clear();
  return structured::GrammarCompiler(vocab, ByteCodec::kEos);
}

// A regex whose bounded repetition of `.*` groups makes the matcher's parse stacks
// multiply with every byte: it compiles (the start is small) but cannot be followed
// for long. With speculation on, the failure can also come while drafts are
// verified. Regex and JSON-schema `pattern` alike.
TEST(EngineIsolation, AGrammarThatCannotBeFollowedFailsOnlyItsRequest) {
  ByteCodec codec;
  auto compiler = byte_compiler(codec);
  const structured::GrammarSpec specs[] = {
      structured::GrammarSpec::regex("(.*.*){10}"),
      structured::GrammarSpec::json_schema(R"({"type":"string","pattern":"^(.*.*){10}$"})")};
  for (SpeculativeMethod method : {SpeculativeMethod::kNone, SpeculativeMethod::kNgram}) {
    for (const auto& spec : specs) {
      SCOPED_TRACE(structured::grammar_kind_name(spec.kind) + std::string(method == SpeculativeMethod::kNone ? "" : " ngram"));
      TestRunner runner;
      ServeMetrics metrics("test");
      EngineConfig cfg = small_config();
      cfg.speculative.method = method;
      Engine engine(runner, codec, cfg, metrics);
      engine.start();
      GenerationRequest r;
      r.prompt = codec.encode("ambiguous: ");
      r.sampling.temperature = 1.0f;
      r.seed = 1;
      r.max_tokens = 200;
      r.grammar = compiler.compile(spec);
      Choice c = run_one(engine, r);
      EXPECT_EQ(c.finish, FinishReason::kError);
      EXPECT_NE(c.error.find("grammar cannot be followed"), std::string::npos) << c.error;
      EXPECT_NE(c.error.find("too ambiguous"), std::string::npos) << c.error;
      expect_engine_serves(engine, runner, codec);
      engine.stop();
    }
  }
}

// A grammar whose very start is beyond the matcher (a CompiledGrammar made without
// the compiler's checks) is refused at submit with a 400, before admission.
TEST(EngineIsolation, AGrammarThatCannotStartIsRefusedAtSubmit) {
  ByteCodec codec;
  std::vector<structured::Expr> alts;
  for (int i = 0; i < 5000; ++i) {
    std::string word = "x";
    word += std::to_string(i);  // not "x" + ...: a false -Wrestrict in GCC 12
    alts.push_back(structured::Expr::literal(word));
  }
  structured::GrammarBuilder b;
  b.define("root", structured::Expr::alt(std::move(alts)));
  std::vector<std::string> vocab;
  for (int32_t i = 0; i < codec.vocab_size(); ++i) vocab.push_back(codec.token_bytes(i));
  vocab[ByteCodec::kEos].clear();
  auto grammar = std::make_shared<structured::CompiledGrammar>(
      b.build("root"), std::make_shared<structured::Vocabulary>(vocab, ByteCodec::kEos));
  TestRunner runner;
  ServeMetrics metrics("test");
  Engine engine(runner, codec, small_config(), metrics);
  engine.start();
  GenerationRequest r = greedy(codec, "x", 4);
  r.grammar = grammar;
  try {
    engine.submit({r}, std::make_shared<OutputQueue>());
    ADD_FAILURE() << "accepted";
  } catch (const RequestError& e) {
    EXPECT_EQ(e.status(), 400);
    EXPECT_NE(std::string(e.what()).find("grammar cannot be followed"), std::string::npos) << e.what();
  }
  EXPECT_EQ(engine.stats().requests, 0);
  expect_engine_serves(engine, runner, codec);
}

// Wraps the test runner and spoils what it returns for one request id.
class SpoilingRunner : public ModelRunner {
 public:
  enum class Spoil { kNone, kPlusInf, kNaN, kMissingRow };
  SpoilingRunner(Spoil how, uint64_t victim) : how_(how), victim_(victim) {}
  TestRunner& inner() { return inner_; }

  KvGeometry kv_geometry() const override { return inner_.kv_geometry(); }
  size_t kv_bytes_per_block(int block_size) const override { return inner_.kv_bytes_per_block(block_size); }
  void allocate_kv(int num_blocks, int block_size) override { inner_.allocate_kv(num_blocks, block_size); }
  int vocab_size() const override { return inner_.vocab_size(); }
  int max_context() const override { return inner_.max_context(); }
  void execute(const std::vector<SequenceChunk>& batch, std::vector<float>& logits) override {
    inner_.execute(batch, logits);
    const size_t vocab = static_cast<size_t>(inner_.vocab_size());
    size_t row = 0;
    for (const SequenceChunk& c : batch) {
      if (c.request_id == victim_ && c.num_logits > 0) {
        switch (how_) {
          case Spoil::kPlusInf: logits[row * vocab + 65] = std::numeric_limits<float>::infinity(); break;
          case Spoil::kNaN: logits[row * vocab + 66] = std::numeric_limits<float>::quiet_NaN(); break;
          case Spoil::kMissingRow: logits.resize(logits.size() - vocab); break;
          case Spoil::kNone: break;
        }
        ++spoiled_;
      }
      row += static_cast<size_t>(c.num_logits);
    }
  }
  int spoiled() const { return spoiled_; }

 private:
  TestRunner inner_;
  Spoil how_;
  uint64_t victim_;
  std::atomic<int> spoiled_{0};
};

// Non-finite logits for one request (+inf as much as NaN: a softmax over +inf is
// NaN everywhere and used to pick a token silently) fail that request; a request
// in the same batches finishes as if alone. A runner that returns the wrong number
// of logits fails that step's requests, not the engine.
TEST(EngineIsolation, BadLogitsFailTheirRequestsNotTheEngine) {
  using Spoil = SpoilingRunner::Spoil;
  for (Spoil how : {Spoil::kPlusInf, Spoil::kNaN, Spoil::kMissingRow}) {
    SCOPED_TRACE(static_cast<int>(how));
    ByteCodec codec;
    SpoilingRunner runner(how, /*victim=*/2);
    ServeMetrics metrics("test");
    Engine engine(runner, codec, small_config(), metrics);
    engine.start();
    GenerationRequest bystander = greedy(codec, "a bystander", 20);  // id 1
    GenerationRequest victim = greedy(codec, "the victim", 20);      // id 2
    victim.sampling.temperature = 1.0f;
    victim.seed = 7;
    const std::vector<int32_t> want = runner.inner().reference_greedy(bystander.prompt, 20);
    auto q = std::make_shared<OutputQueue>();
    engine.submit({bystander, victim}, q);
    std::vector<Choice> out = collect(*q, 2);
    EXPECT_EQ(out[1].finish, FinishReason::kError);
    const char* needle = how == Spoil::kPlusInf ? "+inf" : how == Spoil::kNaN ? "NaN" : "logits, expected";
    EXPECT_NE(out[1].error.find(needle), std::string::npos) << out[1].error;
    EXPECT_GE(runner.spoiled(), 1);
    if (how == Spoil::kMissingRow) {
      // The whole step failed: the bystander shared it.
      EXPECT_EQ(out[0].finish, FinishReason::kError);
      EXPECT_NE(out[0].error.find("model error"), std::string::npos) << out[0].error;
    } else {
      EXPECT_EQ(out[0].finish, FinishReason::kLength) << out[0].error;
      EXPECT_EQ(out[0].tokens, want);
    }
    expect_engine_serves(engine, runner.inner(), codec);
    engine.stop();
  }
}

// repetition_penalty divides a seen token's positive logit: 1e-40 makes it +inf
// (and 1e-300, which is 0 as a float, NaN where it multiplies -inf). The request
// used to end after one token with finish "stop"; it is refused at submit now.
TEST(EngineIsolation, ARepetitionPenaltyThatOverflowsLogitsIsRefused) {
  ByteCodec codec;
  TestRunner runner;
  ServeMetrics metrics("test");
  Engine engine(runner, codec, small_config(), metrics);
  engine.start();
  for (float penalty : {1e-40f, 0.0f, std::numeric_limits<float>::quiet_NaN()}) {
    GenerationRequest r = greedy(codec, "aaaa", 8);
    r.sampling.repetition_penalty = penalty;
    try {
      engine.submit({r}, std::make_shared<OutputQueue>());
      ADD_FAILURE() << "repetition_penalty " << penalty << " accepted";
    } catch (const RequestError& e) {
      EXPECT_EQ(e.status(), 400);
      EXPECT_NE(std::string(e.what()).find("repetition_penalty"), std::string::npos) << e.what();
    }
  }
  expect_engine_serves(engine, runner, codec);
}

// A codec whose next stream decoder throws on its first token: a detokenizer
// failure is one request's failure.
class FragileCodec : public ByteCodec {
 public:
  std::unique_ptr<TextStreamDecoder> stream_decoder() const override {
    if (fragile_next_.exchange(false)) return std::make_unique<Fragile>();
    return ByteCodec::stream_decoder();
  }
  void make_next_decoder_fragile() { fragile_next_ = true; }

 private:
  struct Fragile : TextStreamDecoder {
    std::string push(int32_t) override { throw Error("the decoder broke"); }
    std::string finish() override { return ""; }
  };
  mutable std::atomic<bool> fragile_next_{false};
};

TEST(EngineIsolation, ADetokenizerFailureFailsOnlyItsRequest) {
  FragileCodec codec;
  TestRunner runner;
  ServeMetrics metrics("test");
  Engine engine(runner, codec, small_config(), metrics);
  engine.start();
  codec.make_next_decoder_fragile();
  Choice c = run_one(engine, greedy(codec, "fragile", 8));
  EXPECT_EQ(c.finish, FinishReason::kError);
  EXPECT_NE(c.error.find("the decoder broke"), std::string::npos) << c.error;
  expect_engine_serves(engine, runner, codec);
}

}  // namespace
}  // namespace distllm::serve
