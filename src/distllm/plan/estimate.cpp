#include <algorithm>
#include <cmath>

#include "distllm/base/error.h"
#include "distllm/base/strings.h"
#include "distllm/model/stage_chunks.h"
#include "distllm/train/pipeline_parallel.h"
#include "distllm/model/param_layout.h"
#include "distllm/model/tensor_parallel.h"
#include "distllm/plan/graph_costs.h"
#include "distllm/plan/plan.h"
#include "distllm/train/shard_plan.h"

namespace distllm::plan {
namespace {

constexpr int64_t kF32 = 4;

int64_t mib_to_floats(double mib) { return std::max<int64_t>(1, static_cast<int64_t>(mib * (1 << 20) / 4)); }

// Over the ranks that reduce gradients together (dp x cp).
int shard_group_size(const PlanInput& in, int dp) {
  switch (in.parallel.strategy) {
    case Strategy::kNone:
    case Strategy::kDdp: return 1;
    case Strategy::kZero1:
    case Strategy::kZero2:
    case Strategy::kZero3: return dp;
    case Strategy::kHsdp:
      return in.parallel.shard_size > 0 ? in.parallel.shard_size : std::max(1, dp / std::max(1, in.hosts));
  }
  return 1;
}


// The job's sizes, the same on every pipeline stage.
struct Job {
  const PlanInput& in;
  TensorParallelPlan tp_plan;  // the largest shard (the last rank's: balanced splits give it the remainders)
  int dp = 1;        // replicas drawing different batches
  int reducers = 1;  // dp x cp: the ranks that reduce gradients together
  int S = 1, R = 1;  // their shard group and its replicas
  int K = 1;         // micro-batches per step (a pipeline's, or accumulated)
  bool sp = false;
  GraphShape graph;  // without its stage

