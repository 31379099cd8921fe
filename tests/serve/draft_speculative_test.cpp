// Speculative decoding with a draft model (--speculative draft): a real tiny GPT-2
// target, drafts from (a) the same weights (every greedy draft is accepted, which
// checks the draft model's K/V bookkeeping: a stale or foreign draft K/V shows up
// as a rejected draft), (b) a different random model with a shorter context
// (almost every draft rejected: the rejection paths), (c) the target's first layer.
// The output must be identical with and without speculation, greedy and seeded,
// under preemption and the prefix cache with check_invariants, in mixed batches,
// with stop conditions inside accepted runs and requests that reach the context.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <mutex>
#include <string>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "distllm/base/timer.h"
#include "distllm/model/inference.h"
#include "distllm/serve/draft_proposer.h"
#include "distllm/serve/engine.h"
#include "distllm/serve/inference_runner.h"
#include "distllm/serve/model_bundle.h"
#include "distllm/serve/speculative.h"
#include "distllm/serve/structured/compiler.h"
#include "distllm/tokenizer/tokenizer.h"
#include "serve/engine_harness.h"
#include "serve/test_codec.h"

namespace distllm::serve {
namespace {

using testing::Choice;
using testing::collect;

using testing::ByteCodec;

std::vector<int32_t> bytes(const std::string& s) { return ByteCodec().encode(s); }

GenerationRequest greedy(const std::string& prompt, int max_tokens) {
  GenerationRequest r;
  r.prompt = bytes(prompt);
  r.sampling.temperature = 0.0f;
  r.sampling.logprobs = 2;
  r.max_tokens = max_tokens;
  return r;
}

GenerationRequest seeded(const std::string& prompt, int max_tokens, uint64_t seed) {
  GenerationRequest r = greedy(prompt, max_tokens);
  r.sampling.temperature = 1.0f;
  r.sampling.top_p = 0.95f;
  r.seed = seed;
  return r;
}

std::shared_ptr<Transformer> tiny_gpt2(int layers, int max_position, uint64_t seed) {
  ModelConfig c;
  c.family = ModelFamily::kGpt2;
  c.vocab_size = 300;
  c.n_layer = layers;
  c.n_head = 4;
  c.n_kv_head = 4;
  c.n_embd = 32;
  c.max_position = max_position;
  c.tie_embeddings = true;
  c.normalize();
  auto m = std::make_shared<Transformer>(c);
  m->init_weights(seed);
  return m;
}

// The target's first `layers` layers with all its other tensors (as
// `serve_make_tiny_model --draft-of` writes it).
std::shared_ptr<Transformer> truncated(const Transformer& target, int layers) {
  ModelConfig c = target.config();
  c.n_layer = layers;
  c.normalize();
  auto m = std::make_shared<Transformer>(c);
  for (const ParamTensor& t : m->layout().tensors()) {
    const ParamTensor& from = target.layout().tensor(t.name);
    std::memcpy(m->params() + t.offset, target.params() + from.offset, sizeof(float) * static_cast<size_t>(t.numel));
  }
  return m;
}

EngineConfig config(int blocks, bool prefix, SpeculativeMethod method, int k = 4) {
  EngineConfig c;
  c.block_size = 4;
  c.num_blocks = blocks;
  c.enable_prefix_cache = prefix;
  c.scheduler.max_num_batched_tokens = 32;
  c.scheduler.max_num_seqs = 6;
  c.check_invariants = true;
  c.speculative.method = method;
  c.speculative.num_speculative_tokens = k;
  return c;
}

// Checks the draft model's K/V bookkeeping from outside. Each runner records, per
// request, the token it last wrote at every position. At every draft forward:
// (1) a catch-up chunk of more than one token may rely only on positions the draft
//     wrote for this request, holding the target's token there (the target's
//     positions below the newest token hold accepted tokens; prefix-cache hits the
//     target never wrote are not compared); a draft that trusted a rejected
//     draft's K/V fails here;
// (2) the draft's logits equal a fresh forward of the draft model over the
//     request's recorded draft tokens [0, end): K/V overwritten by another request
//     (a freed block reused after a preemption) fails here.
struct KvOracle {
  std::mutex mu;
  std::unordered_map<uint64_t, std::vector<int32_t>> target, draft;
  int64_t checked_rows = 0;
  std::vector<std::string> failures;
};

class RecordingRunner : public ModelRunner {
 public:
  RecordingRunner(std::shared_ptr<Transformer> model, KvOracle& oracle, bool is_draft)
      : inner_(model), oracle_(oracle), is_draft_(is_draft) {
    if (is_draft) ref_ = std::make_unique<InferenceModel>(model);
  }
  KvGeometry kv_geometry() const override { return inner_.kv_geometry(); }
  size_t kv_bytes_per_block(int b) const override { return inner_.kv_bytes_per_block(b); }
  void allocate_kv(int n, int b) override { inner_.allocate_kv(n, b); }
  int vocab_size() const override { return inner_.vocab_size(); }
  int max_context() const override { return inner_.max_context(); }
  void execute(const std::vector<SequenceChunk>& batch, std::vector<float>& logits) override {
    std::lock_guard<std::mutex> lock(oracle_.mu);
    auto& mine = is_draft_ ? oracle_.draft : oracle_.target;
    for (const SequenceChunk& c : batch) {
      std::vector<int32_t>& h = mine[c.request_id];
      const size_t end = static_cast<size_t>(c.start_pos) + c.tokens.size();
      if (h.size() < end) h.resize(end, -1);
      if (is_draft_ && c.tokens.size() > 1) {  // a catch-up: its prefix must be accepted tokens
        const std::vector<int32_t>& t = oracle_.target[c.request_id];
        for (int32_t p = 0; p < c.start_pos; ++p) {
          // -1: never written by this request (the target's prefix-cache hits).
          const int32_t want = static_cast<size_t>(p) < t.size() ? t[static_cast<size_t>(p)] : -1;
          if (h[static_cast<size_t>(p)] == -1 || (want != -1 && h[static_cast<size_t>(p)] != want)) {
            oracle_.failures.push_back("request " + std::to_string(c.request_id) + ": draft K/V at position " +
                                       std::to_string(p) + " is not the target's token");
            break;
          }
        }
      }
      std::copy(c.tokens.begin(), c.tokens.end(), h.begin() + c.start_pos);
    }
    inner_.execute(batch, logits);
    if (!is_draft_) return;
    const size_t vocab = static_cast<size_t>(vocab_size());
    size_t row = 0;
    for (const SequenceChunk& c : batch) {
      const std::vector<int32_t>& h = oracle_.draft[c.request_id];
      const int end = c.start_pos + static_cast<int>(c.tokens.size());
      const int bs = 4, nb = (end + bs - 1) / bs;
      PagedKvCache cache(ref_->config(), nb, bs);
      std::vector<int32_t> table(static_cast<size_t>(nb));
      for (int i = 0; i < nb; ++i) table[static_cast<size_t>(i)] = i;
      std::vector<float> ref;
      ref_->forward({InferenceChunk{h.data(), end, 0, table.data(), nb, c.num_logits}}, cache, ref);
      for (size_t v = 0; v < ref.size(); ++v) {
        if (ref[v] != logits[row * vocab + v]) {
          oracle_.failures.push_back("request " + std::to_string(c.request_id) + ": draft logits at position " +
                                     std::to_string(end - 1) + " differ from a fresh forward");
          break;
        }
      }
      row += static_cast<size_t>(c.num_logits);
      oracle_.checked_rows += c.num_logits;
    }
  }

