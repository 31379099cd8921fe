#include "distllm/serve/scheduler.h"

#include <algorithm>

#include "distllm/base/error.h"

namespace distllm::serve {

Scheduler::Scheduler(const SchedulerConfig& config, KvCacheManager& kv) : config_(config), kv_(kv) {
  DL_CHECK(config.max_num_seqs >= 1, "--max-num-seqs must be at least 1, got %d", config.max_num_seqs);
  DL_CHECK(config.max_num_batched_tokens >= config.max_num_seqs,
           "--max-num-batched-tokens (%d) must be at least --max-num-seqs (%d), or running sequences "
           "would starve",
           config.max_num_batched_tokens, config.max_num_seqs);
}

void Scheduler::add(Sequence* seq) {
  DL_ASSERT(seq->num_computed == 0 && !seq->tokens.empty());
  seq->status = SeqStatus::kWaiting;
  waiting_.push_back(seq);
}

void Scheduler::preempt(Sequence* seq) {
  kv_.free(seq->id);
  seq->num_computed = 0;
  seq->draft.clear();
  seq->status = SeqStatus::kWaiting;
  seq->num_preemptions += 1;
  num_preemptions_ += 1;
  waiting_.push_front(seq);
}

SchedulerOutput Scheduler::schedule() {
  SchedulerOutput out;
  int budget = config_.max_num_batched_tokens;

  // 1. Running sequences, oldest first.
  size_t i = 0;
  while (i < running_.size() && budget > 0) {
    Sequence* seq = running_[i];
    int64_t remaining = static_cast<int64_t>(seq->tokens.size()) - seq->num_computed;
    DL_ASSERT(remaining > 0);
    if (remaining != 1) seq->draft.clear();  // drafts only follow the newest token
    if (static_cast<int64_t>(seq->draft.size()) > budget - 1) seq->draft.resize(static_cast<size_t>(budget - 1));
    int n = static_cast<int>(std::min<int64_t>(remaining, budget)) + static_cast<int>(seq->draft.size());
    bool scheduled = false;
    while (true) {
      if (kv_.allocate_slots(seq->id, seq->num_computed + n)) {
        scheduled = true;
        break;
      }
      if (!seq->draft.empty()) {  // speculation is optional: drop it before preempting anyone
        n -= static_cast<int>(seq->draft.size());
        seq->draft.clear();
        continue;
      }
      // Out of blocks: preempt the newest running sequence (possibly this one).
      Sequence* victim = running_.back();
      running_.pop_back();
      preempt(victim);
      out.preempted.push_back(victim);
      if (victim == seq) break;
    }
    if (!scheduled) break;  // seq was the newest; everything after it is gone too
    const int k = static_cast<int>(seq->draft.size());
    const bool reaches_end = seq->num_computed + n - k == static_cast<int64_t>(seq->tokens.size());
    out.chunks.push_back({seq, seq->num_computed, n, reaches_end ? 1 + k : 0, 0, k});
    budget -= n;
    ++i;
  }

  // 2. Waiting sequences, first come first served, unless this step had to preempt
  //    (then blocks are short and admitting more would only preempt again).
  while (out.preempted.empty() && !waiting_.empty() && budget > 0 &&
         running_.size() < static_cast<size_t>(config_.max_num_seqs)) {
    Sequence* seq = waiting_.front();
    DL_ASSERT(seq->num_computed == 0);
    int64_t cached = kv_.acquire_cached_prefix(seq->id, seq->tokens);
    int64_t remaining = static_cast<int64_t>(seq->tokens.size()) - cached;
    int n = static_cast<int>(std::min<int64_t>(remaining, budget));
    if (!kv_.allocate_slots(seq->id, cached + n)) {
      kv_.free(seq->id);  // unpin the prefix; try again when blocks free up
      break;
    }
    if (kv_.prefix_cache_enabled()) kv_.record_prefix_query(static_cast<int64_t>(seq->tokens.size()) - 1, cached);
    waiting_.pop_front();
    seq->num_computed = cached;
    seq->status = SeqStatus::kRunning;
    running_.push_back(seq);
    out.admitted.push_back(seq);
    seq->draft.clear();
    out.chunks.push_back({seq, cached, n, cached + n == static_cast<int64_t>(seq->tokens.size()) ? 1 : 0, cached, 0});
    budget -= n;
  }
  out.num_batched_tokens = config_.max_num_batched_tokens - budget;
  return out;
}

void Scheduler::on_step_done(const SchedulerOutput& out) {
  for (const ScheduledChunk& c : out.chunks) {
    Sequence* seq = c.seq;
    if (seq->status != SeqStatus::kRunning || seq->num_computed != c.start) continue;  // finished meanwhile
    seq->num_computed += c.num_tokens - c.num_draft;
    offer_and_release(seq);
  }
}

void Scheduler::offer_and_release(Sequence* seq) {
  if (kv_.sliding_window() == 0) {
    kv_.cache_computed(seq->id, seq->tokens, seq->num_computed);
    return;
  }
  // Under a sliding window the prefix cache takes the prompt only. A generated
  // block offered to it would sit in the tree below the prompt, pinned by the
  // sequence while in its window, and the radix tree evicts from the leaves: the
  // released blocks above it could not be reclaimed. (A chat's next turn brings
  // this turn's answer back as prompt.)
  kv_.cache_computed(seq->id, seq->tokens, std::min<int64_t>(seq->num_computed, seq->num_prompt_tokens));
  kv_.release_outside_window(seq->id, seq->num_computed);
}

void Scheduler::accept_draft(Sequence* seq, int num_accepted) {
  DL_ASSERT(num_accepted >= 0 && num_accepted <= static_cast<int>(seq->draft.size()));
  seq->draft.clear();
  if (seq->status != SeqStatus::kRunning) return;
  seq->num_computed += num_accepted;
  DL_ASSERT(seq->num_computed < static_cast<int64_t>(seq->tokens.size()));
  offer_and_release(seq);
}

void Scheduler::finish(Sequence* seq) {
  if (seq->status == SeqStatus::kRunning) {
    running_.erase(std::remove(running_.begin(), running_.end(), seq), running_.end());
  } else if (seq->status == SeqStatus::kWaiting) {
    waiting_.erase(std::remove(waiting_.begin(), waiting_.end(), seq), waiting_.end());
  }
  kv_.free(seq->id);
  seq->status = SeqStatus::kFinished;
}

}  // namespace distllm::serve