  explicit Job(const PlanInput& input)
      : in(input), tp_plan(input.model, input.tp, input.tp - 1) {
    dp = in.world / (in.tp * in.pp * in.cp);
    reducers = dp * in.cp;
    S = shard_group_size(in, reducers);
    DL_CHECK(reducers % S == 0, "plan: the shard group size %d does not divide the %d data-parallel ranks (dp x cp)", S,
             reducers);
    R = reducers / S;
    K = in.pp > 1 ? in.micro_batches : in.grad_accum;
    sp = in.sequence_parallel && in.tp > 1;
    graph.local = &tp_plan.local();
    graph.full = &in.model;
    graph.batch = in.batch, graph.seq = in.seq, graph.cp = in.cp;
    graph.rows = sp ? (graph.tokens() + in.tp - 1) / in.tp : graph.tokens();
    graph.sp = sp;
    graph.kv_replicas = in.tp > 1 ? tp_plan.kv_replicas() : 1;
    graph.checkpointing = in.checkpointing;
  }
  int virtual_stages() const {
    return in.pp > 1 && in.pp_schedule == PipelineScheduleKind::kInterleaved ? in.virtual_stages : 1;
  }
  // The layers of stage s: one range, or v chunks under the interleaved schedule.
  StageChunks stage(int s) const {
    return in.pp > 1 ? StageChunks::for_model(in.model, in.pp, s, virtual_stages())
                     : StageChunks(StageRange::whole(in.model.n_layer));
  }
  // The rank's flat buffers: the tp shard's, or the stage's groups of it.
  ParamLayout layout(const StageChunks& stage) const {
    return in.pp > 1 ? ParamLayout(tp_plan.local(), stage) : tp_plan.local_layout();
  }
  // Activation sets each chunk of a stage keeps: PipelineParallel's graphs.
  std::vector<int> slots(const StageChunks& stage) const {
    return in.pp > 1 ? PipelineParallel::graph_counts(in.pp_schedule, stage, in.micro_batches) : std::vector<int>{1};
  }
};

// What one rank of stage `stage` costs.
struct StageCost {
  MemoryPlan memory;
  double dp_bus = 0, dp_floor = 0;  // data-parallel bus bytes, and those that can never overlap
  double blocking = 0;              // tp all-reduces, cp gradient shifts, the tied table's swap: all exposed
  double p2p = 0;                   // pp sends, on the schedule's critical path like the passes
  double behind = 0;                // cp key/value shifts: travel while attention computes
  double compute_s = 0;             // the stage's passes of one step
};

MemoryPlan stage_memory(const Job& job, const StageChunks& stage, const ParamLayout& layout,
                        const std::vector<Bucket>& buckets) {
  const PlanInput& in = job.in;
  const ParallelConfig& pc = in.parallel;
  const ModelConfig& cfg = job.tp_plan.local();
  const int64_t total = layout.total_size();
  const int64_t owned = ShardPlan(total, job.S).max_shard();
  const bool bf16_params = pc.mixed_precision == MixedPrecision::kBf16;
  const bool bf16_grads = pc.mixed_precision != MixedPrecision::kFp32;
  MemoryPlan m;
  m.params = pc.shards_params() ? 0 : total * kF32;
  m.master = (pc.shards_params() || bf16_params) ? owned * kF32 : 0;
  m.grads = pc.shards_grads() ? owned * kF32 : total * kF32;
  m.optimizer = 2 * owned * kF32;
  const std::vector<int> slots = job.slots(stage);
  for (size_t c = 0; c < stage.chunks.size(); ++c) {
    GraphShape g = job.graph;
    g.stage = stage.chunks[c];
    m.activations += slots[c] * activation_bytes(g);
  }

  // Gathered groups: the most alive at once as the graph walks the groups (the
  // current one, the prefetched next, a tied head's embedding). Groups another
  // stage holds are empty.
  if (pc.shards_params()) {
    auto span = [&](int g) { return layout.group_span(g) * kF32; };
    const int embed = layout.embed_group(), head = layout.head_group();
    const bool tied = layout.head_uses_embedding();
    const int next = pc.prefetch ? 1 : 0;
    int64_t peak = span(embed) + next * span(layout.layer_group(stage.chunks.front().begin));
    int64_t layer = 0;
    for (int l = 0; l < cfg.n_layer; ++l) layer = std::max(layer, span(layout.layer_group(l)));
    peak = std::max(peak, layer * (1 + next));
    int64_t at_head = span(head) + (tied ? span(embed) : 0);
    peak = std::max(peak, at_head + (pc.prefetch ? layer : 0));
    if (!pc.reshard_after_forward) {
      int64_t all_layers = 0;
      for (int l = 0; l < cfg.n_layer; ++l) all_layers += span(layout.layer_group(l));
      peak = std::max(peak, all_layers + at_head);
    }
    if (bf16_params) peak += peak / 2;  // bf16 staging of groups in flight
    m.gathered = peak;
  }
  // Gradient buckets alive at once (GradReducer): sharded gradients keep a bucket
  // from its first gradient until its reduction completes, with at most two in
  // flight besides the one filling (and a tied embedding's, filled from the head's
  // forward on); bf16 communication stages the buckets in flight.
  {
    std::vector<int64_t> sizes;
    int64_t embed_bucket = 0;
    // The tied table's bucket fills from the head on, on the stage that runs the
    // head (a first stage without it fills the bucket last, as any other).
    const bool head_fills_embedding = layout.head_uses_embedding() && layout.has_group(layout.head_group());
    for (const Bucket& b : buckets) {
      int64_t bytes = b.range.size() * kF32;
      if (b.first_group == layout.embed_group() && head_fills_embedding)
        embed_bucket = bytes;
      else
        sizes.push_back(bytes);
    }
    std::sort(sizes.rbegin(), sizes.rend());
    // Without communication (one rank) a bucket is done the moment it is full.
    // Otherwise: the one filling and two in flight, where a tied embedding's bucket,
    // reduced from the head on, is one of the two.
    size_t alive = job.S == 1 && job.R == 1 ? 1 : (embed_bucket > 0 && in.world > 1 ? 2 : 3);
    int64_t three = 0, two = 0;
    for (size_t i = 0; i < sizes.size() && i < alive; ++i) (i < 2 ? two : three) += sizes[i];
    three += two;
    if (pc.shards_grads())
      m.comm_buffers = embed_bucket + three + (bf16_grads ? (embed_bucket + two) / 2 : 0);
    else if (bf16_grads)
      m.comm_buffers = std::max(two, embed_bucket) / 2;
    if (bf16_params && !pc.shards_params() && job.S > 1)
      m.comm_buffers = std::max(m.comm_buffers, (sizes.empty() ? embed_bucket : sizes[0]) / 2 + owned * 2);
  }
  // The embedding rows reduced on their own (DataParallel), on the stage that runs
  // the embedding: every replica's tokens, at most the vocabulary, plus gpt2's
  // positions.
  if (job.reducers > 1 && stage.first()) {
    const int64_t tokens = std::min<int64_t>(cfg.vocab_size, static_cast<int64_t>(job.dp) * in.batch * in.seq);
    m.comm_buffers += (tokens + (cfg.block().learned_positions() ? in.seq : 0)) * cfg.n_embd * kF32;
  }
  // A pipeline's tied table: at the optimizer step, after backward's buffers are
  // gone, the first and last stage each assemble their gradient of it (from the dp
  // shards) and receive the other's.
  if (!stage.is_whole() && layout.head_uses_embedding() && layout.has_group(layout.embed_group()))
    m.comm_buffers =
        std::max(m.comm_buffers, 2 * layout.groups()[static_cast<size_t>(layout.embed_group())].size * kF32);
  return m;
}

double ring(int n) { return n > 1 ? static_cast<double>(n - 1) / n : 0.0; }

// Data-parallel communication per step (bus bytes: what nccl-tests' busbw counts),
// and the part that can never overlap computation.
void data_parallel_traffic(const Job& job, const ParamLayout& layout, const std::vector<Bucket>& buckets,
                           StageCost& c) {
  const ParallelConfig& pc = job.in.parallel;
  const int64_t total = layout.total_size();
  const double psi = static_cast<double>(total) * kF32;
  const double gbytes = psi * (pc.mixed_precision != MixedPrecision::kFp32 ? 0.5 : 1.0);
  const double pbytes = psi * (pc.mixed_precision == MixedPrecision::kBf16 ? 0.5 : 1.0);
  const int K = job.K, S = job.S, R = job.R;
  const double last_bucket = static_cast<double>(buckets.back().range.size()) / static_cast<double>(total);
  switch (pc.strategy) {
    case Strategy::kNone: break;
    case Strategy::kDdp:
      c.dp_bus = 2 * ring(R) * gbytes;
      c.dp_floor = c.dp_bus * last_bucket;
      break;
    case Strategy::kZero1:
    case Strategy::kZero2: {
      const double rs = ring(S) * gbytes * (pc.strategy == Strategy::kZero2 ? K : 1);
      const double ag = ring(S) * pbytes;
      c.dp_bus = rs + ag;
      c.dp_floor = ag + rs / (pc.strategy == Strategy::kZero2 ? K : 1) * last_bucket;
      break;
    }
    case Strategy::kZero3:
    case Strategy::kHsdp: {
      const double gathers = pc.reshard_after_forward ? 2.0 : 1.0;
      const double ag = ring(S) * pbytes * gathers * K;
      const double rs = ring(S) * gbytes * K;
      const double ar = 2 * ring(R) * gbytes / S;
      c.dp_bus = ag + rs + ar;
      const double first_group = static_cast<double>(layout.group_span(layout.embed_group())) / total;
      c.dp_floor = (ring(S) * pbytes * first_group + rs / K * last_bucket) * K + ar * last_bucket;
      break;
    }
  }
}

// One model chunk's model-parallel traffic per step (a stage's one range, or each
// of its chunks under the interleaved schedule), added to `c`.
void chunk_traffic(const Job& job, const StageRange& stage, StageCost& c) {
  const PlanInput& in = job.in;
  const ModelConfig& cfg = job.tp_plan.local();
  const double tokens = static_cast<double>(job.graph.tokens()), act = tokens * cfg.n_embd * kF32;
  int recomputed = 0;
  for (int l = stage.begin; l < stage.end; ++l) recomputed += in.checkpointing.applies(l);
  double per_micro = 0;
  // tp: 4 all-reduces of [B*T, C] per layer (2 more per recomputed one), the
  // embedding's on the first stage and the head's input gradient on the last.
  if (in.tp > 1) {
    const double allreduces = 4.0 * stage.layers() + 2.0 * recomputed + stage.first() + stage.last();
    per_micro += allreduces * 2 * ring(in.tp) * act;
  }
  // cp: every layer's forward shifts the key/value blocks cp - 1 times (again when
  // recomputed), and backward cp - 1 times more; those travel while the held block
  // is attended to (RingAttention). Backward's gradients of each block go round cp
  // times (the last brings them home), each only after this rank's part is in:
  // exposed.
  if (in.cp > 1) {
    const double kv = tokens * cfg.n_kv_head * cfg.head_dim * kF32;
    c.behind += ((stage.layers() + recomputed) * (in.cp - 1) * 2 * kv + stage.layers() * (in.cp - 1) * 2 * kv) * job.K;
    per_micro += stage.layers() * in.cp * 2 * kv;
  }
  c.blocking += per_micro * job.K;
  // pp: each micro-batch's activations go to the next chunk's stage and their
  // gradients come back from it.
  if (in.pp > 1) c.p2p += ((stage.first() ? 0 : 1) + (stage.last() ? 0 : 1)) * act * job.K;
}

// Model-parallel communication per step: every chunk's, and a tied table's swap.
void model_parallel_traffic(const Job& job, const StageChunks& chunks, const ParamLayout& layout, StageCost& c) {
  for (const StageRange& chunk : chunks.chunks) chunk_traffic(job, chunk, c);
  // The tied table's gradients, swapped by the first and last stage.
  if (job.in.pp > 1 && layout.head_uses_embedding() && layout.has_group(layout.embed_group()))
    c.blocking += static_cast<double>(layout.groups()[static_cast<size_t>(layout.embed_group())].size) * kF32;
}
StageCost stage_cost(const Job& job, int s, const MachineRates& rates) {
  const PlanInput& in = job.in;
  const StageChunks stage = job.stage(s);
  const ParamLayout layout = job.layout(stage);
  const ParallelConfig& pc = in.parallel;
  const std::vector<Bucket> buckets =
      make_buckets(layout, mib_to_floats(pc.bucket_mb), mib_to_floats(pc.first_bucket_mb));
  StageCost c;
  c.memory = stage_memory(job, stage, layout, buckets);
  data_parallel_traffic(job, layout, buckets, c);
  model_parallel_traffic(job, stage, layout, c);
  const double tokens = static_cast<double>(job.graph.tokens()) * job.K;
  double flops = 0;
  for (const StageRange& chunk : stage.chunks) flops += flops_per_token(in.model, in.seq, in.checkpointing, chunk);
  c.compute_s = flops / in.tp * tokens / (rates.gemm_gflops * 1e9);
  return c;
}

}  // namespace

Estimate estimate(const PlanInput& in, const MachineRates& rates, double memory_limit_bytes) {
  DL_CHECK(in.world >= 1 && in.batch >= 1 && in.seq >= 1 && in.grad_accum >= 1 && in.micro_batches >= 1,
           "plan: --world, --batch, --seq, --grad-accum and --micro-batches must be positive");
  DL_CHECK(in.tp >= 1 && in.pp >= 1 && in.cp >= 1, "plan: --tp, --pp and --cp must be whole sizes here, got %d, %d, %d",
           in.tp, in.pp, in.cp);
  DL_CHECK(in.world % (in.tp * in.pp * in.cp) == 0,
           "plan: --tp %d x --pp %d x --cp %d = %d ranks per replica does not divide --world %d", in.tp, in.pp, in.cp,
           in.tp * in.pp * in.cp, in.world);
  DL_CHECK(in.pp == 1 || in.grad_accum == 1,
           "plan: --grad-accum %d with --pp %d: a pipeline accumulates its --micro-batches instead", in.grad_accum,
           in.pp);
  DL_CHECK(in.pp > 1 || in.micro_batches == 1,
           "plan: --micro-batches %d needs a pipeline (--pp > 1); use --grad-accum without one", in.micro_batches);
  DL_CHECK(in.pp <= in.model.n_layer, "plan: --pp %d stages but the model has %d layers: each stage needs one", in.pp,
           in.model.n_layer);
  DL_CHECK(in.seq <= in.model.max_position, "plan: --seq %d exceeds the model's context (%d; --max-seq sets it)",
           in.seq, in.model.max_position);
  DL_CHECK(in.seq % (2 * in.cp) == 0,
           "plan: --cp %d cuts each sequence into %d equal chunks: --seq %d must be a multiple of %d", in.cp,
           2 * in.cp, in.seq, 2 * in.cp);
  DL_CHECK(rates.gemm_gflops > 0 && rates.busbw_gbs > 0, "plan: rates must be positive");
  in.model.validate();
  if (in.pp > 1) {
    check_pipeline_schedule(in.pp_schedule, in.pp, in.micro_batches, in.virtual_stages);
    DL_CHECK(in.pp * in.virtual_stages <= in.model.n_layer || in.pp_schedule != PipelineScheduleKind::kInterleaved,
             "plan: --pp %d x --virtual-stages %d model chunks but the model has %d layers: each chunk needs one", in.pp,
             in.virtual_stages, in.model.n_layer);
  }
  const Job job(in);
  DL_CHECK(in.parallel.strategy != Strategy::kNone || job.reducers == 1,
           "plan: strategy none runs one data-parallel rank, but there are %d (dp x cp)", job.reducers);

  Estimate e;
  e.input = in;
  const double bw = rates.busbw_gbs * 1e9;
  // The pipeline's makespan: the stages run (m + p - 1) slots of one micro-batch's
  // passes (and sends), (v·m + p - 1) slots of one chunk's under the interleaved
  // schedule; each stage's data-parallel reductions run in its last backward, so
  // only that micro-batch's compute can hide them.
  const double slots_run = static_cast<double>(job.virtual_stages()) * job.K;
  const double stretch = (slots_run + in.pp - 1) / slots_run;
  for (int s = 0; s < in.pp; ++s) {
    const StageCost c = stage_cost(job, s, rates);
    e.stage_memory.push_back(c.memory);
    if (s == 0 || c.memory.total() > e.memory.total()) e.memory = c.memory, e.worst_stage = s;
    const double window = in.pp > 1 ? c.compute_s / job.K : c.compute_s;
    const double dp_s = c.dp_bus / bw;
    const double exposed = std::max(c.dp_floor / bw, dp_s - window) + c.blocking / bw + c.p2p / bw * stretch;
    const double step = c.compute_s * stretch + exposed;
    if (s == 0 || step > e.step_s) {
      e.step_s = step;
      e.compute_s = c.compute_s;
      e.bubble_s = c.compute_s * (stretch - 1);
      e.exposed_comm_s = exposed;
      e.comm_bytes = static_cast<int64_t>(c.dp_bus + c.blocking + c.p2p + c.behind);
      e.comm_s = (c.dp_bus + c.blocking + c.p2p + c.behind) / bw;
    }
  }
  e.fits = memory_limit_bytes <= 0 || static_cast<double>(e.memory.total()) <= memory_limit_bytes;
  e.tokens_per_s = static_cast<double>(in.batch) * in.seq * job.K * job.dp / e.step_s;
  return e;
}

}  // namespace distllm::plan