 private:
  InferenceRunner inner_;
  KvOracle& oracle_;
  bool is_draft_;
  std::unique_ptr<InferenceModel> ref_;
};

struct RunResult {
  std::vector<Choice> out;
  MetricsSnapshot metrics;
  EngineStats stats;
  int64_t draft_forwards = 0;
};

RunResult run(std::shared_ptr<Transformer> target, std::shared_ptr<Transformer> draft, const EngineConfig& cfg,
              const std::vector<GenerationRequest>& reqs) {
  ByteCodec codec;
  KvOracle oracle;
  RecordingRunner runner(target, oracle, false);
  std::unique_ptr<RecordingRunner> draft_runner;
  if (draft) draft_runner = std::make_unique<RecordingRunner>(draft, oracle, true);
  ServeMetrics metrics("tiny");
  RunResult r;
  {
    Engine engine(runner, codec, cfg, metrics, draft_runner.get());
    engine.start();
    auto q = std::make_shared<OutputQueue>();
    engine.submit(reqs, q);
    r.out = collect(*q, reqs.size());
    EXPECT_TRUE(engine.wait_idle(10));
    r.metrics = metrics.snapshot();
    r.stats = engine.stats();
    EXPECT_EQ(r.stats.active_blocks, 0);
    if (auto* p = dynamic_cast<const DraftModelProposer*>(engine.proposer())) r.draft_forwards = p->num_forwards();
  }
  EXPECT_TRUE(oracle.failures.empty()) << oracle.failures.size() << " draft K/V failures, first: "
                                       << (oracle.failures.empty() ? "" : oracle.failures[0]);
  if (draft && r.metrics.spec_draft_tokens > 0) {
    EXPECT_GT(oracle.checked_rows, 0);
  }
  return r;
}

void expect_same(const std::vector<Choice>& a, const std::vector<Choice>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].tokens, b[i].tokens) << what << " request " << i;
    EXPECT_EQ(a[i].text, b[i].text) << what << " request " << i;
    EXPECT_EQ(a[i].finish, b[i].finish) << what << " request " << i;
    ASSERT_EQ(a[i].logprobs.size(), b[i].logprobs.size()) << what << " request " << i;
    for (size_t j = 0; j < a[i].logprobs.size(); ++j) {
      EXPECT_EQ(a[i].logprobs[j].token, b[i].logprobs[j].token);
      EXPECT_EQ(a[i].logprobs[j].logprob, b[i].logprobs[j].logprob);
    }
  }
}

