#include "distllm/train/data_parallel.h"

#include <cmath>

#include "distllm/base/error.h"
#include "distllm/base/strings.h"
#include "distllm/model/tensor_parallel.h"
#include "distllm/train/model_conversion.h"
#include "distllm/train/replica_check.h"
#include "distllm/train/tied_embedding.h"

namespace distllm {

DataParallel::DataParallel(const ModelConfig& config, const ParallelConfig& parallel, const AdamWConfig& adamw,
                           comm::ProcessGroupPtr world, TensorParallel tp, ContextParallel cp, PipelineStage pp)
    : config_(config),
      layout_(WholeModel::local_layout(config, tp, pp)),
      tp_(tp),
      cp_(cp),
      pp_(std::move(pp)),
      pc_(parallel),
      world_(std::move(world)),
      whole_(config_, layout_, tp_, pp_),
      sparse_(config_, layout_, world_, cp_.active(), &tracker_) {
  pc_.validate();
  DL_CHECK(world_size() % cp_.size() == 0, "the data-parallel group (%d ranks) does not hold whole cp rings of %d",
           world_size(), cp_.size());
  norm_weights_ = whole_.norm_weights();
  strategy_ = ShardingStrategy::make(context());
  optimizer_ = std::make_unique<AdamW>(layout_, adamw, owned().begin, owned().end);
  build_hooks();
}

DataParallel::DataParallel(Transformer& model, const AdamWConfig& adamw)
    : config_(model.config()),
      layout_(model.config()),
      whole_(config_, layout_, tp_, pp_),
      sparse_(config_, layout_, nullptr, false, &tracker_) {
  strategy_ = ShardingStrategy::wrap(context(), model);
  optimizer_ = std::make_unique<AdamW>(layout_, adamw);
  build_hooks();
}

DataParallel::~DataParallel() = default;

StrategyContext DataParallel::context() {
  return StrategyContext{.config = &config_, .layout = &layout_, .parallel = pc_, .world = world_, .tracker = &tracker_};
}

int DataParallel::rank() const { return world_ ? world_->rank() : 0; }
int DataParallel::world_size() const { return world_ ? world_->size() : 1; }

const ParamGatherer* DataParallel::gatherer() const {
  const GatherSchedule* s = strategy_->gather_schedule();
  return s ? &s->gatherer() : nullptr;
}

void DataParallel::reset_gathered_peak() {
  if (GatherSchedule* s = schedule()) s->gatherer().reset_peak();
}

void DataParallel::build_hooks() {
  auto make = [this](bool compute_grad, bool sync) {
    TrainHooks h;
    h.before_group_forward = [this](int g) {
      if (GatherSchedule* s = schedule()) s->before_forward(g);
    };
    h.after_group_forward = [this, compute_grad](int g) {
      if (GatherSchedule* s = schedule()) s->after_forward(g, compute_grad);
    };
    h.before_group_backward = [this](int g) {
      if (GatherSchedule* s = schedule()) s->before_backward(g);
    };
    h.group_grads_ready = [this, sync](int g) { on_grads_ready(g, sync); };
    if (compute_grad && sync && sparse_.enabled())
      h.embedding_backward = [this](const float* d, const int32_t* tokens, const int32_t* positions, int64_t rows) {
        sparse_.on_backward(d, tokens, positions, rows);
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
  const size_t buckets = strategy_->groups().buckets().size();
  s += strprintf(", %zu gradient bucket%s (cap %g MiB, first %g MiB), %s", buckets, buckets == 1 ? "" : "s",
                 pc_.bucket_mb, pc_.first_bucket_mb, mixed_precision_name(pc_.mixed_precision));
  if (pc_.shards_params())
    s += strprintf(", reshard after forward %s, prefetch %s", pc_.reshard_after_forward ? "on" : "off",
                   pc_.prefetch ? "on" : "off");
  return s;
}

// ---------------------------------------------------------------------------
// Parameters

void DataParallel::init_weights(uint64_t seed) {
  if (whole_.split()) {
    // The part of the whole model's initial weights, so any tp or pp size trains
    // the same model (held whole for a moment).
    const ParamLayout& whole = whole_.whole_layout();
    AlignedBuffer<float> full(static_cast<size_t>(whole.total_size()));
    init_weights_range(whole, seed, 0, whole.total_size(), full.data());
    load_full(full.data());
    return;
  }
  state().init_weights(layout_, seed);
}

void DataParallel::load_full(const float* full) {
  if (!whole_.split()) {
    load_local(full);
    return;
  }
  AlignedBuffer<float> local(static_cast<size_t>(layout_.total_size()));
  whole_.to_local(full, local.data());
  load_local(local.data());
}

void DataParallel::load_local(const float* local) { state().load(local); }

void DataParallel::sync_parameters() { strategy_->sync_parameters(); }

void DataParallel::gather_full(float* out) { gather_whole(state().master(), out); }

void DataParallel::gather_whole(const float* owned_state, float* out) {
  const ShardGroups& groups = strategy_->groups();
  if (!whole_.split()) {
    groups.gather_all(owned_state, out, tracker_);
    return;
  }
  AlignedBuffer<float> local(static_cast<size_t>(layout_.total_size()));
  groups.gather_all(owned_state, local.data(), tracker_);
  whole_.gather(local.data(), out, tracker_);
}

void DataParallel::check_replicas() {
  distllm::check_replicas(strategy_->replicated_state(), layout_, optimizer_->steps_taken());
}

// ---------------------------------------------------------------------------
// Checkpoints

// Every rank writes and reads only what it holds (whole_model.h): under tensor or
// pipeline parallelism its tensors are regions of the whole ones, and the reader
// assembles them for any other layout, so a checkpoint resumes at any dp, tp and
// pp size and converts to the whole model, without the whole state on any rank.
std::vector<checkpoint::ParamSpan> DataParallel::param_spans() const {
  std::vector<checkpoint::ParamSpan> all = whole_.spans(), out;  // one per layout_ tensor, in order
  for (size_t k = 0; k < all.size(); ++k)
    if (whole_.writes(layout_.tensors()[k])) out.push_back(std::move(all[k]));
  return out;
}

std::vector<checkpoint::TensorEntry> DataParallel::manifest_tensors() const {
  std::vector<checkpoint::TensorEntry> out;
  for (const ParamTensor& t : whole_.whole_layout().tensors()) out.push_back({t.name, t.shape, {}});
  return out;
}

nlohmann::json DataParallel::mesh_json() const {
  nlohmann::json j = {{"shard", shard_size()}, {"replicate", replicas()}};
  if (tp_.plan) j["tp"] = tp_.plan->size();
  if (pp_.active()) j["pp"] = pp_.layers.stages;
  return j;
}

checkpoint::ShardData DataParallel::checkpoint_shard() {
  // Replicas hold the same shard: each writes its part of it.
  const FlatRange part = strategy_->groups().replica_part();
  const int64_t at = part.begin - owned().begin;
  checkpoint::ShardData d;
  d.begin = part.begin;
  d.end = part.end;
  static float empty[1] = {0};
  auto from = [&](float* base) { return base ? base + at : empty; };
  d.states = {{"param", from(state().master())}, {"exp_avg", from(optimizer_->m())}, {"exp_avg_sq", from(optimizer_->v())}};
  return d;
}

void DataParallel::load_checkpoint(const checkpoint::CheckpointReader& reader, int64_t optimizer_steps) {
  // Every tensor this rank holds, written here or not.
  const std::vector<checkpoint::ParamSpan> spans = whole_.spans();
  const FlatRange own = owned();
  if (own.size() > 0) {
    reader.read("param", spans, own.begin, own.end, state().master());
    reader.read("exp_avg", spans, own.begin, own.end, optimizer_->m());
    reader.read("exp_avg_sq", spans, own.begin, own.end, optimizer_->v());
  }
  optimizer_->set_steps_taken(optimizer_steps);
  // The working parameters follow the masters: local for one shard, gathered
  // otherwise (each rank read only its own range).
  if (state().full_params()) strategy_->gather_params_after_step();
}

// ---------------------------------------------------------------------------
// A step

void DataParallel::begin_step() {
  sparse_.begin_step();
  state().zero_grads();
}

const TrainHooks* DataParallel::hooks(bool compute_grad, bool sync) {
  DL_CHECK(compute_grad || !sync, "internal error: sync without gradients");
  DL_CHECK(!compute_grad || sync || state().full_grads(),
           "internal error: sharded gradients must be reduced every micro-step");
  if (compute_grad && !sync) sparse_.mark_dense_scatter();  // its embedding backward scatters densely
  if (compute_grad && sync) {
    // Groups this pipeline stage does not hold have nothing to reduce (their buckets
    // hold only them: make_buckets).
    for (int g = 0; g < static_cast<int>(layout_.groups().size()); ++g)
      if (!layout_.has_group(g)) reducer().skip_bucket_of(g);
  }
  if (!compute_grad) return &hooks_forward_only_;
  return sync ? &hooks_grad_sync_ : &hooks_grad_nosync_;
}

void DataParallel::on_grads_ready(int g, bool sync) {
  if (GatherSchedule* s = schedule()) s->after_backward(g);
  if (sync && g == head_group() && sparse_.enabled() && layout_.has_group(embed_group())) {
    // The embedding table's dense gradient is final now (sparse_embedding_grads.h).
    if (sparse_.dense_part_nonzero())
      reducer().launch_bucket_of(embed_group());
    else
      reducer().skip_bucket_of(embed_group());
  }
  if (sync) reducer().group_ready(g);
}

void DataParallel::end_micro_step(bool sync) {
  // The last stage's copy of a tied embedding has no embedding backward to report
  // it: its gradients (from the head) are final now.
  // A pass over one of several chunks leaves the others' buckets (see reduce_chunk),
  // the table's copy among them.
  if (sync && pp_.layers.virtual_stages() > 1)
    reducer().launch_remaining();
  else if (sync && !pp_.layers.first() && layout_.has_group(embed_group()))
    reducer().group_ready(embed_group());
  if (sync) reducer().finish();
  if (sync) sparse_.apply(state().shard_grads(), owned());
  if (GatherSchedule* s = schedule()) s->release_all();
}

void DataParallel::reduce_chunk(const StageRange& chunk) {
  DL_CHECK(state().full_grads() != nullptr, "internal error: sharded gradients are reduced every pass");
  // In the order backward finishes them; the tied table's copy with the head.
  if (chunk.last()) {
    reducer().launch_bucket_of(head_group());
    if (!chunk.first() && layout_.has_group(embed_group())) reducer().launch_bucket_of(embed_group());
  }
  for (int l = chunk.end - 1; l >= chunk.begin; --l) reducer().launch_bucket_of(layout_.layer_group(l));
  if (chunk.first()) reducer().launch_bucket_of(embed_group());
}

void DataParallel::end_forward_only() {
  if (GatherSchedule* s = schedule()) s->release_all();
}

OptimizerResult DataParallel::optimizer_step(double lr) {
  const ShardGroups& groups = strategy_->groups();
  float* shard_grads = state().shard_grads();
  if (pp_.active()) sum_tied_embedding_grads(layout_, pp_, groups, shard_grads, tracker_);
  double ss = optimizer_->grad_sum_of_squares(shard_grads, norm_weights_.empty() ? nullptr : &norm_weights_);
  if (groups.plan().ranks() > 1) {
    tracker_.blocking(8, [&] { groups.shard_group()->allreduce(&ss, 1, comm::DType::kF64, comm::ReduceOp::kSum); });
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
  optimizer_->update(state().master(), shard_grads, lr, r.grad_norm);
  strategy_->gather_params_after_step();
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
// ParamSource and statistics

float* DataParallel::group_params(int g) { return strategy_->group_params(g); }

float* DataParallel::group_grads(int g) { return reducer().group_grads(g); }

MemoryBreakdown DataParallel::memory() const { return account_memory(*strategy_, *optimizer_, sparse_); }

}  // namespace distllm
