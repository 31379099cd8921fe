#include "distllm/train/data_parallel.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "distllm/base/error.h"
#include "distllm/base/parallel.h"
#include "distllm/base/rng.h"
#include "distllm/base/strings.h"
#include "distllm/train/model_conversion.h"
#include "distllm/comm/device_mesh.h"
#include "distllm/kernels/embedding.h"
#include "distllm/kernels/vec.h"
#include "distllm/model/tensor_parallel.h"
#include "distllm/train/bf16_buffer.h"

namespace distllm {

namespace {

constexpr comm::CallOptions kAsync{.async_op = true};

void fill_zero(float* p, int64_t n) {
  constexpr int64_t kChunk = 1 << 16;
  parallel_for(0, (n + kChunk - 1) / kChunk, [&](int64_t c) {
    int64_t lo = c * kChunk;
    std::memset(p + lo, 0, sizeof(float) * static_cast<size_t>(std::min(n, lo + kChunk) - lo));
  });
}

void copy_floats(float* dst, const float* src, int64_t n) {
  if (n > 0) std::memcpy(dst, src, sizeof(float) * static_cast<size_t>(n));
}

int64_t mib_to_floats(double mib) { return std::max<int64_t>(1, static_cast<int64_t>(mib * (1 << 20) / 4)); }

uint64_t hash_floats(const float* p, int64_t n) {
  uint64_t h = 0x243F6A8885A308D3ull ^ static_cast<uint64_t>(n);
  for (int64_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, p + i, 4);
    h = mix64(h ^ bits) + static_cast<uint64_t>(i);
  }
  return h;
}

}  // namespace

namespace {

ParamLayout shard_layout(const ModelConfig& config, const TensorParallel& tp, const PipelineStage& pp) {
  config.validate();
  if (tp.plan != nullptr) {
    DL_CHECK(config.to_hf_json() == tp.plan->full().to_hf_json(), "the tensor-parallel plan is for another model");
    DL_CHECK(tp.plan->size() == 1 || (tp.comm != nullptr && tp.comm->size() == tp.plan->size()),
             "tensor parallelism needs its group's collectives");
  }
  // The model this rank splits into stages: its tp shard, or the whole model.
  const ModelConfig& model = tp.plan ? tp.plan->local() : config;
  if (pp.active()) {
    DL_CHECK(pp.layers.stages == pp.group->size() && pp.layers.stage == pp.group->rank(),
             "internal error: pipeline stage %d/%d on rank %d of a pp group of %d", pp.layers.stage, pp.layers.stages,
             pp.group->rank(), pp.group->size());
    return ParamLayout(model, pp.layers);
  }
  return tp.plan ? tp.plan->local_layout() : ParamLayout(config);
}

}  // namespace

DataParallel::DataParallel(const ModelConfig& config, const ParallelConfig& parallel, const AdamWConfig& adamw,
                           comm::ProcessGroupPtr world, TensorParallel tp, ContextParallel cp, PipelineStage pp)
    : config_(config),
      layout_(shard_layout(config, tp, pp)),
      tp_(tp),
      cp_(cp),
      pp_(std::move(pp)),
      pc_(parallel),
      world_(std::move(world)) {
  pc_.validate();
  DL_CHECK(world_size() % cp_.size() == 0, "the data-parallel group (%d ranks) does not hold whole cp rings of %d",
           world_size(), cp_.size());
  if (tp_.active() || pp_.active()) {
    for (const ParamTensor& t : layout_.tensors()) {
      float w = 1.0f;
      if (tp_.active()) w = tp_.plan->norm_weight(*tp_.plan->local_layout().find(t.name));
      // A later stage's copy of a tied embedding: the first stage's counts.
      if (pp_.active() && !pp_.layers.first() && t.group == embed_group()) w = 0.0f;
      norm_weights_.push_back(w);
    }
  }
  const int n = world_ ? world_->size() : 1;
  DL_CHECK(pc_.strategy != Strategy::kNone || n == 1,
           "%d ranks were started but --strategy is none: pick ddp, zero1, zero2, zero3 or hsdp", n);
  build_groups();
  allocate();
  optimizer_ = std::make_unique<AdamW>(layout_, adamw, owned_.begin, owned_.end);
  build_hooks();
}

DataParallel::DataParallel(Transformer& model, const AdamWConfig& adamw)
    : config_(model.config()), layout_(model.config()) {
  plan_ = ShardPlan(layout_.total_size(), 1);
  owned_ = plan_.owned(0);
  buckets_ = make_buckets(layout_, mib_to_floats(pc_.bucket_mb), mib_to_floats(pc_.first_bucket_mb));
  full_params_ = model.params();
  full_grads_ = model.grads();
  master_ = full_params_;
  shard_grads_ = full_grads_;
  GradReducerSetup r;
  r.layout = &layout_;
  r.plan = plan_;
  r.buckets = buckets_;
  r.full_grads = full_grads_;
  r.tracker = &tracker_;
  reducer_ = std::make_unique<GradReducer>(std::move(r));
  optimizer_ = std::make_unique<AdamW>(layout_, adamw);
  build_hooks();
}

