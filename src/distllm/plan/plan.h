// `distllm plan`: per-rank memory, communication and step time of a training job
// on a layout dp x tp x pp x cp under each data-parallel strategy, and the fastest
// layout that fits.
//
// Memory follows what DataParallel, TrainGraph, RingAttention and PipelineParallel
// allocate (category by category, fp32 Adam: parameters 4Ψ, gradients 4Ψ, moments
// 8Ψ, split as the strategy splits them; activations from the model's shapes;
// gathered ZeRO-3 groups and gradient buckets from the group and bucket sizes).
// Communication counts the bytes each collective of a step moves; time divides them
// by the bus bandwidth and the step's FLOPs by the GEMM rate, and charges only the
// communication that cannot overlap computation.
//
// Tensor parallelism divides each layer's weights, FLOPs and head-sized activations
// by tp and adds its all-reduces (four of B*T*C per layer, one each for the
// embedding and the head's input gradient), which block the computation, so all of
// their time is exposed. Sequence parallelism moves the same bytes and divides the
// residual-stream activations by tp.
//
// Pipeline parallelism (pp stages of StageRange::for_model, m micro-batches): each
// stage holds its layers' parameters (the last one a copy of a tied embedding) and
// one set of activations per micro-batch in flight (GPipe m, 1F1B min(m, p - s) on
// stage s); the plan sizes every stage and reports the largest. The step takes the
// costliest stage's compute times (m + p - 1) / m (the bubble (p-1)/(m+p-1)), plus
// the activations and gradients sent between neighbours (B*T*C floats each way per
// micro-batch, blocking) and the tied embedding's gradient swap.
//
// Context parallelism (cp ranks per sequence): each rank holds T / cp tokens of
// every sequence, so every activation shrinks by cp, and ring attention adds its
// travelling key/value buffers. Its ring shifts (cp - 1 key/value blocks per layer
// in forward, cp blocks with their gradients in backward) are not overlapped, so
// they are exposed. Gradients are reduced over dp x cp.
//
// Left out: the memory allocator's overhead, the communication library's own
// buffers, kernel efficiency by shape (one GEMM rate for everything), latency of
// small messages, and uneven stage speeds beyond the layer split.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "distllm/model/config.h"
#include "distllm/model/train_graph.h"
#include "distllm/train/parallel_config.h"
#include "distllm/train/pipeline_schedule.h"

namespace distllm::plan {

struct PlanInput {
  ModelConfig model;
  int world = 1;  // all ranks: dp = world / (tp * pp * cp) data-parallel ranks
  // Model-parallel sizes; 0 in compare() means every size that divides the world
  // and fits the model (tp: splits its heads, pp: at most one stage per layer, cp:
  // cuts the sequence into 2 x cp equal chunks).
  int tp = 1;  // tensor-parallel group
  int pp = 1;  // pipeline stages
  int cp = 1;  // context-parallel ring
  bool sequence_parallel = false;
  int hosts = 1;  // hsdp: the default shard group is (dp x cp) / hosts
  int batch = 8;  // sequences per data-parallel rank (a cp ring shares them), per micro-batch
  int seq = 256;  // tokens per sequence (each cp rank holds seq / cp of them)
  int grad_accum = 1;     // micro-batches accumulated per step without a pipeline
  int micro_batches = 1;  // pp > 1: the pipeline's micro-batches per step
  PipelineScheduleKind pp_schedule = PipelineScheduleKind::k1F1B;
  int virtual_stages = 1;  // the interleaved schedule: model chunks per stage
  ParallelConfig parallel;
  ActivationCheckpointing checkpointing;
};

struct MemoryPlan {
  int64_t params = 0, master = 0, grads = 0, optimizer = 0;
  int64_t activations = 0;
  int64_t gathered = 0;      // ZeRO-3 groups alive at once
  int64_t comm_buffers = 0;  // gradient buckets and bf16 staging
  int64_t total() const { return params + master + grads + optimizer + activations + gathered + comm_buffers; }
};

struct MachineRates {
  double gemm_gflops = 100;  // per rank, with its threads
  double busbw_gbs = 10;     // collective bus bandwidth
  std::string source;        // "measured" or "given"
};

struct Estimate {
  PlanInput input;
  MemoryPlan memory;
  int64_t comm_bytes = 0;  // per rank per optimizer step
  // compute_s: the costliest stage's passes; bubble_s: the pipeline's idle time on
  // top of it; step_s = compute_s + bubble_s + exposed_comm_s.
  double compute_s = 0, bubble_s = 0, comm_s = 0, exposed_comm_s = 0, step_s = 0;
  double tokens_per_s = 0;  // the whole job's
  int worst_stage = 0;      // the pipeline stage whose memory is reported
  std::vector<MemoryPlan> stage_memory;  // every stage's (one entry without a pipeline)
  bool fits = true;
};

Estimate estimate(const PlanInput& input, const MachineRates& rates, double memory_limit_bytes = 0);
// Every strategy (and, when it does not fit, with activation checkpointing) on every
// layout the input allows (tp, pp or cp 0: every size that divides the world and
// fits the model). A layout with pp = 1 among pipelined ones accumulates the
// micro-batches instead, so every row trains the same batch per step.
std::vector<Estimate> compare(const PlanInput& base, const MachineRates& rates, double memory_limit_bytes);
// The fastest estimate that fits; throws naming the smallest requirement when none does.
Estimate recommend(const PlanInput& base, const MachineRates& rates, double memory_limit_bytes);
// "ddp + activation checkpointing all" (the strategy column), "dp2 tp1 pp2(1f1b,m4)
// cp1" (the layout column), and both together.
std::string describe_strategy(const Estimate& e);
std::string describe_layout(const Estimate& e);
std::string describe_choice(const Estimate& e);

// Rates measured here: a GEMM of a training-like shape on `threads` threads and the
// memory bandwidth (a shared-memory collective's bus bandwidth is about half of it).
MachineRates measure_rates(int threads);
// Cheap defaults from a short measurement (used by `train --strategy auto`).
MachineRates default_rates(int threads);
double host_memory_bytes();

}  // namespace distllm::plan
