// compare() and recommend(): every layout (tp x pp x cp) and strategy the input
// allows, and the fastest that fits.
#include <algorithm>

#include "distllm/base/error.h"
#include "distllm/base/strings.h"
#include "distllm/model/stage_chunks.h"
#include "distllm/model/tensor_parallel.h"
#include "distllm/plan/plan.h"

namespace distllm::plan {
namespace {

// Sizes to try for one dimension: the given one, or (0) every size up to `world`.
std::vector<int> sizes(int given, int world) {
  std::vector<int> out;
  for (int n = 1; n <= world; ++n)
    if (given == 0 ? world % n == 0 : n == given) out.push_back(n);
  return out;
}

// Whether a layout fits the model: tp splits its heads, every stage gets a layer,
// the sequence cuts into 2 x cp chunks.
bool fits_model(const PlanInput& in) {
  if (in.pp > in.model.n_layer || in.seq % (2 * in.cp) != 0) return false;
  try {
    TensorParallelPlan check(in.model, in.tp, 0);
    // The interleaved schedule: m a multiple of p, a layer for every chunk.
    if (in.pp > 1) StageChunks::for_model(in.model, in.pp, 0, in.pp_schedule == PipelineScheduleKind::kInterleaved
                                                                   ? in.virtual_stages : 1);
    if (in.pp > 1) check_pipeline_schedule(in.pp_schedule, in.pp, in.micro_batches, in.virtual_stages);
  } catch (const Error&) {
    return false;
  }
  return true;
}

// Every strategy on one layout (and, when it does not fit, with activation
// checkpointing).
std::vector<Estimate> compare_strategies(const PlanInput& base, const MachineRates& rates, double memory_limit_bytes) {
  std::vector<Estimate> out;
  const int reducers = base.world / (base.tp * base.pp);  // dp x cp
  std::vector<Strategy> strategies = {Strategy::kDdp, Strategy::kZero1, Strategy::kZero2, Strategy::kZero3};
  if (reducers == 1) strategies = {Strategy::kNone, Strategy::kZero3};
  if (base.hosts > 1 && reducers % base.hosts == 0) strategies.push_back(Strategy::kHsdp);
  for (Strategy s : strategies) {
    PlanInput in = base;
    in.parallel.strategy = s;
    if (s != Strategy::kHsdp) in.parallel.shard_size = 0;
    Estimate e = estimate(in, rates, memory_limit_bytes);
    out.push_back(e);
    if (!e.fits && in.checkpointing.every == 0) {
      in.checkpointing.every = 1;
      out.push_back(estimate(in, rates, memory_limit_bytes));
    }
  }
  return out;
}

}  // namespace

std::vector<Estimate> compare(const PlanInput& base, const MachineRates& rates, double memory_limit_bytes) {
  std::vector<Estimate> out;
  for (int tp : sizes(base.tp, base.world))
    for (int pp : sizes(base.pp, base.world))
      for (int cp : sizes(base.cp, base.world)) {
        PlanInput in = base;
        in.tp = tp, in.pp = pp, in.cp = cp;
        if (base.world % (tp * pp * cp) != 0 || !fits_model(in)) continue;
        if (pp == 1 && base.pp == 0 && in.micro_batches > 1) {
          // Among pipelined layouts: the same batch per step, accumulated.
          in.grad_accum = in.micro_batches;
          in.micro_batches = 1;
        }
        for (Estimate& e : compare_strategies(in, rates, memory_limit_bytes)) out.push_back(std::move(e));
      }
  DL_CHECK(!out.empty(), "plan: no layout of %d ranks fits the model (--tp, --pp and --cp must divide --world; %s)",
           base.world, base.model.describe().c_str());
  return out;
}

Estimate recommend(const PlanInput& base, const MachineRates& rates, double memory_limit_bytes) {
  std::vector<Estimate> all = compare(base, rates, memory_limit_bytes);
  const Estimate* best = nullptr;
  const Estimate* smallest = &all.front();
  for (const Estimate& e : all) {
    if (e.memory.total() < smallest->memory.total()) smallest = &e;
    if (e.fits && (!best || e.tokens_per_s > best->tokens_per_s * 1.0001)) best = &e;
  }
  DL_CHECK(best != nullptr,
           "no strategy fits in %.1f MB per rank: the smallest, %s, needs %.1f MB (use more ranks, a smaller batch "
           "or a smaller model)",
           memory_limit_bytes / 1e6, describe_choice(*smallest).c_str(), smallest->memory.total() / 1e6);
  return *best;
}

namespace {
std::string checkpointing_suffix(const Estimate& e) {
  return e.input.checkpointing.every > 0 ? " + activation checkpointing " + e.input.checkpointing.describe() : "";
}
}  // namespace

std::string describe_strategy(const Estimate& e) {
  return strategy_name(e.input.parallel.strategy) + checkpointing_suffix(e);
}

std::string describe_layout(const Estimate& e) {
  const PlanInput& in = e.input;
  std::string s = strprintf("dp%d tp%d%s pp%d", in.world / (in.tp * in.pp * in.cp), in.tp,
                            in.sequence_parallel && in.tp > 1 ? "+sp" : "", in.pp);
  if (in.pp > 1 && in.pp_schedule == PipelineScheduleKind::kInterleaved)
    s += strprintf("(interleaved v%d,m%d)", in.virtual_stages, in.micro_batches);
  else if (in.pp > 1)
    s += strprintf("(%s,m%d)", pipeline_schedule_name(in.pp_schedule), in.micro_batches);
  return s + strprintf(" cp%d", in.cp);
}

std::string describe_choice(const Estimate& e) {
  return strategy_name(e.input.parallel.strategy) + std::string(" on ") + describe_layout(e) + checkpointing_suffix(e);
}

}  // namespace distllm::plan
