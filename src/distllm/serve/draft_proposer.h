// Draft proposers for speculative decoding: the seam between the engine and
// whatever guesses the next k tokens of a decoding sequence.
//
// A step with drafts runs in three phases, and a proposer can hook each:
//   1. propose(), before the scheduler runs: the draft tokens of one decoding
//      sequence, or placeholders of the length it wants (the scheduler budgets and
//      allocates KV blocks for 1 + draft.size() positions and may shorten the draft);
//   2. finalize(), after scheduling and before the target's forward: the chunks
//      that kept num_draft > 0 get their final seq->draft[0, num_draft). A proposer
//      that runs a model does it here, when the target's block table already covers
//      every position the draft writes;
//   3. on_verified(), after the engine verified and appended the tokens of a chunk
//      with drafts (only if the sequence is still running), and release() when a
//      sequence ends.
// Verification (speculative.h) never trusts the drafts: any deterministic draft
// leaves the output unchanged; drafts only change how many tokens a step yields.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "distllm/serve/kv_cache_manager.h"
#include "distllm/serve/model_runner.h"
#include "distllm/serve/ngram_proposer.h"
#include "distllm/serve/scheduler.h"

namespace distllm::serve {

class DraftProposer {
 public:
  virtual ~DraftProposer() = default;
  virtual const char* name() const = 0;
  // At most max_tokens (>= 1) draft tokens to follow seq.tokens; empty: no draft.
  virtual std::vector<int32_t> propose(const Sequence& seq, int max_tokens) = 0;
  // Makes the drafts of `chunks` with num_draft > 0 final (seq->draft[0, num_draft)).
  // On an exception the drafts keep whatever they hold (still valid token ids).
  virtual void finalize(const std::vector<ScheduledChunk>& chunks, const KvCacheManager& kv) {
    (void)chunks;
    (void)kv;
  }
  // After verification: num_accepted of seq's finalized drafts were accepted and
  // seq.tokens now ends with them and the token sampled after them.
  virtual void on_verified(const Sequence& seq, int num_accepted) {
    (void)seq;
    (void)num_accepted;
  }
  // The sequence finished, was aborted or failed.
  virtual void release(uint64_t seq_id) { (void)seq_id; }
};

// Prompt lookup (ngram_proposer.h): the draft is final at propose().
class NgramProposer : public DraftProposer {
 public:
  explicit NgramProposer(const NgramConfig& config) : config_(config) {}
  const char* name() const override { return "ngram"; }
  std::vector<int32_t> propose(const Sequence& seq, int max_tokens) override {
    return propose_ngram(seq.tokens, config_, max_tokens);
  }

 private:
  NgramConfig config_;
};

// A smaller model with the same vocabulary drafts greedily (argmax, lowest id on a
// tie): deterministic, so verification stays exact.
//
// Its K/V lives in a second paged cache of the same block count and block size as
// the target's, indexed by the TARGET sequence's block table: the scheduler already
// allocates blocks for the draft positions, and the prefix cache's sharing and
// freeing apply to both caches at once. Per sequence, `computed` counts the leading
// positions whose draft K/V is valid. finalize() runs, batched across sequences:
// one catch-up chunk over tokens [computed, len) (the whole prompt the first time
// and after a preemption; a prefix-cache hit's shared blocks are not trusted, since
// whoever filled them may never have run the draft), which yields d1, then k - 1
// single-token steps feeding d1..d(k-1). Afterwards computed = min(len + k - 1,
// len + accepted): K/V at positions of accepted drafts was computed from the right
// tokens; anything later is stale and overwritten by the next catch-up.
//
// Writes into shared prefix blocks: a catch-up may rewrite draft K/V in a block the
// prefix cache shares. The values are bit-identical to what is there (same tokens,
// same positions, batch- and chunk-invariant forward), and only sequences holding
// that same prefix read them, so no reader ever sees a different value.
class DraftModelProposer : public DraftProposer {
 public:
  // Allocates the draft's KV cache: num_blocks blocks of block_size tokens.
  DraftModelProposer(ModelRunner& draft, int num_blocks, int block_size);
  const char* name() const override { return "draft"; }
  // Placeholders (token 0) of the length to draft: max_tokens, cut so that every
  // position the draft writes stays inside the draft model's context.
  std::vector<int32_t> propose(const Sequence& seq, int max_tokens) override;
  void finalize(const std::vector<ScheduledChunk>& chunks, const KvCacheManager& kv) override;
  void on_verified(const Sequence& seq, int num_accepted) override;
  void release(uint64_t seq_id) override { states_.erase(seq_id); }

  // For tests: the draft K/V positions currently trusted for a sequence (-1: none
  // recorded), and the draft-model forwards run so far.
  int64_t draft_computed(uint64_t seq_id) const;
  int64_t num_forwards() const { return num_forwards_; }

 private:
  struct State {
    int64_t computed = 0;     // leading positions with valid draft K/V
    int preemptions = 0;      // seq.num_preemptions when `computed` was set
    int64_t drafted_len = 0;  // seq.tokens.size() at the last finalize
    int64_t drafted_to = 0;   // positions with draft K/V after that finalize
  };
  ModelRunner& runner_;
  int max_context_;
  std::unordered_map<uint64_t, State> states_;
  std::vector<SequenceChunk> batch_;
  std::vector<float> logits_;
  int64_t num_forwards_ = 0;
};

}  // namespace distllm::serve
