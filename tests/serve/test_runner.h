// A deterministic ModelRunner for engine and API tests. Not part of the product.
//
// It really uses the paged KV cache: for each position p of a sequence it stores a
// value v(p) = f(token[p], p, v(0..p-1)) in the slot the block table names, and it
// computes v(p) from the values it reads back through the block table for every
// earlier position (attention reads all of them too). The next-token logits are a
// function of v(last). A wrong block table, a prefix shared across different
// tokens, or K/V lost by preemption changes the values and therefore the tokens, so
// tests comparing against `reference_greedy` (contiguous, no paging) fail. Each slot
// also records which position wrote it; reading a slot written for another position
// (or never written) throws.
#pragma once

#include <atomic>
#include <mutex>
#include <string>
#include <vector>

#include "distllm/serve/model_runner.h"

namespace distllm::serve::testing {

struct TestRunnerOptions {
  int vocab_size = 257;
  int max_context = 1024;
  int eos_token = 256;
  // Per mille chance (by hash) that EOS is the most likely next token; 0: never.
  int eos_permille = 0;
  // Sleep this long in every execute(), to make steps take time.
  int step_delay_ms = 0;
  // > 0: a copying model, for speculative decoding. The token `copy_period`
  // positions back (read through the block table like the values) gets +8 on its
  // logit, so greedy output repeats the last copy_period tokens and an n-gram
  // proposer's drafts are mostly accepted; except where hash(value) % 1000 <
  // copy_break_permille, which leaves the ordinary pseudo-random logits (drafts
  // get rejected there).
  int copy_period = 0;
  int copy_break_permille = 0;
};

class TestRunner : public ModelRunner {
 public:
  explicit TestRunner(TestRunnerOptions options = {});

  KvGeometry kv_geometry() const override { return {1, 1, 2, 4}; }  // 16 bytes per token
  size_t kv_bytes_per_block(int block_size) const override { return static_cast<size_t>(block_size) * 16; }
  void allocate_kv(int num_blocks, int block_size) override;
  int vocab_size() const override { return options_.vocab_size; }
  int max_context() const override { return options_.max_context; }
  void execute(const std::vector<SequenceChunk>& batch, std::vector<float>& logits) override;

  // Greedy continuation of `prompt` computed directly, without paging.
  std::vector<int32_t> reference_greedy(const std::vector<int32_t>& prompt, int num_tokens) const;
  // Logits after a full sequence, computed directly.
  std::vector<float> reference_logits(const std::vector<int32_t>& tokens) const;

  // Makes execute() throw for batches holding this request id (0: never).
  void fail_request(uint64_t id) { fail_id_ = id; }
  void set_step_delay_ms(int ms) { delay_ms_ = ms; }

  int64_t num_steps() const { return steps_; }
  int max_batch_seqs() const { return max_batch_; }
  int num_blocks() const { return num_blocks_; }
  // Chunks of every executed step, for tests that inspect batching (kept on request).
  void record_batches(bool on) { record_ = on; }
  std::vector<std::vector<SequenceChunk>> recorded();

 private:
  static uint64_t value_at(int32_t token, int32_t pos, uint64_t digest);
  // copy_token: the token copy_period positions before the one predicted, or -1.
  void logits_for(uint64_t value, int32_t copy_token, float* out) const;

  struct Slot {
    int32_t pos = -1;
    int32_t token = -1;
    uint64_t value = 0;
  };
  TestRunnerOptions options_;
  std::vector<Slot> slots_;
  int num_blocks_ = 0;
  int block_size_ = 0;
  std::atomic<uint64_t> fail_id_{0};
  std::atomic<int> delay_ms_{0};
  std::atomic<int64_t> steps_{0};
  std::atomic<int> max_batch_{0};
  std::atomic<bool> record_{false};
  std::mutex record_mu_;
  std::vector<std::vector<SequenceChunk>> batches_;
};

}  // namespace distllm::serve::testing