DataParallel::~DataParallel() = default;

int DataParallel::rank() const { return world_ ? world_->rank() : 0; }
int DataParallel::world_size() const { return world_ ? world_->size() : 1; }
int DataParallel::replicas() const { return replicate_group_ ? replicate_group_->size() : 1; }

void DataParallel::build_groups() {
  const int n = world_size();
  int shard = 1;
  switch (pc_.strategy) {
    case Strategy::kNone:
    case Strategy::kDdp: shard = 1; break;
    case Strategy::kZero1:
    case Strategy::kZero2:
    case Strategy::kZero3: shard = n; break;
    case Strategy::kHsdp: {
      const int hosts = world_ ? world_->num_hosts() : 1;
      shard = pc_.shard_size > 0 ? pc_.shard_size : std::max(1, n / std::max(1, hosts));
      DL_CHECK(n % shard == 0, "hsdp: the shard group size %d does not divide the %d ranks (%s)", shard, n,
               pc_.shard_size > 0 ? "--shard-size" : "ranks per host; give --shard-size");
      break;
    }
  }
  const int replicas = n / shard;
  if (n > 1) {
    if (shard == 1) {
      replicate_group_ = world_;
    } else if (replicas == 1) {
      shard_group_ = world_;
    } else {
      // Replicas outermost, shards innermost: shard peers are consecutive ranks,
      // which launchers place on one host (shared memory); replicas cross hosts.
      comm::DeviceMesh mesh(world_, {{"replicate", replicas}, {"shard", shard}});
      shard_group_ = mesh.group("shard");
      replicate_group_ = mesh.group("replicate");
    }
  }
  shard_rank_ = shard_group_ ? shard_group_->rank() : 0;
  reduce_group_ = shard_group_;
  if (shard_group_ && pc_.shards_params()) {
    // Gradient reduce-scatters get their own communicator (and thread), so the next
    // group's parameter gather never queues behind a reduction (FSDP's two streams).
    reduce_group_ = shard_group_->split(0, shard_rank_);
  }
  plan_ = ShardPlan(layout_.total_size(), shard);
  owned_ = plan_.owned(shard_rank_);
  buckets_ = make_buckets(layout_, mib_to_floats(pc_.bucket_mb), mib_to_floats(pc_.first_bucket_mb));
}

void DataParallel::allocate() {
  const int64_t total = layout_.total_size();
  if (!pc_.shards_params()) {
    own_params_.resize(static_cast<size_t>(total));
    full_params_ = own_params_.data();
  }
  if (pc_.shards_params() || bf16_params()) {
    master_buf_.resize(static_cast<size_t>(owned_.size()));
    master_ = master_buf_.data();
  } else {
    master_ = full_params_ + owned_.begin;
  }
  if (!pc_.shards_grads()) {
    own_grads_.resize(static_cast<size_t>(total));
    full_grads_ = own_grads_.data();
    shard_grads_ = full_grads_ + owned_.begin;
  } else {
    shard_grads_buf_.resize(static_cast<size_t>(owned_.size()));
    shard_grads_ = shard_grads_buf_.data();
  }
  GradReducerSetup r;
  r.layout = &layout_;
  r.plan = plan_;
  r.shard_rank = shard_rank_;
  r.shard_group = plan_.ranks() > 1 ? reduce_group_ : nullptr;
  r.replicate_group = replicate_group_;
  r.buckets = buckets_;
  r.bf16 = bf16_grads();
  r.full_grads = full_grads_;
  r.shard_grads = full_grads_ ? nullptr : shard_grads_;
  r.tracker = &tracker_;
  reducer_ = std::make_unique<GradReducer>(std::move(r));
  if (pc_.shards_params()) {
    ParamGathererSetup g;
    g.layout = &layout_;
    g.plan = plan_;
    g.shard_rank = shard_rank_;
    g.shard_group = plan_.ranks() > 1 ? shard_group_ : nullptr;
    g.bf16 = bf16_params();
    // A rank may own nothing (more ranks than aligned chunks): give it a valid pointer.
    static float empty_shard[1] = {0};
    g.master = master_ ? master_ : empty_shard;
    g.tracker = &tracker_;
    gatherer_ = std::make_unique<ParamGatherer>(std::move(g));
  }
}

