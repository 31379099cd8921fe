// Iteration-level scheduler (continuous batching with chunked prefill), after vLLM v1.
//
// There are no prefill and decode phases: every sequence simply has tokens whose K/V
// is computed (`num_computed`) and tokens still to run. Each step the scheduler
// spends a token budget: first on running sequences in admission order (a decode
// costs one token, an unfinished prefill takes as much of the budget as remains),
// then on waiting sequences first come, first served, as a new chunked prefill.
//
// When the KV cache cannot give a running sequence the blocks it needs, the newest
// running sequence is preempted by recompute: its blocks are freed and it goes back
// to the front of the waiting queue (its tokens, generated ones included, are kept
// and run again as a prefill, reusing whatever the prefix cache still holds).
// Because the engine rejects any request that could not fit in the whole cache on
// its own, the oldest running sequence can always make progress: no deadlock.
//
// Speculative decoding: a decoding sequence (exactly one token not yet computed)
// may carry draft tokens (`Sequence::draft`, set by the engine's proposer before
// schedule()). Its chunk is then [newest token, draft...]: it costs 1 + k tokens of
// budget and KV room for 1 + k positions, and asks for 1 + k rows of logits. Drafts
// are cut to fit the budget and dropped before anyone is preempted for them.
// After the step, on_step_done counts only the newest token as computed; the engine
// verifies the drafts and calls accept_draft with how many were accepted, which
// counts their positions as computed too. The positions of rejected drafts hold
// stale K/V that the next chunk overwrites (it starts at num_computed); the blocks
// behind them stay with the sequence (it will grow into them) and are never offered
// to the prefix cache before they are full of accepted, computed tokens.
//
// The scheduler never touches tensors and never sees block ids.
#pragma once

#include <cstdint>
#include <deque>
#include <vector>

#include "distllm/serve/kv_cache_manager.h"

namespace distllm::serve {

enum class SeqStatus { kWaiting, kRunning, kFinished };

struct Sequence {
  uint64_t id = 0;
  std::vector<int32_t> tokens;  // prompt followed by generated tokens
  int num_prompt_tokens = 0;
  int64_t num_computed = 0;     // leading tokens whose K/V is in the cache
  SeqStatus status = SeqStatus::kWaiting;
  int num_preemptions = 0;
  // Speculative tokens to verify in the next step after the newest token (only for
  // a running sequence with one token left to compute). schedule() may shorten it;
  // it is cleared when the sequence is preempted.
  std::vector<int32_t> draft;

  int64_t num_generated() const { return static_cast<int64_t>(tokens.size()) - num_prompt_tokens; }
};

struct SchedulerConfig {
  int max_num_batched_tokens = 512;  // token budget per step
  int max_num_seqs = 64;             // running sequences at most
};

struct ScheduledChunk {
  Sequence* seq = nullptr;
  int64_t start = 0;  // == seq->num_computed when scheduled
  int num_tokens = 0;          // including num_draft draft tokens at the end
  // Logits rows wanted: 0 (the chunk does not reach the newest token), 1 (sample
  // after it), or 1 + num_draft (speculative decode).
  int num_logits = 0;
  int64_t cached_tokens = 0;  // prefix-cache hit when admitted this step, else 0
  int num_draft = 0;          // == seq->draft.size() when scheduled
};

struct SchedulerOutput {
  std::vector<ScheduledChunk> chunks;
  std::vector<Sequence*> admitted;   // moved from waiting to running this step
  std::vector<Sequence*> preempted;  // moved from running back to waiting this step
  int num_batched_tokens = 0;
  bool empty() const { return chunks.empty(); }
};

class Scheduler {
 public:
  Scheduler(const SchedulerConfig& config, KvCacheManager& kv);

  // Queues a new sequence (status waiting, nothing computed) at the back.
  void add(Sequence* seq);
  SchedulerOutput schedule();
  // After the runner executed `out`: advances num_computed (by the chunk's tokens
  // minus its drafts) and offers newly full blocks to the prefix cache. Call before
  // appending sampled tokens.
  void on_step_done(const SchedulerOutput& out);
  // After a speculative step's tokens were appended to seq->tokens: the first
  // `num_accepted` drafts were accepted, so their positions' K/V (computed this
  // step from the right tokens) counts as computed. Clears the draft.
  void accept_draft(Sequence* seq, int num_accepted);
  // Removes a sequence from wherever it is (finished, aborted, failed) and frees
  // its blocks.
  void finish(Sequence* seq);

  size_t num_waiting() const { return waiting_.size(); }
  size_t num_running() const { return running_.size(); }
  bool has_work() const { return !waiting_.empty() || !running_.empty(); }
  int64_t num_preemptions() const { return num_preemptions_; }
  const SchedulerConfig& config() const { return config_; }
  const std::deque<Sequence*>& waiting() const { return waiting_; }
  const std::vector<Sequence*>& running() const { return running_; }

 private:
  void preempt(Sequence* seq);
  // After seq->num_computed grew: offers its computed blocks to the prefix cache
  // and gives back those behind its sliding window.
  void offer_and_release(Sequence* seq);

  SchedulerConfig config_;
  KvCacheManager& kv_;
  std::deque<Sequence*> waiting_;
  std::vector<Sequence*> running_;
  int64_t num_preemptions_ = 0;
};

}  // namespace distllm::serve
