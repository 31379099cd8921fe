// Speculative decoding in the engine (vLLM v1's spec-decode module): drafts for the
// decoding sequences before the scheduler runs, their final tokens once it has, and
// the sampling of each scheduled chunk's rows, which verifies the drafts
// (speculative.h). Without speculation no sequence gets a draft and sampling a
// chunk is plain sampling of its one row: the same code path.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "distllm/serve/draft_proposer.h"
#include "distllm/serve/engine_request.h"
#include "distllm/serve/kv_cache_manager.h"
#include "distllm/serve/model_runner.h"
#include "distllm/serve/sampler.h"
#include "distllm/serve/scheduler.h"
#include "distllm/serve/speculative.h"

namespace distllm::serve {

class SpeculativeDecoder {
 public:
  // Validates `config` and builds its proposer (none when speculation is off).
  // `draft_runner`: the draft model for SpeculativeMethod::kDraft (required then,
  // ignored otherwise); its KV cache gets num_blocks blocks of block_size tokens.
  SpeculativeDecoder(const SpeculativeConfig& config, int max_model_len, const ModelRunner& target,
                     ModelRunner* draft_runner, int num_blocks, int block_size);

  bool enabled() const { return proposer_ != nullptr; }
  const DraftProposer* proposer() const { return proposer_.get(); }
  // One log line describing the setup (nothing when off).
  void log_setup(int num_blocks, int block_size) const;

  // Sets Sequence::draft for every running sequence: a draft for each one that is
  // decoding, cut so that a step never emits past max_tokens or the context; empty
  // otherwise. `request_of` finds a sequence's request.
  void propose(const std::vector<Sequence*>& running,
               const std::function<const EngineRequest&(uint64_t id)>& request_of);
  // After scheduling: makes the drafts of the scheduled chunks final. A proposer
  // failure only costs this step's speedup (the drafts keep valid placeholders).
  void finalize(const std::vector<ScheduledChunk>& chunks, const KvCacheManager& kv);

  // One sampled chunk: its request and the verified samples, or why sampling
  // failed (for this request alone).
  struct ChunkSamples {
    const ScheduledChunk* chunk = nullptr;
    EngineRequest* request = nullptr;
    VerifyResult result;
    std::string error;  // non-empty: sampling failed
  };
  // Samples every chunk that asked for logits, in parallel across requests (a
  // full-vocabulary softmax per row is a visible share of a decode step at batch
  // 16). `logits` holds the chunks' rows in order, vocab_size floats each. Each
  // row's draw depends only on its own logits, seed and step, so the split across
  // threads changes nothing. A speculative chunk's rows are verified in order.
  std::vector<ChunkSamples> sample(const std::vector<ScheduledChunk>& chunks,
                                   const std::function<EngineRequest&(uint64_t id)>& request_of,
                                   const std::vector<float>& logits, size_t vocab_size);
  // Samples chunk `c` of request `r`, verifying its draft: row i of `logits`
  // (vocab_size floats each) is sampled as if draft[0, i) had been emitted.
  VerifyResult sample_chunk(EngineRequest& r, const ScheduledChunk& c, const float* logits, size_t vocab_size,
                            SamplerScratch& scratch) const;

  // After the verified tokens of a chunk with drafts were appended to a sequence
  // that is still running.
  void on_verified(const Sequence& seq, int num_accepted);
  // A sequence ended (finished, aborted or failed).
  void release(uint64_t seq_id);

 private:
  SpeculativeConfig config_;
  int max_model_len_;
  std::unique_ptr<DraftProposer> proposer_;  // null when speculation is off
  const ModelRunner* draft_runner_ = nullptr;
  std::vector<SamplerScratch> scratch_;  // one per sampling thread
};

}  // namespace distllm::serve