void print(const char* what, const RunResult& spec, const RunResult& plain) {
  std::printf("[ %s ] drafts %lld, draft tokens %lld, accepted %lld, target steps %lld vs %lld, draft forwards %lld, "
              "preemptions %lld, prefix hits %lld tokens\n",
              what, static_cast<long long>(spec.metrics.spec_drafts),
              static_cast<long long>(spec.metrics.spec_draft_tokens),
              static_cast<long long>(spec.metrics.spec_accepted_tokens), static_cast<long long>(spec.stats.steps),
              static_cast<long long>(plain.stats.steps), static_cast<long long>(spec.draft_forwards),
              static_cast<long long>(spec.stats.preemptions), static_cast<long long>(spec.metrics.prefix_hit_tokens));
}

// Shared prefixes (prefix-cache hits), more tokens than the cache holds
// (preemption), a mix of prefills and speculative decodes in one step.
std::vector<GenerationRequest> workload(bool with_seeded) {
  std::vector<GenerationRequest> reqs;
  for (int i = 0; i < 8; ++i) {
    std::string p = std::string(i % 2 == 0 ? "shared system prompt, be brief: " : "other ") + std::to_string(i);
    int n = 20 + (i * 7) % 25;
    reqs.push_back(with_seeded && i % 3 == 1 ? seeded(p, n, 100 + static_cast<uint64_t>(i)) : greedy(p, n));
  }
  return reqs;
}

TEST(DraftSpeculative, SameWeightsAcceptsEveryGreedyDraftUnderPreemptionAndPrefixCache) {
  auto target = tiny_gpt2(2, 128, 11);
  for (bool prefix : {true, false}) {
    const std::vector<GenerationRequest> reqs = workload(false);
    RunResult plain = run(target, nullptr, config(28, prefix, SpeculativeMethod::kNone), reqs);
    RunResult spec = run(target, target, config(28, prefix, SpeculativeMethod::kDraft), reqs);
    print(prefix ? "same weights, prefix cache" : "same weights, no prefix cache", spec, plain);
    expect_same(plain.out, spec.out, prefix ? "prefix on" : "prefix off");
    EXPECT_GT(spec.stats.preemptions, 0);
    EXPECT_GT(spec.stats.max_batch_seqs, 1);
    if (prefix) {
      EXPECT_GT(spec.metrics.prefix_hit_tokens, 0);
    }
    EXPECT_GT(spec.metrics.spec_draft_tokens, 0);
    // The draft is the target: its greedy drafts are the target's greedy tokens,
    // bit for bit, unless its K/V bookkeeping is wrong.
    EXPECT_EQ(spec.metrics.spec_accepted_tokens, spec.metrics.spec_draft_tokens);
    EXPECT_LT(spec.stats.steps, plain.stats.steps);
  }
}

