// Pipeline schedules as data: for each stage, the order in which it runs the
// forward and backward passes of the step's micro-batches. No communication here;
// pipeline_parallel.h executes a schedule, receiving what each pass needs.
//
//   GPipe: every forward (0..m-1), then every backward (0..m-1). A stage keeps the
//          activations of all m micro-batches.
//   1F1B:  stage s of p runs min(p-s-1, m) warm-up forwards, then alternates one
//          forward and one backward, then the remaining backwards (PipeDream-Flush,
//          Megatron-LM's default). At most p-s micro-batches are in flight on stage
//          s, so activation memory no longer grows with m.
// Both have the same bubble when forward and backward take the same time on every
// stage: (p-1)/(m+p-1) of each stage's step is idle.
#pragma once

#include <string>
#include <vector>

namespace distllm {

enum class PipelineScheduleKind { kGPipe, k1F1B };

PipelineScheduleKind parse_pipeline_schedule(const std::string& name);  // "gpipe" | "1f1b"; throws otherwise
const char* pipeline_schedule_name(PipelineScheduleKind kind);

struct PipelineAction {
  bool forward = true;  // false: backward
  int micro_batch = 0;
  bool operator==(const PipelineAction&) const = default;
};

std::vector<PipelineAction> pipeline_schedule(PipelineScheduleKind kind, int stages, int stage, int micro_batches);

// The most micro-batches whose forward has run and backward has not, at any point
// (how many sets of activations the stage must hold). Forward-only lists count each
// forward as done when it ends.
int max_in_flight(const std::vector<PipelineAction>& actions);

// (p-1)/(m+p-1): the idle share of each stage's step with equal pass times.
double ideal_bubble_fraction(int stages, int micro_batches);

// Runs every stage's list against the dependencies (a forward needs the previous
// stage's forward of the micro-batch, a backward the next stage's backward and its
// own forward), each stage doing one pass at a time, and returns each stage's idle
// share of the whole makespan. Throws when the lists deadlock.
std::vector<double> simulate_pipeline(const std::vector<std::vector<PipelineAction>>& stages, double forward_time,
                                      double backward_time);

}  // namespace distllm
