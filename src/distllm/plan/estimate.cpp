#include <algorithm>
#include <cmath>

#include "distllm/base/error.h"
#include "distllm/base/strings.h"
#include "distllm/model/param_layout.h"
#include "distllm/model/tensor_parallel.h"
#include "distllm/plan/plan.h"
#include "distllm/train/shard_plan.h"

namespace distllm::plan {
namespace {

constexpr int64_t kF32 = 4;

int64_t mib_to_floats(double mib) { return std::max<int64_t>(1, static_cast<int64_t>(mib * (1 << 20) / 4)); }

// What TrainGraph allocates for (batch, seq) with the given checkpointing. `c` is
// the (tensor-parallel shard's) config, `vocab` the whole vocabulary; R of the B*T
// rows of the residual stream are this rank's (all, or 1/tp with sequence
// parallelism, which also adds its gather/scatter buffers).
int64_t activation_bytes(const ModelConfig& c, int vocab, int B, int T, int64_t R, bool sp,
                         const ActivationCheckpointing& ckpt) {
  const int64_t BT = static_cast<int64_t>(B) * T, C = c.n_embd;
  const int64_t per_layer = BT * C * 2 + R * C + R * 4 + BT * c.qkv_dim() + BT * c.attn_dim() +
                            static_cast<int64_t>(B) * c.n_head * T + BT * c.mlp_in_dim() + BT * c.mlp_act_dim();
  int64_t floats = 0;
  int checkpointed = 0;
  for (int l = 0; l < c.n_layer; ++l) {
    floats += R * C;  // every layer's input is kept
    if (ckpt.applies(l))
      ++checkpointed;
    else
      floats += per_layer;
  }
  if (checkpointed > 0) floats += per_layer;  // one shared set for recomputation
  floats += R * C + BT * C + R * 2 + BT;      // final norm input/output, mean, rstd, losses
  floats += R * C + BT * C + BT * c.qkv_dim() + BT * c.attn_dim() + BT * c.mlp_in_dim() + BT * c.mlp_act_dim();
  if (sp) floats += 2 * BT * C + R * C;  // partial sums, gathered gradient, this rank's input gradient
  const int64_t chunk = std::min(BT, std::max<int64_t>(64, (int64_t(256) << 20) / (int64_t(vocab) * 4)));
  floats += chunk * c.vocab_size;
  return floats * kF32;
}

// FLOPs of one token's forward + backward (PaLM's count), plus the forward of the
// layers recomputed under activation checkpointing.
double flops_per_token(const ModelConfig& c, int T, const ActivationCheckpointing& ckpt) {
  ParamLayout layout(c);
  double matmul = 0, layer = 0;
  for (const auto& t : layout.tensors()) {
    if (t.name == "transformer.wpe.weight") continue;
    if (t.name == "model.embed_tokens.weight" && !c.tie_embeddings) continue;
    matmul += static_cast<double>(t.numel);
    if (t.group != layout.embed_group() && t.group != layout.head_group() && t.shape.size() == 2)
      layer += static_cast<double>(t.numel);
  }
  const double attn = 12.0 * c.n_layer * T * c.attn_dim();
  int recomputed = 0;
  for (int l = 0; l < c.n_layer; ++l) recomputed += ckpt.applies(l);
  const double per_layer_fwd = 2.0 * layer / c.n_layer + 4.0 * T * c.attn_dim();
  return 6.0 * matmul + attn + recomputed * per_layer_fwd;
}

// Over the data-parallel ranks (world / tp).
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

}  // namespace

Estimate estimate(const PlanInput& in, const MachineRates& rates, double memory_limit_bytes) {
  DL_CHECK(in.world >= 1 && in.batch >= 1 && in.seq >= 1 && in.grad_accum >= 1 && in.tp >= 1,
           "plan: world, tp, batch, seq and grad-accum must be positive");
  DL_CHECK(in.world % in.tp == 0, "plan: tp %d does not divide the %d ranks", in.tp, in.world);
  const int dp = in.world / in.tp;
  DL_CHECK(in.parallel.strategy != Strategy::kNone || dp == 1,
           "plan: strategy none runs one data-parallel rank, but there are %d", dp);
  DL_CHECK(rates.gemm_gflops > 0 && rates.busbw_gbs > 0, "plan: rates must be positive");
  in.model.validate();
  // The largest shard (the last rank's: balanced splits give it the remainders).
  const TensorParallelPlan tp_plan(in.model, in.tp, in.tp - 1);
  const ModelConfig& cfg = tp_plan.local();
  const ParamLayout& layout = tp_plan.local_layout();
  const ParallelConfig& pc = in.parallel;
  const int S = shard_group_size(in, dp);
  DL_CHECK(dp % S == 0, "plan: the shard group size %d does not divide the %d data-parallel ranks", S, dp);
  const int R = dp / S;
  const bool sp = in.sequence_parallel && in.tp > 1;
  const int64_t BT = static_cast<int64_t>(in.batch) * in.seq;
  const int64_t rows = sp ? (BT + in.tp - 1) / in.tp : BT;
  const int64_t total = layout.total_size();
  ShardPlan shards(total, S);
  const int64_t owned = shards.max_shard();
  const bool bf16_params = pc.mixed_precision == MixedPrecision::kBf16;
  const bool bf16_grads = pc.mixed_precision != MixedPrecision::kFp32;
  std::vector<Bucket> buckets = make_buckets(layout, mib_to_floats(pc.bucket_mb), mib_to_floats(pc.first_bucket_mb));

  Estimate e;
  e.input = in;
  MemoryPlan& m = e.memory;
  m.params = pc.shards_params() ? 0 : total * kF32;
  m.master = (pc.shards_params() || bf16_params) ? owned * kF32 : 0;
  m.grads = pc.shards_grads() ? owned * kF32 : total * kF32;
  m.optimizer = 2 * owned * kF32;
  m.activations = activation_bytes(cfg, in.model.vocab_size, in.batch, in.seq, rows, sp, in.checkpointing);

  // Gathered groups: the most alive at once as the graph walks the groups (the
  // current one, the prefetched next, a tied head's embedding).
  if (pc.shards_params()) {
    auto span = [&](int g) { return layout.group_span(g) * kF32; };
    const int embed = layout.embed_group(), head = layout.head_group();
    const bool tied = layout.head_uses_embedding();
    const int next = pc.prefetch ? 1 : 0;
    int64_t peak = span(embed) + next * span(layout.layer_group(0));
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
    for (const Bucket& b : buckets) {
      int64_t bytes = b.range.size() * kF32;
      if (b.first_group == layout.embed_group() && layout.head_uses_embedding())
        embed_bucket = bytes;
      else
        sizes.push_back(bytes);
    }
    std::sort(sizes.rbegin(), sizes.rend());
    // Without communication (one rank) a bucket is done the moment it is full.
    // Otherwise: the one filling and two in flight, where a tied embedding's bucket,
    // reduced from the head on, is one of the two.
    size_t alive = S == 1 && R == 1 ? 1 : (embed_bucket > 0 && in.world > 1 ? 2 : 3);
    int64_t three = 0, two = 0;
    for (size_t i = 0; i < sizes.size() && i < alive; ++i) (i < 2 ? two : three) += sizes[i];
    three += two;
    if (pc.shards_grads())
      m.comm_buffers = embed_bucket + three + (bf16_grads ? (embed_bucket + two) / 2 : 0);
    else if (bf16_grads)
      m.comm_buffers = std::max(two, embed_bucket) / 2;
    if (bf16_params && !pc.shards_params() && S > 1)
      m.comm_buffers = std::max(m.comm_buffers, (sizes.empty() ? embed_bucket : sizes[0]) / 2 + owned * 2);
  }
  // The embedding rows reduced on their own (DataParallel): every rank's tokens, at
  // most the vocabulary, plus gpt2's positions.
  if (dp > 1) {
    const int64_t tokens = std::min<int64_t>(cfg.vocab_size, static_cast<int64_t>(dp) * in.batch * in.seq);
    m.comm_buffers += (tokens + (cfg.is_gpt2() ? in.seq : 0)) * cfg.n_embd * kF32;
  }
  e.fits = memory_limit_bytes <= 0 || static_cast<double>(m.total()) <= memory_limit_bytes;

  // Communication per optimizer step (bus bytes: what nccl-tests' busbw counts).
  const double psi = static_cast<double>(total) * kF32;
  const double gbytes = psi * (bf16_grads ? 0.5 : 1.0);
  const double pbytes = psi * (bf16_params ? 0.5 : 1.0);
  const int K = in.grad_accum;
  auto ring = [](int n) { return n > 1 ? static_cast<double>(n - 1) / n : 0.0; };
  double bus = 0, exposed_floor = 0;
  const double last_bucket = static_cast<double>(buckets.back().range.size()) / static_cast<double>(total);
  switch (pc.strategy) {
    case Strategy::kNone: break;
    case Strategy::kDdp:
      bus = 2 * ring(R) * gbytes;
      exposed_floor = bus * last_bucket;
      break;
    case Strategy::kZero1:
    case Strategy::kZero2: {
      const double rs = ring(S) * gbytes * (pc.strategy == Strategy::kZero2 ? K : 1);
      const double ag = ring(S) * pbytes;
      bus = rs + ag;
      exposed_floor = ag + rs / (pc.strategy == Strategy::kZero2 ? K : 1) * last_bucket;
      break;
    }
    case Strategy::kZero3:
    case Strategy::kHsdp: {
      const double gathers = pc.reshard_after_forward ? 2.0 : 1.0;
      const double ag = ring(S) * pbytes * gathers * K;
      const double rs = ring(S) * gbytes * K;
      const double ar = 2 * ring(R) * gbytes / S;
      bus = ag + rs + ar;
      const double first_group = static_cast<double>(layout.group_span(layout.embed_group())) / total;
      exposed_floor = (ring(S) * pbytes * first_group + rs / K * last_bucket) * K + ar * last_bucket;
      break;
    }
  }
  // Tensor parallelism: per micro-batch, 4 all-reduces of [B*T, C] per layer (2 more
  // per recomputed layer), the embedding's and the head's; blocking, so exposed.
  double tp_bus = 0;
  if (in.tp > 1) {
    int recomputed = 0;
    for (int l = 0; l < cfg.n_layer; ++l) recomputed += in.checkpointing.applies(l);
    const double allreduces = 4.0 * cfg.n_layer + 2.0 * recomputed + 2.0;
    tp_bus = allreduces * 2 * ring(in.tp) * static_cast<double>(BT) * cfg.n_embd * kF32 * K;
  }
  e.comm_bytes = static_cast<int64_t>(bus + tp_bus);
  e.comm_s = (bus + tp_bus) / (rates.busbw_gbs * 1e9);
  const double tokens = static_cast<double>(in.batch) * in.seq * K;
  e.compute_s = flops_per_token(in.model, in.seq, in.checkpointing) / in.tp * tokens / (rates.gemm_gflops * 1e9);
  const double dp_comm_s = bus / (rates.busbw_gbs * 1e9);
  e.exposed_comm_s = std::max(exposed_floor / (rates.busbw_gbs * 1e9), dp_comm_s - e.compute_s) +
                     tp_bus / (rates.busbw_gbs * 1e9);
  e.step_s = e.compute_s + e.exposed_comm_s;
  e.tokens_per_s = tokens * dp / e.step_s;
  return e;
}

std::vector<Estimate> compare(const PlanInput& base, const MachineRates& rates, double memory_limit_bytes) {
  if (base.tp == 0) {
    // Every tensor-parallel size that divides the world and splits the model.
    std::vector<Estimate> out;
    for (int tp = 1; tp <= base.world; ++tp) {
      if (base.world % tp != 0) continue;
      try {
        TensorParallelPlan check(base.model, tp, 0);
      } catch (const Error&) {
        continue;
      }
      PlanInput in = base;
      in.tp = tp;
      for (Estimate& e : compare(in, rates, memory_limit_bytes)) out.push_back(std::move(e));
    }
    return out;
  }
  std::vector<Estimate> out;
  const int dp = base.world / std::max(1, base.tp);
  std::vector<Strategy> strategies = {Strategy::kDdp, Strategy::kZero1, Strategy::kZero2, Strategy::kZero3};
  if (dp == 1) strategies = {Strategy::kNone, Strategy::kZero3};
  if (base.hosts > 1 && dp % base.hosts == 0) strategies.push_back(Strategy::kHsdp);
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

std::string describe_choice(const Estimate& e) {
  std::string s = strategy_name(e.input.parallel.strategy);
  if (e.input.tp > 1) s += strprintf(" x tp%d%s", e.input.tp, e.input.sequence_parallel ? "+sp" : "");
  if (e.input.checkpointing.every > 0) s += " + activation checkpointing " + e.input.checkpointing.describe();
  return s;
}

}  // namespace distllm::plan