TEST(DraftSpeculative, SameWeightsSeededSamplingIdentical) {
  auto target = tiny_gpt2(2, 128, 11);
  const std::vector<GenerationRequest> reqs = workload(true);
  RunResult plain = run(target, nullptr, config(40, true, SpeculativeMethod::kNone), reqs);
  RunResult spec = run(target, target, config(40, true, SpeculativeMethod::kDraft, 3), reqs);
  print("same weights, seeded", spec, plain);
  expect_same(plain.out, spec.out, "seeded");
  EXPECT_GT(spec.metrics.spec_accepted_tokens, 0);
  EXPECT_LT(spec.metrics.spec_accepted_tokens, spec.metrics.spec_draft_tokens);  // sampled != argmax sometimes
}

TEST(DraftSpeculative, RandomDraftRejectsButStaysIdentical) {
  auto target = tiny_gpt2(2, 128, 11);
  auto draft = tiny_gpt2(1, 64, 777);  // shorter context: drafting stops at position 64
  std::vector<GenerationRequest> reqs = workload(true);
  // Reaches the target's context (128) and passes the draft's.
  reqs.push_back(greedy("a long one that runs to the end of the context", 128 - 47));
  reqs.push_back(seeded("a long sampled one", 100, 5));
  RunResult plain = run(target, nullptr, config(64, true, SpeculativeMethod::kNone), reqs);
  RunResult spec = run(target, draft, config(64, true, SpeculativeMethod::kDraft), reqs);
  print("random draft", spec, plain);
  expect_same(plain.out, spec.out, "random draft");
  EXPECT_EQ(spec.out[8].finish, FinishReason::kLength);
  EXPECT_EQ(spec.out[8].tokens.size(), 128u - 47u);
  EXPECT_GT(spec.metrics.spec_draft_tokens, 0);
  EXPECT_LT(spec.metrics.spec_accepted_tokens * 4, spec.metrics.spec_draft_tokens);
}

TEST(DraftSpeculative, TruncatedDraftIdentical) {
  auto target = tiny_gpt2(4, 128, 11);
  auto draft = truncated(*target, 1);
  const std::vector<GenerationRequest> reqs = workload(true);
  RunResult plain = run(target, nullptr, config(40, true, SpeculativeMethod::kNone), reqs);
  RunResult spec = run(target, draft, config(40, true, SpeculativeMethod::kDraft), reqs);
  print("first layer of the target", spec, plain);
  expect_same(plain.out, spec.out, "truncated draft");
  EXPECT_GT(spec.metrics.spec_draft_tokens, 0);
}

// Stop token ids and max_tokens inside an accepted run: nothing after the stop is
// emitted, and the next sequence's drafts are still right (all accepted).
TEST(DraftSpeculative, StopConditionsInsideAcceptedRuns) {
  auto target = tiny_gpt2(2, 128, 11);
  std::vector<GenerationRequest> base = {greedy("stop inside a run", 30), greedy("another prompt", 17)};
  RunResult ref = run(target, nullptr, config(64, true, SpeculativeMethod::kNone), base);
  ASSERT_EQ(ref.out[0].tokens.size(), 30u);
  std::vector<GenerationRequest> reqs = base;
  reqs[0].stop_token_ids = {ref.out[0].tokens[9]};  // first occurrence at or before index 9
  reqs[1].max_tokens = 6;                            // not a multiple of k + 1
  RunResult plain = run(target, nullptr, config(64, true, SpeculativeMethod::kNone), reqs);
  RunResult spec = run(target, target, config(64, true, SpeculativeMethod::kDraft, 4), reqs);
  expect_same(plain.out, spec.out, "stops");
  EXPECT_LE(spec.out[0].tokens.size(), 10u);
  EXPECT_EQ(spec.out[0].finish, FinishReason::kStop);
  EXPECT_EQ(spec.out[1].tokens.size(), 6u);
  EXPECT_EQ(spec.metrics.spec_accepted_tokens, spec.metrics.spec_draft_tokens);
}

