// The strategy object between the trainer and the model: it owns the parameters
// (full, or a shard), the gradients (full, or a shard), the optimizer state (a
// shard), supplies the training graph's hooks, and makes the step's decisions
// collectively (gradient norm, loss, stop). It is a facade over parts that each
// keep one concern and its cross-rank ordering:
//
//   sharding_strategy.h       none/DDP, ZeRO-1/2/3 or HSDP: groups, buffers, the
//                             ZeRO-3 gather schedule, gradient reduction
//   sparse_embedding_grads.h  the embedding rows' gradients reduced on their own
//   tied_embedding.h          a pipeline's two copies of a tied table
//   whole_model.h             tensor/pipeline parallel parts <-> the whole model
//   memory_breakdown.h        bytes by category;  replica_check.h  the debug check
//
// A step is:
//   begin_step();
//   for each micro-batch: hooks(sync) -> graph forward/backward -> end_micro_step(sync)
//   optimizer_step(lr)      // global norm, clipping, AdamW on the shard, all-gather
// With gradients kept in a full buffer (none, DDP, ZeRO-1) only the last micro-step
// synchronises (sync); with sharded gradients every micro-step does.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "distllm/base/aligned_buffer.h"
#include "distllm/checkpoint/shard_io.h"
#include "distllm/comm/process_group.h"
#include "distllm/model/param_source.h"
#include "distllm/model/train_graph.h"
#include "distllm/model/transformer.h"
#include "distllm/train/comm_tracker.h"
#include "distllm/train/memory_breakdown.h"
#include "distllm/train/optimizer.h"
#include "distllm/train/parallel_config.h"
#include "distllm/train/pipeline_stage.h"
#include "distllm/train/shard_plan.h"
#include "distllm/train/sharding_strategy.h"
#include "distllm/train/sparse_embedding_grads.h"
#include "distllm/train/whole_model.h"

namespace distllm {

struct OptimizerResult {
  double grad_norm = 0;  // before clipping; the same on every rank
};

// Under tensor or pipeline parallelism each rank runs one of these over its part of
// the model (layout(): its tp shard, its stage's groups, or both; whole_model.h),
// with `world` the data-parallel group of the ranks holding the same part: the
// strategy shards and reduces that part's flat buffers among them. The gradient
// norm adds the parts over the tp and pp groups (replicated tensors and a tied
// table's second copy once); a pipeline's tied table is summed between its first
// and last stage before the step (tied_embedding.h). init_weights, load_full and
// gather_full deal in the whole model; checkpoints in each rank's part.
class DataParallel : public ParamSource {
 public:
  // A model of `config` trained by `world` (null: one process, strategy none), and
  // with `tp` active, one tensor-parallel shard of it (plan and comm outlive this);
  // with `pp` active, one pipeline stage of it.
  // Parameters start at zero: call init_weights or load_full next.
  // With `cp` active, `world` is the dp x cp group (flattened with cp fastest): its
  // ranks reduce gradients together, and each cp ring shares its batches.
  DataParallel(const ModelConfig& config, const ParallelConfig& parallel, const AdamWConfig& adamw,
               comm::ProcessGroupPtr world, TensorParallel tp = {}, ContextParallel cp = {}, PipelineStage pp = {});
  // One process training an existing model in place (its buffers are used).
  DataParallel(Transformer& model, const AdamWConfig& adamw);
  ~DataParallel() override;
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  const ModelConfig& config() const { return config_; }  // the whole model
  const ParamLayout& layout() const { return layout_; }   // of the flat buffers (a tp shard's)
  const TensorParallel& tensor_parallel() const { return tp_; }
  const ContextParallel& context_parallel() const { return cp_; }
  const PipelineStage& pipeline() const { return pp_; }
  // The ranks drawing different batches: world ranks / cp.
  int data_rank() const { return rank() / cp_.size(); }
  int data_ranks() const { return world_size() / cp_.size(); }
  const ParallelConfig& parallel() const { return pc_; }
  int rank() const;        // in the world (0 for one process)
  int world_size() const;  // 1 for one process
  int shard_size() const { return strategy_->groups().plan().ranks(); }
  int replicas() const { return strategy_->groups().replicas(); }
  FlatRange owned() const { return strategy_->groups().owned(); }
  const comm::ProcessGroupPtr& world() const { return world_; }
  bool sync_every_micro_step() const { return state().full_grads() == nullptr; }

  // Initial weights as Transformer::init_weights(seed) makes them (each rank fills
  // only what it holds), or every rank's copy of the whole model's parameters (e.g.
  // loaded from a Hugging Face directory; the full layout of config()).
  void init_weights(uint64_t seed);
  void load_full(const float* full_params);
  // Makes every replica of every parameter equal to its owner's (DDP: rank 0's).
  void sync_parameters();
  // The whole model's f32 (master) parameters (the full layout of config()), on
  // every rank.
  void gather_full(float* out);
  // Debug: throws naming the first rank whose replicated parameters differ.
  void check_replicas();