void DataParallel::build_hooks() {
  auto make = [this](bool compute_grad, bool sync) {
    TrainHooks h;
    h.before_group_forward = [this](int g) { on_before_forward(g); };
    h.after_group_forward = [this, compute_grad](int g) { on_after_forward(g, compute_grad); };
    h.before_group_backward = [this](int g) { on_before_backward(g); };
    h.group_grads_ready = [this, sync](int g) { on_grads_ready(g, sync); };
    if (compute_grad && sync && sparse_embedding())
      h.embedding_backward = [this](const float* d, const int32_t* tokens, const int32_t* positions, int64_t rows) {
        on_embedding_backward(d, tokens, positions, rows);
      };
    return h;
  };
  hooks_grad_sync_ = make(true, true);
  hooks_grad_nosync_ = make(true, false);
  hooks_forward_only_ = make(false, false);
}

std::string DataParallel::describe() const {
  std::string s = strprintf("%s, %d rank%s", strategy_name(pc_.strategy), world_size(), world_size() == 1 ? "" : "s");
  if (tp_.active())
    s += strprintf(" per tensor-parallel shard, tp %d%s", tp_.plan->size(),
                   tp_.sequence_parallel ? " with sequence parallelism" : "");
  if (pp_.active()) s += strprintf(" per pipeline stage (%s)", pp_.layers.describe().c_str());
  if (world_ && world_->num_hosts() > 1) s += strprintf(" on %d hosts", world_->num_hosts());
  if (world_size() > 1) s += strprintf(" (shard %d x replicate %d)", shard_size(), replicas());
  s += strprintf(", %zu gradient bucket%s (cap %g MiB, first %g MiB), %s", buckets_.size(),
                 buckets_.size() == 1 ? "" : "s", pc_.bucket_mb, pc_.first_bucket_mb,
                 mixed_precision_name(pc_.mixed_precision));
  if (pc_.shards_params())
    s += strprintf(", reshard after forward %s, prefetch %s", pc_.reshard_after_forward ? "on" : "off",
                   pc_.prefetch ? "on" : "off");
  return s;
}

// ---------------------------------------------------------------------------
// Parameters

void DataParallel::init_weights(uint64_t seed) {
  if (whole_model_state()) {
    // The shard of the whole model's initial weights, so any tp or pp size trains
    // the same model (held whole for a moment).
    const ParamLayout whole = full_layout();
    AlignedBuffer<float> full(static_cast<size_t>(whole.total_size()));
    init_weights_range(whole, seed, 0, whole.total_size(), full.data());
    load_full(full.data());
    return;
  }
  if (full_params_) {
    // Every rank draws the same values (a pure function of the seed).
    init_weights_range(layout_, seed, 0, layout_.total_size(), full_params_);
    if (master_ != full_params_ + owned_.begin) copy_floats(master_, full_params_ + owned_.begin, owned_.size());
    refresh_working_params();
  } else {
    if (owned_.size() > 0) init_weights_range(layout_, seed, owned_.begin, owned_.end, master_);
  }
}

ParamLayout DataParallel::full_layout() const { return tp_.plan ? tp_.plan->full_layout() : ParamLayout(config_); }

const ParamLayout& DataParallel::tp_shard_layout() const {
  DL_CHECK(tp_.plan != nullptr, "internal error: no tensor-parallel plan");
  return tp_.plan->local_layout();
}

void DataParallel::whole_to_local(const float* whole, float* local) const {
  if (!pp_.active()) {
    tp_.plan->full_to_local(whole, local);
    return;
  }
  if (!tp_.plan) {
    copy_common_tensors(full_layout(), whole, layout_, local);
    return;
  }
  // The tp shard of the whole model, then this stage's tensors of it.
  AlignedBuffer<float> shard(static_cast<size_t>(tp_shard_layout().total_size()));
  tp_.plan->full_to_local(whole, shard.data());
  copy_common_tensors(tp_shard_layout(), shard.data(), layout_, local);
}

void DataParallel::load_full(const float* full) {
  if (!whole_model_state()) {
    load_shard(full);
    return;
  }
  AlignedBuffer<float> shard(static_cast<size_t>(layout_.total_size()));
  whole_to_local(full, shard.data());
  load_shard(shard.data());
}

void DataParallel::load_shard(const float* full) {
  if (full_params_) copy_floats(full_params_, full, layout_.total_size());
  if (!full_params_ || master_ != full_params_ + owned_.begin)
    copy_floats(master_, full + owned_.begin, owned_.size());
  refresh_working_params();
}

void DataParallel::refresh_working_params() {
  // bf16 parameters: the working copy is the rounded master (f32 storage, since the
  // kernels compute in f32). With one shard this is local; otherwise the all-gather
  // after each step delivers rounded values.
  if (full_params_ && bf16_params() && plan_.ranks() == 1) round_to_bf16(master_, full_params_, layout_.total_size());
}

