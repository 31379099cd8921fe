// The strategy object between the trainer and the model (DDP, ZeRO-1/2/3, HSDP, or
// one process): it owns the parameters (full, or a shard), the gradients (full, or
// a shard), the optimizer state (a shard), supplies the training graph's hooks, and
// makes the step's decisions collectively (gradient norm, loss, stop).
//
// Ranks are arranged as replicate x shard (parallel_config.h): the shard group of
// S ranks splits the flat buffer by ShardPlan; the R replicas of a shard hold the
// same state and all-reduce their gradients. DDP is S = 1, ZeRO is R = 1, HSDP is
// both. A step is:
//   begin_step();
//   for each micro-batch: hooks(sync) -> graph forward/backward -> end_micro_step(sync)
//   optimizer_step(lr)      // global norm, clipping, AdamW on the shard, all-gather
// With gradients kept in a full buffer (none, DDP, ZeRO-1) only the last micro-step
// synchronises (sync); with sharded gradients every micro-step does.
//
// The embedding table's gradient comes in two parts: a dense one from a tied output
// head, final right after the head, and the embedding backward's scatter into the
// few rows this step's tokens (and positions) use, at the very end of backward. On
// several ranks the dense part's bucket is reduced as soon as the head is done (so
// it overlaps all of backward; skipped when it is zero, as for an untied table),
// and the rows are reduced on their own: the union of every rank's token ids, a
// [rows, C] buffer, one small all-reduce, then added to the reduced gradients.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "distllm/base/aligned_buffer.h"
#include "distllm/checkpoint/shard_io.h"
#include "distllm/comm/process_group.h"
#include "distllm/model/param_source.h"
#include "distllm/model/train_graph.h"
#include "distllm/model/transformer.h"
#include "distllm/train/comm_tracker.h"
#include "distllm/train/grad_reducer.h"
#include "distllm/train/optimizer.h"
#include "distllm/train/param_gatherer.h"
#include "distllm/train/pipeline_stage.h"
#include "distllm/train/parallel_config.h"
#include "distllm/train/shard_plan.h"

namespace distllm {

// Bytes this rank holds, by category (what `distllm plan` predicts).
struct MemoryBreakdown {
  int64_t params = 0;     // full working parameters (none/ddp/zero1/zero2)
  int64_t master = 0;     // f32 master shard (zero3/hsdp, or bf16 master copy)
  int64_t grads = 0;      // full gradients or the gradient shard
  int64_t optimizer = 0;  // AdamW moments of the owned shard
  int64_t gathered_peak = 0;  // most gathered-group bytes alive at once (zero3/hsdp)
  int64_t buckets_peak = 0;   // most bucket/staging bytes alive at once
  int64_t sparse_rows = 0;    // the embedding rows reduced on their own (bytes)
  int64_t total() const { return params + master + grads + optimizer + gathered_peak + buckets_peak + sparse_rows; }
};

struct OptimizerResult {
  double grad_norm = 0;  // before clipping; the same on every rank
};

// Under tensor parallelism (a mesh with tp > 1) each tp rank runs one of these
// over the shard of the model its plan gives it (layout() is the shard's layout),
// with `world` its data-parallel group: the strategy shards and reduces the tp
// shard's flat buffers among the ranks holding the same shard. The gradient norm
// adds the tp ranks' parts (replicated tensors once). init_weights, load_full and
// gather_full deal in the whole model and split or gather over the tp group.
//
// Under pipeline parallelism (a mesh with pp > 1; any strategy on dp) each rank
// holds only its stage's parameter groups (ParamLayout of the stage, of its tp shard
// under tp: the other groups are empty), with `world` the data-parallel group of the
// ranks holding the same stage. A tied output head keeps a copy of the embedding
// table on the last stage (as Megatron-LM does): optimizer_step first sums that
// table's reduced gradients between the first and last stage (assembled from the dp
// group's shards under ZeRO, since the two stages' shards cover different rows), so
// both copies take the same update. The gradient norm adds every stage's part over
// the pp group (the tied table once). init_weights, load_full, gather_full and
// checkpoints deal in the whole model (as tensor parallelism does), so a pipeline
// checkpoint resumes at any pp (and tp) size.
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
  int shard_size() const { return plan_.ranks(); }
  int replicas() const;
  FlatRange owned() const { return owned_; }
  const comm::ProcessGroupPtr& world() const { return world_; }
  bool sync_every_micro_step() const { return !full_grads_; }

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
  // The parameters' places in the flat buffer (checkpoint layout).
  std::vector<checkpoint::ParamSpan> param_spans() const;
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
  int64_t gathers() const { return gatherer_ ? gatherer_->gathers() : 0; }
  int64_t gathered_live_bytes() const { return gatherer_ ? gatherer_->live_bytes() : 0; }
  int64_t gathered_peak_bytes() const { return gatherer_ ? gatherer_->peak_bytes() : 0; }
  void reset_gathered_peak() {
    if (gatherer_) gatherer_->reset_peak();
  }
  std::string describe() const;