  // ---- checkpoints ----
  // Every rank writes its own part and no rank holds more (whole_model.h).
  // The checkpoint layout of what this rank writes: its tensors' places in its
  // flat buffer, each the region of the whole tensor it holds (copies another rank
  // writes are left out).
  std::vector<checkpoint::ParamSpan> param_spans() const;
  // The whole model's tensors (names and shapes) a manifest lists.
  std::vector<checkpoint::TensorEntry> manifest_tensors() const;
  // What this rank writes: its part of the master parameters and AdamW moments
  // (the owned shard, split among its replicas so that each byte is written once).
  checkpoint::ShardData checkpoint_shard();
  // Reads this rank's owned range of every state (resharding from any layout the
  // checkpoint was written in) and makes the working parameters match.
  void load_checkpoint(const checkpoint::CheckpointReader& reader, int64_t optimizer_steps);
  // "shard" and "replicate" sizes, for the manifest.
  nlohmann::json mesh_json() const;

  // ---- a training step ----
  void begin_step();
  // Hooks for one forward/backward: with sync, gradients are reduced as their
  // buckets fill. Without gradients (evaluation) pass compute_grad = false.
  const TrainHooks* hooks(bool compute_grad, bool sync);
  // After a micro-step's backward: waits for its reductions (when sync).
  void end_micro_step(bool sync);
  // A stage holding several chunks (the interleaved schedule) runs each backward
  // pass over one chunk. Sharded gradients are reduced after every pass as usual
  // (the buckets of the other chunks too, where a forward added to them: a tied
  // head's); in a full gradient buffer, a chunk's gradients are final after its
  // last micro-batch's backward, so reduce_chunk starts their reductions there, and
  // the step's last pass (synced) waits for them all.
  void reduce_chunk(const StageRange& chunk);
  OptimizerResult optimizer_step(double lr);
  // After a forward without gradients: frees gathered groups.
  void end_forward_only();

  // Sums over every rank (in place). No-ops for one process.
  void allreduce_sum(double* values, int n);
  void allreduce_sum(int64_t* values, int n);
  void allreduce_max(double* values, int n);

  // ---- ParamSource ----
  float* group_params(int group) override;
  float* group_grads(int group) override;

  // ---- statistics ----
  // Includes the tensor-parallel collectives (blocking: all exposed).
  CommTime take_comm_time();
  MemoryBreakdown memory() const;
  const AdamW& optimizer() const { return *optimizer_; }
  AdamW& optimizer() { return *optimizer_; }
  // Collectives issued so far on the shard group by the gatherer (tests).
  int64_t gathers() const { return gatherer() ? gatherer()->gathers() : 0; }
  int64_t gathered_live_bytes() const { return gatherer() ? gatherer()->live_bytes() : 0; }
  int64_t gathered_peak_bytes() const { return gatherer() ? gatherer()->peak_bytes() : 0; }
  void reset_gathered_peak();
  std::string describe() const;

 private:
  ModelConfig config_;
  ParamLayout layout_;
  TensorParallel tp_;
  ContextParallel cp_;
  PipelineStage pp_;
  ParallelConfig pc_;
  comm::ProcessGroupPtr world_;
  CommTracker tracker_;
  WholeModel whole_;
  // Per layout tensor, its weight in the gradient norm (WholeModel::norm_weights);
  // empty: all 1.
  std::vector<float> norm_weights_;
  std::unique_ptr<ShardingStrategy> strategy_;
  std::unique_ptr<AdamW> optimizer_;
  SparseEmbeddingGrads sparse_;
  TrainHooks hooks_grad_sync_, hooks_grad_nosync_, hooks_forward_only_;

  FlatState& state() { return strategy_->state(); }
  const FlatState& state() const { return strategy_->state(); }
  GradReducer& reducer() { return strategy_->reducer(); }
  GatherSchedule* schedule() { return strategy_->gather_schedule(); }
  const ParamGatherer* gatherer() const;
  StrategyContext context();
  void build_hooks();
  void load_local(const float* local);  // the flat buffer of layout()
  // A state of the owned range (the master, the moments) gathered over the shard
  // group into layout()'s flat buffer, and further, under tensor or pipeline
  // parallelism, into the whole model's.
  void gather_whole(const float* owned_state, float* out);
  void on_grads_ready(int group, bool sync);
  int head_group() const { return layout_.head_group(); }
  int embed_group() const { return layout_.embed_group(); }
};

}  // namespace distllm