void DataParallel::sync_parameters() {
  if (replicate_group_ && replicate_group_->size() > 1 && owned_.size() > 0) {
    tracker_.blocking(owned_.size() * 4, [&] {
      replicate_group_->broadcast(master_, static_cast<size_t>(owned_.size()), comm::DType::kF32, 0);
    });
  }
  if (full_params_) gather_params_after_step();
}

void DataParallel::gather_params_after_step() {
  if (!full_params_) return;
  if (plan_.ranks() == 1) {
    refresh_working_params();
    return;
  }
  if (!bf16_params()) {
    // In place: each rank's owned part is already where the full buffer keeps it.
    std::vector<comm::WorkPtr> works;
    for (const Bucket& b : buckets_) {
      float* out = full_params_ + b.range.begin;
      auto w = shard_group_->allgatherv(out + plan_.offset_in(shard_rank_, b.range), out, plan_.counts(b.range),
                                        comm::DType::kF32, kAsync);
      tracker_.issued(w, b.range.size() * 4);
      works.push_back(std::move(w));
    }
    for (auto& w : works) tracker_.wait(w);
    return;
  }
  AlignedBuffer<uint16_t> in, out;
  for (const Bucket& b : buckets_) {
    const FlatRange part = owned_.intersect(b.range);
    in.resize_uninitialized(static_cast<size_t>(std::max<int64_t>(1, part.size())));
    out.resize_uninitialized(static_cast<size_t>(b.range.size()));
    if (!part.empty()) f32_to_bf16_buffer(master_ + (part.begin - owned_.begin), in.data(), part.size());
    tracker_.blocking(b.range.size() * 2, [&] {
      shard_group_->allgatherv(in.data(), out.data(), plan_.counts(b.range), comm::DType::kBF16);
    });
    bf16_to_f32_buffer(out.data(), full_params_ + b.range.begin, b.range.size());
  }
}

void DataParallel::gather_full(float* out) { gather_whole(master_, out); }

void DataParallel::gather_whole(const float* owned_state, float* out) {
  if (!tp_.plan && !pp_.active()) {
    gather_shard(owned_state, out);
    return;
  }
  AlignedBuffer<float> shard(static_cast<size_t>(layout_.total_size()));
  gather_shard(owned_state, shard.data());
  // The pipeline's stages assemble the model (its tp shard under tp): each writes
  // its tensors into a zeroed buffer (the tied table from the first stage only) and
  // one all-reduce over the stages sums them.
  AlignedBuffer<float> tp_shard;
  const float* assembled = shard.data();
  if (pp_.active()) {
    const ParamLayout model = tp_.plan ? tp_shard_layout() : full_layout();
    float* dst = out;
    if (tp_.plan) {
      tp_shard.resize_uninitialized(static_cast<size_t>(model.total_size()));
      dst = tp_shard.data();
    }
    fill_zero(dst, model.total_size());
    copy_common_tensors(layout_, shard.data(), model, dst, pp_.layers.first() ? -1 : model.embed_group());
    tracker_.blocking(model.total_size() * 4, [&] {
      pp_.group->allreduce(dst, static_cast<size_t>(model.total_size()), comm::DType::kF32);
    });
    if (!tp_.plan) return;
    assembled = dst;
  }
  if (tp_.active()) {
    gather_tensor_parallel(*tp_.comm, *tp_.plan, assembled, out);
  } else {
    tp_.plan->local_to_full(assembled, out);
  }
}

void DataParallel::gather_shard(const float* owned_state, float* out) {
  const int64_t total = layout_.total_size();
  if (plan_.ranks() == 1) {
    copy_floats(out, owned_state, total);
    return;
  }
  for (const Bucket& b : buckets_) gather_range(owned_state, b.range, out + b.range.begin);
}

void DataParallel::gather_range(const float* owned_state, FlatRange range, float* out) {
  if (plan_.ranks() == 1) {
    copy_floats(out, owned_state + (range.begin - owned_.begin), range.size());
    return;
  }
  const FlatRange part = owned_.intersect(range);
  float* mine = out + plan_.offset_in(shard_rank_, range);
  if (!part.empty()) copy_floats(mine, owned_state + (part.begin - owned_.begin), part.size());
  tracker_.blocking(range.size() * 4, [&] {
    shard_group_->allgatherv(mine, out, plan_.counts(range), comm::DType::kF32);
  });
}

