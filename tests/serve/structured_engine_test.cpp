// The grammar mask never removes what a grammar allows: a model that already writes
// a valid document greedily (a scripted runner: the next byte of a fixed JSON text
// has the top logit, the rest is noise) gives the same output with the mask on.
#include <gtest/gtest.h>

#include <thread>

#include "distllm/base/rng.h"
#include "distllm/base/timer.h"
#include "distllm/serve/engine.h"
#include "distllm/serve/structured/compiler.h"
#include "serve/test_codec.h"

namespace distllm::serve {
namespace {

using testing::ByteCodec;

// Writes `script` after any prompt of `prompt_len` tokens, then EOS; noise in [0, 1)
// elsewhere, so masking the wrong token would change the greedy pick.
class ScriptedRunner : public ModelRunner {
 public:
  ScriptedRunner(std::string script, int prompt_len) : script_(std::move(script)), prompt_len_(prompt_len) {}
  KvGeometry kv_geometry() const override { return {1, 1, 1, 4}; }
  size_t kv_bytes_per_block(int block_size) const override { return static_cast<size_t>(block_size) * 8; }
  void allocate_kv(int, int) override {}
  int vocab_size() const override { return 257; }
  int max_context() const override { return 1024; }
  void execute(const std::vector<SequenceChunk>& batch, std::vector<float>& logits) override {
    logits.clear();
    for (const SequenceChunk& c : batch) {
      for (int row = 0; row < c.num_logits; ++row) {
        const int pos = c.start_pos + static_cast<int>(c.tokens.size()) - c.num_logits + row;  // this row's position
        const int next = pos + 1 - prompt_len_;  // index into the script of the token to predict
        CounterRng rng(static_cast<uint64_t>(pos), 3);
        for (int v = 0; v < 257; ++v) logits.push_back(rng.uniform());
        const int want = next < static_cast<int>(script_.size()) ? static_cast<unsigned char>(script_[static_cast<size_t>(next)]) : ByteCodec::kEos;
        logits[logits.size() - 257 + static_cast<size_t>(want)] = 5.0f;
      }
    }
  }

 private:
  std::string script_;
  int prompt_len_;
};

std::string run(Engine& engine, GenerationRequest r) {
  auto q = std::make_shared<OutputQueue>();
  engine.submit({std::move(r)}, q);
  std::string text;
  Timer t;
  std::vector<OutputDelta> ds;
  while (t.seconds() < 30) {
    ds.clear();
    q.get()->pop_all(ds, 0.1);
    for (auto& d : ds) {
      text += d.text;
      if (d.finish != FinishReason::kNone) {
        EXPECT_EQ(d.finish, FinishReason::kStop) << d.error;
        return text;
      }
    }
  }
  ADD_FAILURE() << "timed out";
  return text;
}

TEST(StructuredEngine, MaskLeavesAValidGreedyOutputUnchanged) {
  const std::string doc = R"({"name": "Ada", "age": 36, "tags": ["x", "y z"], "ok": true, "score": -1.5})";
  const std::string schema = R"({"type":"object","properties":{
    "name":{"type":"string"},"age":{"type":"integer","minimum":0},"tags":{"type":"array","items":{"type":"string"}},
    "ok":{"type":"boolean"},"score":{"type":"number"}},"required":["name","age"]})";
  const std::string prompt = "JSON: ";
  ByteCodec codec;
  ScriptedRunner runner(doc, static_cast<int>(prompt.size()));
  ServeMetrics metrics("test");
  EngineConfig cfg;
  cfg.block_size = 4;
  cfg.num_blocks = 64;
  cfg.check_invariants = true;
  Engine engine(runner, codec, cfg, metrics);
  engine.start();
  GenerationRequest r;
  r.prompt = codec.encode(prompt);
  r.sampling.temperature = 0.0f;
  r.max_tokens = 200;
  EXPECT_EQ(run(engine, r), doc) << "the scripted model itself";
  std::vector<std::string> vocab;
  for (int32_t i = 0; i < codec.vocab_size(); ++i) vocab.push_back(codec.token_bytes(i));
  vocab[ByteCodec::kEos].clear();
  structured::GrammarCompiler compiler(vocab, ByteCodec::kEos);
  for (const auto& spec : {structured::GrammarSpec::json_schema(schema), structured::GrammarSpec::json_object()}) {
    r.grammar = compiler.compile(spec);
    EXPECT_EQ(run(engine, r), doc) << structured::grammar_kind_name(spec.kind);
  }
  // Not vacuous: a schema the document breaks (age <= 30) does change the output.
  std::string strict = schema;
  strict.replace(strict.find(R"("minimum":0)"), 11, R"("maximum":30)");
  r.grammar = compiler.compile(structured::GrammarSpec::json_schema(strict));
  const std::string held = run(engine, r);
  EXPECT_NE(held, doc);
  EXPECT_EQ(held.substr(0, 24), doc.substr(0, 24)) << "same up to the age's first digit";
  engine.stop();
}

}  // namespace
}  // namespace distllm::serve
