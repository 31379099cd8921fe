#include "distllm/serve/speculative_decoder.h"

#include <algorithm>

#include "distllm/base/log.h"
#include "distllm/base/parallel.h"
#include "distllm/serve/structured_output.h"

namespace distllm::serve {

SpeculativeDecoder::SpeculativeDecoder(const SpeculativeConfig& config, int max_model_len, const ModelRunner& target,
                                       ModelRunner* draft_runner, int num_blocks, int block_size)
    : config_(config), max_model_len_(max_model_len) {
  config_.validate();
  if (config_.method == SpeculativeMethod::kDraft) {
    DL_CHECK(draft_runner != nullptr, "--speculative draft needs --draft-model DIR");
    DL_CHECK(draft_runner->vocab_size() == target.vocab_size(),
             "--draft-model has a vocabulary of %d tokens but the model's has %d: the draft must use the same "
             "tokenizer and vocabulary",
             draft_runner->vocab_size(), target.vocab_size());
  }
  if (!config_.enabled()) return;
  if (config_.method == SpeculativeMethod::kDraft) {
    proposer_ = std::make_unique<DraftModelProposer>(*draft_runner, num_blocks, block_size);
    draft_runner_ = draft_runner;
  } else {
    proposer_ = std::make_unique<NgramProposer>(config_.ngram);
  }
}

void SpeculativeDecoder::log_setup(int num_blocks, int block_size) const {
  if (config_.method == SpeculativeMethod::kNgram && config_.enabled()) {
    LOG_INFO("engine: speculative decoding: ngram, %d tokens, n-gram %d..%d", config_.num_speculative_tokens,
             config_.ngram.min_n, config_.ngram.max_n);
  } else if (config_.enabled()) {
    LOG_INFO("engine: speculative decoding: draft model, %d tokens, draft KV cache %zu bytes",
             config_.num_speculative_tokens,
             draft_runner_->kv_bytes_per_block(block_size) * static_cast<size_t>(num_blocks));
  }
}

void SpeculativeDecoder::propose(const std::vector<Sequence*>& running,
                                 const std::function<const EngineRequest&(uint64_t id)>& request_of) {
  const bool off = !proposer_ || (config_.disable_by_batch_size > 0 &&
                                  running.size() > static_cast<size_t>(config_.disable_by_batch_size));
  for (Sequence* seq : running) {
    seq->draft.clear();
    if (off) continue;
    const int64_t len = static_cast<int64_t>(seq->tokens.size());
    if (len - seq->num_computed != 1) continue;  // still prefilling
    const EngineRequest& r = request_of(seq->id);
    // A step emits up to k + 1 tokens: never draft past max_tokens or the context.
    int64_t k = config_.num_speculative_tokens;
    k = std::min<int64_t>(k, r.req.max_tokens - seq->num_generated() - 1);
    k = std::min<int64_t>(k, max_model_len_ - len - 1);
    if (k <= 0) continue;
    try {
      seq->draft = proposer_->propose(*seq, static_cast<int>(k));
    } catch (const std::exception& e) {
      // No draft: the output is the same, only this sequence's speedup is lost.
      LOG_ERROR("engine: draft proposer failed for request %llu: %s", static_cast<unsigned long long>(seq->id),
                e.what());
      seq->draft.clear();
      release(seq->id);
    }
  }
}

void SpeculativeDecoder::finalize(const std::vector<ScheduledChunk>& chunks, const KvCacheManager& kv) {
  if (!proposer_) return;
  bool drafts = false;
  for (const ScheduledChunk& c : chunks) drafts |= c.num_draft > 0;
  if (!drafts) return;
  try {
    proposer_->finalize(chunks, kv);
  } catch (const std::exception& e) {
    // The drafts keep their placeholder tokens: verification rejects what does
    // not match, so the output is unchanged; only this step's speedup is lost.
    LOG_ERROR("engine: draft proposer failed: %s", e.what());
  }
}

std::vector<SpeculativeDecoder::ChunkSamples> SpeculativeDecoder::sample(
    const std::vector<ScheduledChunk>& chunks, const std::function<EngineRequest&(uint64_t id)>& request_of,
    const std::vector<float>& logits, size_t vocab_size) {
  std::vector<ChunkSamples> out;
  std::vector<size_t> first_row;
  out.reserve(chunks.size());
  for (size_t i = 0, row = 0; i < chunks.size(); ++i) {
    const ScheduledChunk& c = chunks[i];
    if (c.num_logits == 0) continue;
    out.push_back({&c, &request_of(c.seq->id), {}, {}});
    first_row.push_back(row);
    row += static_cast<size_t>(c.num_logits);
  }
  if (scratch_.size() < static_cast<size_t>(num_threads())) scratch_.resize(static_cast<size_t>(num_threads()));
  parallel_chunks(0, static_cast<int64_t>(out.size()), [&](int64_t lo, int64_t hi, int t) {
    for (int64_t k = lo; k < hi; ++k) {
      ChunkSamples& s = out[static_cast<size_t>(k)];
      try {
        s.result = sample_chunk(*s.request, *s.chunk, logits.data() + first_row[static_cast<size_t>(k)] * vocab_size,
                                vocab_size, scratch_[static_cast<size_t>(t)]);
      } catch (const structured::GrammarError& e) {
        s.error = std::string("the request's grammar cannot be followed: ") + e.what();
      } catch (const std::exception& e) {
        s.error = std::string("sampling failed: ") + e.what();
      }
    }
  });
  return out;
}

VerifyResult SpeculativeDecoder::sample_chunk(EngineRequest& r, const ScheduledChunk& c, const float* logits,
                                              size_t vocab_size, SamplerScratch& scratch) const {
  const Sequence& seq = r.seq;
  const std::span<const int32_t> all(seq.tokens);
  const std::span<const int32_t> draft(seq.draft.data(), static_cast<size_t>(c.num_draft));
  std::vector<int32_t> history;  // generated tokens plus the drafts accepted so far
  // Structured output: row i's mask is the grammar's after draft[0, i). The grammar
  // follows the accepted drafts here and is rolled back afterwards: the output
  // processor accepts the emitted tokens for good.
  DraftGrammarScope grammar(r.grammar.get());
  return verify_draft(draft, [&](int i) {
    // Row i sees the sequence as it would be after the i accepted drafts: penalties
    // count them, min_tokens suppression depends on the count including them.
    SequenceContext ctx = r.sampling_context();
    if (r.grammar) {
      // verify_draft only asks for row i once row i - 1 sampled draft[i - 1],
      // which that row's mask allowed.
      if (i > 0) grammar.follow(draft[static_cast<size_t>(i - 1)]);
      r.grammar->fill_mask();
    }
    if (i > 0) {
      if (history.empty()) history.assign(all.begin() + seq.num_prompt_tokens, all.end());
      history.push_back(draft[static_cast<size_t>(i - 1)]);
      ctx.generated = history;
      ctx.suppressed = {};
      if (seq.num_generated() + i < r.req.min_tokens) ctx.suppressed = r.min_tokens_suppressed;
    }
    std::span<const float> row(logits + static_cast<size_t>(i) * vocab_size, vocab_size);
    return sample_token(row, r.req.sampling, static_cast<uint64_t>(seq.num_generated() + i), scratch, ctx);
  });
}

void SpeculativeDecoder::on_verified(const Sequence& seq, int num_accepted) {
  if (!proposer_) return;
  try {
    proposer_->on_verified(seq, num_accepted);
  } catch (const std::exception& e) {
    // Forget what the proposer knew of this sequence (a draft model starts its K/V
    // over): drafts only change the speed, never the output.
    LOG_ERROR("engine: draft proposer failed for request %llu: %s", static_cast<unsigned long long>(seq.id), e.what());
    release(seq.id);
  }
}

void SpeculativeDecoder::release(uint64_t seq_id) {
  if (!proposer_) return;
  try {
    proposer_->release(seq_id);
  } catch (const std::exception& e) {
    LOG_ERROR("engine: draft proposer failed to release request %llu: %s", static_cast<unsigned long long>(seq_id),
              e.what());
  }
}

}  // namespace distllm::serve