void DataParallel::check_replicas() {
  // Replicated state: the full working parameters (every rank), or the master shard
  // (its replicas).
  comm::ProcessGroupPtr group = full_params_ ? world_ : replicate_group_;
  if (!group || group->size() == 1) return;
  const float* base = full_params_ ? full_params_ : master_;
  const FlatRange range = full_params_ ? FlatRange{0, layout_.total_size()} : owned_;
  const auto& tensors = layout_.tensors();
  std::vector<uint64_t> mine(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    FlatRange t = FlatRange{tensors[i].offset, tensors[i].offset + tensors[i].numel}.intersect(range);
    mine[i] = hash_floats(base + (t.begin - range.begin), t.size());
  }
  std::vector<uint64_t> all(mine.size() * static_cast<size_t>(group->size()));
  group->allgather(mine.data(), all.data(), mine.size() * sizeof(uint64_t), comm::DType::kU8);
  for (int r = 1; r < group->size(); ++r) {
    for (size_t i = 0; i < tensors.size(); ++i) {
      if (all[static_cast<size_t>(r) * mine.size() + i] != all[i])
        throw_error(strprintf("replica check after step %lld: %s differs between rank %d and rank %d of group '%s' "
                              "(parameters diverged across data-parallel replicas)",
                              (long long)optimizer_->steps_taken(), tensors[i].name.c_str(), group->world_ranks()[0],
                              group->world_ranks()[static_cast<size_t>(r)], group->name().c_str()));
    }
  }
}

// ---------------------------------------------------------------------------
// Checkpoints

// Under tensor parallelism checkpoints hold the whole model's tensors, as one
// process would write them, so they load at any tp size (and without tp): each rank
// gathers the whole state (its dp shards, then its tp shards) and writes a
// 1 / (dp x tp) range of it. That costs the whole state's memory on every rank for
// the save's duration; resharding by tensor slices would avoid it.
std::vector<checkpoint::ParamSpan> DataParallel::param_spans() const {
  return checkpoint_spans(whole_model_state() ? full_layout() : layout_);
}

nlohmann::json DataParallel::mesh_json() const {
  nlohmann::json j = {{"shard", shard_size()}, {"replicate", replicas()}};
  if (tp_.plan) j["tp"] = tp_.plan->size();
  if (pp_.active()) j["pp"] = pp_.layers.stages;
  return j;
}

checkpoint::ShardData DataParallel::checkpoint_shard() {
  if (whole_model_state()) return whole_checkpoint_shard();
  // Replicas hold the same shard: replica k writes the k-th part of it.
  const int reps = replicas();
  const int rep = replicate_group_ ? replicate_group_->rank() : 0;
  ShardPlan split(owned_.size(), reps);
  const FlatRange part = split.owned(rep);
  checkpoint::ShardData d;
  d.begin = owned_.begin + part.begin;
  d.end = owned_.begin + part.end;
  static float empty[1] = {0};
  auto at = [&](float* base) { return base ? base + part.begin : empty; };
  d.states = {{"param", at(master_)}, {"exp_avg", at(optimizer_->m())}, {"exp_avg_sq", at(optimizer_->v())}};
  return d;
}

checkpoint::ShardData DataParallel::whole_checkpoint_shard() {
  const ParamLayout whole = full_layout();
  const int64_t total = whole.total_size();
  const float* states[3] = {master_, optimizer_->m(), optimizer_->v()};
  for (int k = 0; k < 3; ++k) {
    whole_state_[k].resize(static_cast<size_t>(total));
    gather_whole(states[k], whole_state_[k].data());
  }
  // Every rank of the model's split (tp shards x pipeline stages) writes a part.
  const int tp_size = tp_.plan ? tp_.plan->size() : 1, tp_rank = tp_.plan ? tp_.plan->rank() : 0;
  const int split = (pp_.active() ? pp_.layers.stages : 1) * tp_size;
  const int writers = world_size() * split;
  const int writer = rank() * split + (pp_.active() ? pp_.layers.stage : 0) * tp_size + tp_rank;
  const FlatRange part = ShardPlan(total, writers).owned(writer);
  checkpoint::ShardData d;
  d.begin = part.begin;
  d.end = part.end;
  d.states = {{"param", whole_state_[0].data() + part.begin},
              {"exp_avg", whole_state_[1].data() + part.begin},
              {"exp_avg_sq", whole_state_[2].data() + part.begin}};
  return d;
}

void DataParallel::load_checkpoint(const checkpoint::CheckpointReader& reader, int64_t optimizer_steps) {
  const std::vector<checkpoint::ParamSpan> spans = param_spans();
  if (whole_model_state()) {
    // Every rank reads the whole state and keeps its tp shard's (or pipeline
    // stage's) owned range.
    const ParamLayout whole_layout = full_layout();
    AlignedBuffer<float> whole(static_cast<size_t>(whole_layout.total_size()));
    AlignedBuffer<float> shard(static_cast<size_t>(layout_.total_size()));
    float* targets[3] = {master_, optimizer_->m(), optimizer_->v()};
    const char* names[3] = {"param", "exp_avg", "exp_avg_sq"};
    for (int k = 0; k < 3; ++k) {
      reader.read(names[k], spans, 0, whole_layout.total_size(), whole.data());
      whole_to_local(whole.data(), shard.data());
      if (owned_.size() > 0) copy_floats(targets[k], shard.data() + owned_.begin, owned_.size());
    }
  } else if (owned_.size() > 0) {
    reader.read("param", spans, owned_.begin, owned_.end, master_);
    reader.read("exp_avg", spans, owned_.begin, owned_.end, optimizer_->m());
    reader.read("exp_avg_sq", spans, owned_.begin, owned_.end, optimizer_->v());
  }
  optimizer_->set_steps_taken(optimizer_steps);
  // The working parameters follow the masters: local for one shard, gathered
  // otherwise (each rank read only its own range).
  if (full_params_) gather_params_after_step();
}

