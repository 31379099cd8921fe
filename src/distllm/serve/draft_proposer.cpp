#include "distllm/serve/draft_proposer.h"

#include <algorithm>

#include "distllm/base/error.h"

namespace distllm::serve {
namespace {

int32_t argmax(const float* row, int vocab) {
  int32_t best = 0;
  for (int32_t v = 1; v < vocab; ++v) {
    if (row[v] > row[best]) best = v;
  }
  return best;
}

}  // namespace

DraftModelProposer::DraftModelProposer(ModelRunner& draft, int num_blocks, int block_size)
    : runner_(draft), max_context_(draft.max_context()) {
  runner_.allocate_kv(num_blocks, block_size);
}

std::vector<int32_t> DraftModelProposer::propose(const Sequence& seq, int max_tokens) {
  // The draft writes positions len - 1 .. len + k - 2: all must be < max_context_.
  const int64_t len = static_cast<int64_t>(seq.tokens.size());
  const int64_t k = std::min<int64_t>(max_tokens, static_cast<int64_t>(max_context_) - len + 1);
  if (k <= 0) return {};
  return std::vector<int32_t>(static_cast<size_t>(k), 0);
}

int64_t DraftModelProposer::draft_computed(uint64_t seq_id) const {
  auto it = states_.find(seq_id);
  return it == states_.end() ? -1 : it->second.computed;
}

void DraftModelProposer::finalize(const std::vector<ScheduledChunk>& chunks, const KvCacheManager& kv) {
  struct Work {
    Sequence* seq;
    State* state;
    int k;
    int64_t len;
  };
  std::vector<Work> work;
  for (const ScheduledChunk& c : chunks) {
    if (c.num_draft <= 0) continue;
    Sequence* seq = c.seq;
    State& s = states_[seq->id];
    const int64_t len = static_cast<int64_t>(seq->tokens.size());
    // Preempted since the last draft: its blocks were freed (and maybe reused), so
    // nothing in the draft cache is its own any more. `computed` <= len - 1 always
    // holds otherwise (the newest token is never computed); be defensive anyway.
    if (s.preemptions != seq->num_preemptions || s.computed > len - 1) s = State{0, seq->num_preemptions, 0, 0};
    work.push_back({seq, &s, c.num_draft, len});
  }
  if (work.empty()) return;
  const int vocab = runner_.vocab_size();
  try {
    // Round 0: catch up [computed, len) and draft d1 from the newest token's logits.
    // Round j >= 1: feed d_j at position len - 1 + j, draft d_(j+1).
    const int rounds = std::max_element(work.begin(), work.end(), [](const Work& a, const Work& b) {
                         return a.k < b.k;
                       })->k;
    for (int j = 0; j < rounds; ++j) {
      batch_.clear();
      std::vector<Work*> in;
      for (Work& w : work) {
        if (w.k <= j) continue;
        SequenceChunk sc;
        sc.request_id = w.seq->id;
        if (j == 0) {
          sc.tokens.assign(w.seq->tokens.begin() + w.state->computed, w.seq->tokens.end());
          sc.start_pos = static_cast<int32_t>(w.state->computed);
        } else {
          sc.tokens.push_back(w.seq->draft[static_cast<size_t>(j - 1)]);
          sc.start_pos = static_cast<int32_t>(w.len - 1 + j);
        }
        sc.block_table = kv.block_table(w.seq->id);
        sc.num_logits = 1;
        batch_.push_back(std::move(sc));
        in.push_back(&w);
      }
      runner_.execute(batch_, logits_);
      ++num_forwards_;
      DL_CHECK(logits_.size() == in.size() * static_cast<size_t>(vocab), "draft model returned %zu logits, expected %zu",
               logits_.size(), in.size() * static_cast<size_t>(vocab));
      for (size_t i = 0; i < in.size(); ++i) {
        in[i]->seq->draft[static_cast<size_t>(j)] = argmax(logits_.data() + i * static_cast<size_t>(vocab), vocab);
      }
    }
  } catch (...) {
    // Part of the draft cache may hold K/V of this step: trust none of it.
    for (Work& w : work) states_.erase(w.seq->id);
    throw;
  }
  for (Work& w : work) {
    w.state->drafted_len = w.len;
    w.state->drafted_to = w.len + w.k - 1;  // d_k itself is never fed
    w.state->computed = w.len;              // until verification says more
  }
}

void DraftModelProposer::on_verified(const Sequence& seq, int num_accepted) {
  auto it = states_.find(seq.id);
  if (it == states_.end()) return;
  State& s = it->second;
  s.computed = std::min(s.drafted_to, s.drafted_len + num_accepted);
}

}  // namespace distllm::serve