 private:
  ModelConfig config_;
  ParamLayout layout_;
  TensorParallel tp_;
  ContextParallel cp_;
  PipelineStage pp_;
  // Per layout tensor, its weight in the gradient norm (see TensorParallelPlan::
  // norm_weight; 0 for a pipeline's second copy of a tied embedding); empty: all 1.
  std::vector<float> norm_weights_;
  ParallelConfig pc_;
  comm::ProcessGroupPtr world_, shard_group_, reduce_group_, replicate_group_;
  ShardPlan plan_;
  int shard_rank_ = 0;
  FlatRange owned_;
  std::vector<Bucket> buckets_;
  CommTracker tracker_;

  // Storage. full_params_ / full_grads_ point at owned buffers or a wrapped model.
  AlignedBuffer<float> own_params_, own_grads_, master_buf_, shard_grads_buf_;
  float* full_params_ = nullptr;  // null when parameters are sharded
  float* full_grads_ = nullptr;   // null when gradients are sharded
  float* master_ = nullptr;       // owned f32 master slice (may alias full_params_)
  float* shard_grads_ = nullptr;  // owned gradient slice (may alias full_grads_)
  std::unique_ptr<AdamW> optimizer_;
  std::unique_ptr<GradReducer> reducer_;
  std::unique_ptr<ParamGatherer> gatherer_;

  TrainHooks hooks_grad_sync_, hooks_grad_nosync_, hooks_forward_only_;
  bool in_sync_ = false;
  // Sparse embedding gradients (see above): flat offsets of the rows, their sums.
  std::vector<int64_t> sparse_offsets_;
  AlignedBuffer<float> sparse_grads_;
  bool sparse_pending_ = false;
  int64_t sparse_peak_ = 0;
  bool embed_dense_dirty_ = false;  // a non-sync micro-step scattered densely
  bool sparse_embedding() const { return world_size() > 1; }
  void on_embedding_backward(const float* d_out, const int32_t* tokens, const int32_t* positions, int64_t rows);
  void apply_sparse_embedding_grads();
  // Pipelines: the whole model's layout, and the tied embedding's gradient sum.
  ParamLayout full_layout() const;
  // Tensor or pipeline parallelism: init, load, gather and checkpoints deal in the
  // whole model's tensors; whole_to_local picks this rank's part of them.
  bool whole_model_state() const { return tp_.plan != nullptr || pp_.active(); }
  void whole_to_local(const float* whole, float* local) const;
  const ParamLayout& tp_shard_layout() const;  // the whole model's tp shard (before pipeline stages)
  void sum_tied_embedding_grads();

  bool bf16_params() const { return pc_.mixed_precision == MixedPrecision::kBf16; }
  bool bf16_grads() const { return pc_.mixed_precision != MixedPrecision::kFp32; }
  void build_groups();
  void load_shard(const float* params);   // the flat buffer of layout()
  // A state of the owned range (master_, the moments) gathered over the shard
  // group into layout()'s flat buffer; gather_whole also over tp, into the whole
  // model's layout.
  void gather_shard(const float* owned_state, float* out);
  // One range of layout()'s flat buffer from the dp group's owned slices (collective
  // over the shard group); `out` receives range.size() floats.
  void gather_range(const float* owned_state, FlatRange range, float* out);
  void gather_whole(const float* owned_state, float* out);
  checkpoint::ShardData whole_checkpoint_shard();
  AlignedBuffer<float> whole_state_[3];  // tp checkpoints: the whole param, exp_avg, exp_avg_sq
  void allocate();
  void build_hooks();
  void gather_params_after_step();
  void refresh_working_params();
  // Forward / backward visits (ZeRO-3): acquire, prefetch, release.
  void on_before_forward(int group);
  void on_after_forward(int group, bool compute_grad);
  void on_before_backward(int group);
  void on_grads_ready(int group, bool sync);
  int head_group() const { return layout_.head_group(); }
  int embed_group() const { return layout_.embed_group(); }
};

}  // namespace distllm