// ---------------------------------------------------------------------------
// A step

void DataParallel::begin_step() {
  embed_dense_dirty_ = false;
  if (full_grads_)
    fill_zero(full_grads_, layout_.total_size());
  else
    fill_zero(shard_grads_, owned_.size());
}

const TrainHooks* DataParallel::hooks(bool compute_grad, bool sync) {
  DL_CHECK(compute_grad || !sync, "internal error: sync without gradients");
  DL_CHECK(!compute_grad || sync || full_grads_,
           "internal error: sharded gradients must be reduced every micro-step");
  in_sync_ = sync;
  if (compute_grad && !sync) embed_dense_dirty_ = true;  // its embedding backward scatters densely
  if (compute_grad && sync) {
    // Groups this pipeline stage does not hold have nothing to reduce (their buckets
    // hold only them: make_buckets).
    for (int g = 0; g < static_cast<int>(layout_.groups().size()); ++g)
      if (!layout_.has_group(g)) reducer_->skip_bucket_of(g);
  }
  if (!compute_grad) return &hooks_forward_only_;
  return sync ? &hooks_grad_sync_ : &hooks_grad_nosync_;
}

void DataParallel::on_before_forward(int g) {
  if (!gatherer_) return;
  const bool tied = layout_.head_uses_embedding();
  if (g == head_group() && tied) gatherer_->prefetch(embed_group());
  gatherer_->prefetch(g);
  // A pipeline stage prefetches only the groups it holds.
  if (pc_.prefetch && g < head_group() && layout_.has_group(g + 1)) {
    gatherer_->prefetch(g + 1);
    if (g + 1 == head_group() && tied) gatherer_->prefetch(embed_group());
  }
}

void DataParallel::on_after_forward(int g, bool compute_grad) {
  if (!gatherer_) return;
  if (!compute_grad) {
    gatherer_->release(g);
    if (g == head_group()) gatherer_->release_all();
    return;
  }
  // The embedding's parameters are not needed in backward (only a tied head reads
  // them again, and it gathers them itself).
  if (pc_.reshard_after_forward || g == embed_group()) gatherer_->release(g);
}

void DataParallel::on_before_backward(int g) {
  if (!gatherer_) return;
  gatherer_->prefetch(g);
  if (pc_.prefetch && g - 1 > embed_group() && layout_.has_group(g - 1)) gatherer_->prefetch(g - 1);
}

void DataParallel::on_grads_ready(int g, bool sync) {
  if (gatherer_) {
    if (g == head_group()) {
      gatherer_->release(g);
      gatherer_->release(embed_group());
      if (pc_.prefetch && config_.n_layer > 0 && layout_.has_group(layout_.layer_group(config_.n_layer - 1)))
        gatherer_->prefetch(layout_.layer_group(config_.n_layer - 1));
    } else if (g != embed_group()) {
      gatherer_->release(g);
    }
  }
  if (sync && g == head_group() && sparse_embedding() && layout_.has_group(embed_group())) {
    // The embedding table's dense gradient is final now (see data_parallel.h).
    if (layout_.head_uses_embedding() || embed_dense_dirty_)
      reducer_->launch_bucket_of(embed_group());
    else
      reducer_->skip_bucket_of(embed_group());
  }
  if (sync) reducer_->group_ready(g);
}

