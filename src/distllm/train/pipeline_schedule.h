// Pipeline schedules as data: for each stage, the order in which it runs the
// forward and backward passes of the step's micro-batches. No communication here;
// pipeline_transfers.h groups the passes with their transfers and
// pipeline_parallel.h executes a schedule.
//
//   GPipe: every forward (0..m-1), then every backward (0..m-1). A stage keeps the
//          activations of all m micro-batches.
//   1F1B:  stage s of p runs min(p-s-1, m) warm-up forwards, then alternates one
//          forward and one backward, then the remaining backwards (PipeDream-Flush,
//          Megatron-LM's default). At most p-s micro-batches are in flight on stage
//          s, so activation memory no longer grows with m.
//   Interleaved 1F1B (Megatron-LM's virtual pipeline stages): the layers are split
//          into p*v model chunks and stage s holds chunks s, s+p, ..., so a
//          micro-batch visits every stage v times. The m*v passes per direction run
//          in groups of p micro-batches per chunk (m a multiple of p): forwards go
//          up the chunks, backwards down. Stage s runs min((p-s-1)*2 + (v-1)*p, m*v)
//          warm-up forwards, then 1F1B, then the remaining backwards.
// GPipe and 1F1B idle (p-1)/(m+p-1) of each stage's step when forward and backward
// take the same time on every stage; interleaving shortens each pass v times and
// the bubble to (p-1)/(v*m+p-1).
#pragma once

#include <string>
#include <vector>

namespace distllm {

enum class PipelineScheduleKind { kGPipe, k1F1B, kInterleaved };

// "gpipe" | "1f1b" | "interleaved"; throws otherwise.
PipelineScheduleKind parse_pipeline_schedule(const std::string& name);
const char* pipeline_schedule_name(PipelineScheduleKind kind);

struct PipelineAction {
  bool forward = true;  // false: backward
  int micro_batch = 0;
  int chunk = 0;  // the stage's model chunk: model chunk chunk * p + s (0 unless interleaved)
  bool operator==(const PipelineAction&) const = default;
};

// virtual_stages: model chunks per stage (interleaved only, >= 1; the others take
// 1). Throws naming the sizes when the interleaved m is not a multiple of p.
std::vector<PipelineAction> pipeline_schedule(PipelineScheduleKind kind, int stages, int stage, int micro_batches,
                                              int virtual_stages = 1);
// The schedule's forward passes in order (a forward-only step, e.g. evaluation).
std::vector<PipelineAction> forward_passes(const std::vector<PipelineAction>& actions);

// The most (micro-batch, chunk) pairs whose forward has run and backward has not,
// at any point (how many sets of activations the stage must hold). Forward-only
// lists count each forward as done when it ends.
int max_in_flight(const std::vector<PipelineAction>& actions);

// Refuses, naming the numbers, a schedule that cannot run on p stages: --virtual-
// stages with another schedule than interleaved, interleaved with fewer than two
// virtual stages, or m not a multiple of p (Megatron-LM's requirement).
void check_pipeline_schedule(PipelineScheduleKind kind, int stages, int micro_batches, int virtual_stages);

// (p-1)/(v*m+p-1): the idle share of each stage's step with equal pass times.
double ideal_bubble_fraction(int stages, int micro_batches, int virtual_stages = 1);

// Runs every stage's list against the dependencies (a forward needs the previous
// model chunk's forward of the micro-batch, a backward the next chunk's backward
// and its own forward), each stage doing one pass at a time, and returns each
// stage's idle share of the whole makespan. Stage s's chunk k is model chunk
// k * p + s. Throws when the lists deadlock.
std::vector<double> simulate_pipeline(const std::vector<std::vector<PipelineAction>>& stages, double forward_time,
                                      double backward_time);

}  // namespace distllm
