// Tensor-parallel decode against the single rank, interleaved round by round so that
// drifting memory bandwidth hits both alike. In a tp=1 round rank 0 decodes with the
// whole model while the other ranks wait at a barrier (after a brief spin they nap,
// leaving the memory bus to rank 0); in a tp=N round every rank decodes its shard.
// Each rank reads 1/N of the weights per step, plus the per-layer all-reduces of a
// [batch, n_embd] activation and the all-gather of the logits.
#include "distllm/cli/bench_decode_tp.h"

#include <cstdio>

#include "distllm/base/error.h"
#include "distllm/base/parallel.h"
#include "distllm/base/rng.h"
#include "distllm/base/timer.h"
#include "distllm/cli/bench_stats.h"
#include "distllm/comm/tensor_parallel_comm.h"
#include "distllm/model/inference.h"
#include "distllm/model/tensor_parallel.h"

namespace distllm {
namespace {

// B sequences of random tokens, each in its own blocks of a cache sized for `model`.
struct DecodeState {
  PagedKvCache cache;
  std::vector<std::vector<int32_t>> tables, tokens;
  int blocks_per_seq, pos;
  std::vector<float> logits;

  DecodeState(const InferenceModel& model, int B, const DecodeBenchOptions& o, int total_steps)
      : cache(model.shard_config(), B * blocks_per_seq_for(o, total_steps), o.block_size, o.kv_dtype),
        tables(static_cast<size_t>(B)),
        tokens(static_cast<size_t>(B)),
        blocks_per_seq(blocks_per_seq_for(o, total_steps)),
        pos(o.context) {
    CounterRng rng(3);
    for (int s = 0; s < B; ++s) {
      for (int i = 0; i < blocks_per_seq; ++i) tables[s].push_back(s * blocks_per_seq + i);
      for (int i = 0; i < o.context + total_steps; ++i)
        tokens[s].push_back(static_cast<int32_t>(rng.below(static_cast<uint64_t>(model.config().vocab_size))));
    }
  }
  static int blocks_per_seq_for(const DecodeBenchOptions& o, int total_steps) {
    return (o.context + total_steps + o.block_size - 1) / o.block_size;
  }
  void prefill(InferenceModel& model, int context) {
    for (size_t s = 0; s < tokens.size(); ++s)
      model.forward({{tokens[s].data(), context, 0, tables[s].data(), blocks_per_seq, 1}}, cache, logits);
  }
  // One decode step of every sequence; returns its milliseconds.
  double step(InferenceModel& model) {
    std::vector<InferenceChunk> batch;
    for (size_t s = 0; s < tokens.size(); ++s)
      batch.push_back({tokens[s].data() + pos, 1, pos, tables[s].data(), blocks_per_seq, 1});
    Timer t;
    model.forward(batch, cache, logits);
    ++pos;
    return t.millis();
  }
};

}  // namespace

int bench_decode_tp(std::shared_ptr<const Transformer> model, const DecodeBenchOptions& o,
                    const comm::ProcessGroupPtr& world) {
  const int tp = world->size();
  const bool leader = world->rank() == 0;
  const ModelConfig cfg = model->config();
  const int total_steps = o.rounds * o.steps;
  DL_CHECK(o.context + total_steps <= cfg.max_position, "--context + rounds x steps exceeds the model's context %d",
           cfg.max_position);
  TensorParallelPlan plan(cfg, tp, world->rank());
  comm::GroupTensorParallelComm comm(world);
  InferenceModel shard(model, o.dtype, InferenceTensorParallel{&plan, &comm});
  std::unique_ptr<InferenceModel> whole;
  if (leader) whole = std::make_unique<InferenceModel>(model, o.dtype);
  model.reset();
  if (leader) {
    std::printf("model:      %s\n", cfg.describe().c_str());
    std::printf("weights:    %.1f MB packed (%s); %.1f MB per rank at tp=%d\n", whole->packed_weight_bytes() / 1e6,
                o.dtype == DType::kI8 ? "int8" : dtype_short_name(o.dtype), shard.packed_weight_bytes() / 1e6, tp);
    std::printf("threads:    %d per rank; %d rounds x %d steps, tp=1 (rank 0 alone) and tp=%d rounds alternating\n",
                num_threads(), o.rounds, o.steps, tp);
    std::printf("\n%6s %12s %12s %10s %14s %14s\n", "batch", "tp=1 ms", "tp ms", "speedup", "tp comm ms", "comm KB/step");
  }
  for (int B : o.batches) {
    DL_CHECK(B > 0 && B <= 1024, "--batch entries must be in [1, 1024]");
    DecodeState split(shard, B, o, total_steps);
    split.prefill(shard, o.context);
    std::unique_ptr<DecodeState> single;
    if (leader) {
      single = std::make_unique<DecodeState>(*whole, B, o, total_steps);
      single->prefill(*whole, o.context);
    }
    comm.take_totals();
    std::vector<double> ms1, msn;
    for (int round = 0; round < o.rounds; ++round) {
      world->barrier();
      if (leader)
        for (int s = 0; s < o.steps; ++s) ms1.push_back(single->step(*whole));
      world->barrier();
      for (int s = 0; s < o.steps; ++s) msn.push_back(split.step(shard));
    }
    const comm::GroupTensorParallelComm::Totals t = comm.take_totals();
    if (leader) {
      const double m1 = median(ms1), mn = median(msn);
      std::printf("%6d %12.2f %12.2f %9.2fx %14.3f %14.1f\n", B, m1, mn, m1 / mn, t.seconds * 1e3 / total_steps,
                  t.bytes / 1e3 / total_steps);
      std::fflush(stdout);
    }
  }
  return 0;
}

}  // namespace distllm