void DataParallel::on_embedding_backward(const float* d_out, const int32_t* tokens, const int32_t* positions,
                                         int64_t rows) {
  const int C = config_.n_embd;
  const int n = world_size();
  // The union of the token ids every rank used (sorted, so all ranks agree on it).
  std::vector<int32_t> all(static_cast<size_t>(rows) * n);
  tracker_.blocking(rows * 4 * n, [&] {
    world_->allgather(tokens, all.data(), static_cast<size_t>(rows), comm::DType::kI32);
  });
  std::sort(all.begin(), all.end());
  all.erase(std::unique(all.begin(), all.end()), all.end());
  // Under tensor parallelism -1 marks tokens whose rows another tp rank holds.
  all.erase(all.begin(), std::lower_bound(all.begin(), all.end(), 0));
  const int64_t token_rows = static_cast<int64_t>(all.size());
  int64_t position_rows = 0;
  if (config_.is_gpt2())
    for (int64_t i = 0; i < rows; ++i) position_rows = std::max<int64_t>(position_rows, positions[i] + 1);
  if (config_.is_gpt2() && cp_.active()) {
    // The ranks of a cp ring hold different positions: agree on the rows reduced.
    tracker_.blocking(8, [&] { world_->allreduce(&position_rows, 1, comm::DType::kI64, comm::ReduceOp::kMax); });
  }
  std::vector<int32_t> index(static_cast<size_t>(rows));
  for (int64_t i = 0; i < rows; ++i)
    index[static_cast<size_t>(i)] =
        tokens[i] < 0 ? -1 : static_cast<int32_t>(std::lower_bound(all.begin(), all.end(), tokens[i]) - all.begin());
  // This rank's contribution to those rows, in the order the dense scatter adds them.
  sparse_grads_.resize(static_cast<size_t>((token_rows + position_rows) * C));
  sparse_peak_ = std::max(sparse_peak_, static_cast<int64_t>(sparse_grads_.size() * sizeof(float)));
  float* token_part = sparse_grads_.data();
  float* position_part = config_.is_gpt2() ? token_part + token_rows * C : nullptr;
  kernels::embedding_backward(token_part, position_part, d_out, index.data(), positions, rows, C);
  tracker_.blocking(static_cast<int64_t>(sparse_grads_.size()) * 4, [&] {
    world_->allreduce(sparse_grads_.data(), sparse_grads_.size(), comm::DType::kF32);
  });
  // The embedding group holds the token table first, then gpt2's position table.
  const ParamGroup& eg = layout_.groups()[static_cast<size_t>(embed_group())];
  const int64_t wte = layout_.tensors()[static_cast<size_t>(eg.tensors[0])].offset;
  sparse_offsets_.clear();
  for (int32_t t : all) sparse_offsets_.push_back(wte + static_cast<int64_t>(t) * C);
  if (config_.is_gpt2()) {
    const int64_t wpe = layout_.tensors()[static_cast<size_t>(eg.tensors[1])].offset;
    for (int64_t p = 0; p < position_rows; ++p) sparse_offsets_.push_back(wpe + p * C);
  }
  sparse_pending_ = true;
}

void DataParallel::apply_sparse_embedding_grads() {
  if (!sparse_pending_) return;
  sparse_pending_ = false;
  const int64_t C = config_.n_embd;
  // Added after the dense part's reduction (which works in place): each rank adds
  // the rows, or their parts, that fall in its gradient shard.
  for (size_t r = 0; r < sparse_offsets_.size(); ++r) {
    const FlatRange row = FlatRange{sparse_offsets_[r], sparse_offsets_[r] + C}.intersect(owned_);
    if (row.empty()) continue;
    float* dst = shard_grads_ + (row.begin - owned_.begin);
    const float* src = sparse_grads_.data() + static_cast<int64_t>(r) * C + (row.begin - sparse_offsets_[r]);
    for (int64_t i = 0; i < row.size(); ++i) dst[i] += src[i];
  }
  sparse_grads_.release();
}

void DataParallel::end_micro_step(bool sync) {
  // The last stage's copy of a tied embedding has no embedding backward to report
  // it: its gradients (from the head) are final now.
  // A pass over one of several chunks leaves the others' buckets (see reduce_chunk),
  // the table's copy among them.
  if (sync && pp_.layers.virtual_stages() > 1)
    reducer_->launch_remaining();
  else if (sync && !pp_.layers.first() && layout_.has_group(embed_group()))
    reducer_->group_ready(embed_group());
  if (sync) reducer_->finish();
  if (sync) apply_sparse_embedding_grads();
  if (gatherer_) gatherer_->release_all();
}

void DataParallel::reduce_chunk(const StageRange& chunk) {
  DL_CHECK(full_grads_ != nullptr, "internal error: sharded gradients are reduced every pass");
  // In the order backward finishes them; the tied table's copy with the head.
  if (chunk.last()) {
    reducer_->launch_bucket_of(head_group());
    if (!chunk.first() && layout_.has_group(embed_group())) reducer_->launch_bucket_of(embed_group());
  }
  for (int l = chunk.end - 1; l >= chunk.begin; --l) reducer_->launch_bucket_of(layout_.layer_group(l));
  if (chunk.first()) reducer_->launch_bucket_of(embed_group());
}

void DataParallel::end_forward_only() {
  if (gatherer_) gatherer_->release_all();
}