// A sequence's output (and, with the same-weights draft, its acceptance) does not
// depend on its batch: alone and among others it is the same.
TEST(DraftSpeculative, BatchInvariant) {
  auto target = tiny_gpt2(2, 128, 11);
  auto draft = tiny_gpt2(1, 128, 5);
  std::vector<GenerationRequest> reqs = workload(true);
  RunResult batch = run(target, draft, config(200, false, SpeculativeMethod::kDraft), reqs);
  EXPECT_GT(batch.stats.max_batch_seqs, 1);
  for (size_t i : {0u, 1u, 5u}) {
    RunResult alone = run(target, draft, config(200, false, SpeculativeMethod::kDraft), {reqs[i]});
    expect_same({batch.out[i]}, alone.out, "alone " + std::to_string(i));
  }
}

// Structured outputs: the draft model drafts without the grammar (its drafts may
// break it and are then rejected); the target's rows are masked after the
// accepted drafts, so guided output is identical with and without drafts.
TEST(DraftSpeculative, GrammarRequestsIdentical) {
  auto target = tiny_gpt2(2, 128, 11);
  ByteCodec codec;
  std::vector<std::string> vocab;
  for (int32_t i = 0; i < codec.vocab_size(); ++i) vocab.push_back(codec.token_bytes(i));
  vocab[ByteCodec::kEos].clear();
  structured::GrammarCompiler compiler(vocab, ByteCodec::kEos);
  auto grammar = compiler.compile(structured::GrammarSpec::json_object());
  std::vector<GenerationRequest> reqs = workload(true);
  for (auto& r : reqs) r.grammar = grammar;
  RunResult plain = run(target, nullptr, config(64, true, SpeculativeMethod::kNone), reqs);
  for (auto draft : {target, tiny_gpt2(1, 128, 5)}) {
    RunResult spec = run(target, draft, config(64, true, SpeculativeMethod::kDraft), reqs);
    print("grammar", spec, plain);
    expect_same(plain.out, spec.out, "grammar");
    EXPECT_GT(spec.metrics.spec_draft_tokens, 0);
  }
  for (const Choice& c : plain.out) EXPECT_EQ(c.text.substr(0, 1), "{");
}

TEST(DraftSpeculative, BadDraftModelIsAClearError) {
  auto target = tiny_gpt2(2, 128, 11);
  ByteCodec codec;
  InferenceRunner runner(target);
  ServeMetrics metrics("tiny");
  auto expect_error = [](const std::function<void()>& f, const std::string& needle) {
    try {
      f();
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_error([&] { Engine e(runner, codec, config(64, true, SpeculativeMethod::kDraft), metrics, nullptr); },
               "--draft-model");
  ModelConfig c = target->config();
  c.vocab_size = 280;
  c.normalize();
  auto other = std::make_shared<Transformer>(c);
  InferenceRunner other_runner(other);
  InferenceRunner runner2(target);
  expect_error([&] { Engine e(runner2, codec, config(64, true, SpeculativeMethod::kDraft), metrics, &other_runner); },
               "--draft-model");
  EXPECT_EQ(parse_speculative_method("draft"), SpeculativeMethod::kDraft);
  // Tokenizers: the same one passes; the same size with two ids swapped is named.
  Tokenizer bytes = Tokenizer::byte_level();
  check_same_tokenizer(bytes, Tokenizer::from_json(bytes.to_json()), "same");
  nlohmann::json j = nlohmann::json::parse(bytes.to_json());
  auto& vocab = j["model"]["vocab"];
  std::string a, b;
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    if (it.value() == 65) a = it.key();
    if (it.value() == 66) b = it.key();
  }
  vocab[a] = 66;
  vocab[b] = 65;
  Tokenizer swapped = Tokenizer::from_json(j.dump());
  ASSERT_EQ(swapped.vocab_size(), bytes.vocab_size());
  expect_error([&] { check_same_tokenizer(bytes, swapped, "/models/draft"); }, "--draft-model /models/draft: token 65");
}

}  // namespace
}  // namespace distllm::serve