void DataParallel::sum_tied_embedding_grads() {
  const StageChunks& r = pp_.layers;
  if (!layout_.head_uses_embedding() || !layout_.has_group(embed_group()) || r.is_whole()) return;
  // The first and the last stage swap their (data-parallel reduced) gradients of the
  // table and add them. The stages lay the table out at different flat offsets, so
  // under a sharded strategy their shards cover different rows: each assembles the
  // whole table's gradient from its dp group's shards first.
  const ParamGroup& g = layout_.groups()[static_cast<size_t>(embed_group())];
  const FlatRange range{g.offset, g.offset + g.size};
  AlignedBuffer<float> mine(static_cast<size_t>(g.size)), theirs(static_cast<size_t>(g.size));
  gather_range(shard_grads_, range, mine.data());
  const int peer = r.first() ? r.stages - 1 : 0;
  const comm::P2POp ops[2] = {
      {comm::P2POp::Kind::kSend, mine.data(), static_cast<size_t>(g.size), comm::DType::kF32, peer},
      {comm::P2POp::Kind::kRecv, theirs.data(), static_cast<size_t>(g.size), comm::DType::kF32, peer}};
  tracker_.blocking(g.size * 8, [&] { pp_.group->batch_p2p(ops); });
  const FlatRange part = owned_.intersect(range);
  if (part.empty()) return;
  float* dst = shard_grads_ + (part.begin - owned_.begin);
  const int64_t at = part.begin - range.begin;
  for (int64_t i = 0; i < part.size(); ++i) dst[i] = mine[at + i] + theirs[at + i];  // the same sum on both stages
}

OptimizerResult DataParallel::optimizer_step(double lr) {
  if (pp_.active()) sum_tied_embedding_grads();
  double ss = optimizer_->grad_sum_of_squares(shard_grads_, norm_weights_.empty() ? nullptr : &norm_weights_);
  if (plan_.ranks() > 1) {
    tracker_.blocking(8, [&] { shard_group_->allreduce(&ss, 1, comm::DType::kF64, comm::ReduceOp::kSum); });
  }
  if (tp_.active()) {
    // Every tp shard's part (f32 is enough for a norm that only scales the step).
    float part = static_cast<float>(ss);
    tp_.comm->allreduce_sum(&part, 1);
    ss = part;
  }
  if (pp_.active()) tracker_.blocking(8, [&] { pp_.group->allreduce(&ss, 1, comm::DType::kF64); });
  OptimizerResult r;
  r.grad_norm = std::sqrt(ss);
  if (!std::isfinite(r.grad_norm)) return r;  // the caller stops; every rank sees the same norm
  optimizer_->update(master_, shard_grads_, lr, r.grad_norm);
  gather_params_after_step();
  if (pc_.check_replicas) check_replicas();
  return r;
}

CommTime DataParallel::take_comm_time() {
  CommTime t = tracker_.take();
  if (tp_.active()) {
    const TensorParallelComm::Totals tp = tp_.comm->take_totals();
    t.busy_s += tp.seconds;
    t.exposed_s += tp.seconds;
    t.bytes += tp.bytes;
  }
  return t;
}

void DataParallel::allreduce_sum(double* values, int n) {
  if (world_size() == 1) return;
  tracker_.blocking(n * 8, [&] { world_->allreduce(values, static_cast<size_t>(n), comm::DType::kF64); });
}

void DataParallel::allreduce_sum(int64_t* values, int n) {
  if (world_size() == 1) return;
  tracker_.blocking(n * 8, [&] { world_->allreduce(values, static_cast<size_t>(n), comm::DType::kI64); });
}

void DataParallel::allreduce_max(double* values, int n) {
  if (world_size() == 1) return;
  tracker_.blocking(n * 8, [&] {
    world_->allreduce(values, static_cast<size_t>(n), comm::DType::kF64, comm::ReduceOp::kMax);
  });
}

// ---------------------------------------------------------------------------
// ParamSource

float* DataParallel::group_params(int g) {
  if (full_params_) return full_params_ + layout_.groups().at(static_cast<size_t>(g)).offset;
  return gatherer_->acquire(g);
}

float* DataParallel::group_grads(int g) { return reducer_->group_grads(g); }

MemoryBreakdown DataParallel::memory() const {
  MemoryBreakdown m;
  const int64_t total = layout_.total_size() * 4;
  m.params = full_params_ ? total : 0;
  m.master = static_cast<int64_t>(master_buf_.size() * 4);
  m.grads = full_grads_ ? total : static_cast<int64_t>(shard_grads_buf_.size() * 4);
  m.optimizer = static_cast<int64_t>(optimizer_->state_bytes());
  m.gathered_peak = gatherer_ ? gatherer_->peak_bytes() : 0;
  m.buckets_peak = reducer_->peak_bytes();
  m.sparse_rows = sparse_peak_;
  return m;
}

}  // namespace distllm
