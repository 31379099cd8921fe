#include "distllm/train/pipeline_schedule.h"

#include <algorithm>
#include <map>
#include <tuple>

#include "distllm/base/error.h"
#include "distllm/base/strings.h"

namespace distllm {

PipelineScheduleKind parse_pipeline_schedule(const std::string& name) {
  if (name == "gpipe") return PipelineScheduleKind::kGPipe;
  if (name == "1f1b") return PipelineScheduleKind::k1F1B;
  throw_error(strprintf("--pp-schedule must be gpipe or 1f1b, got '%s'", name.c_str()));
}

const char* pipeline_schedule_name(PipelineScheduleKind kind) {
  return kind == PipelineScheduleKind::kGPipe ? "gpipe" : "1f1b";
}

std::vector<PipelineAction> pipeline_schedule(PipelineScheduleKind kind, int stages, int stage, int micro_batches) {
  DL_CHECK(stages >= 1 && stage >= 0 && stage < stages, "pipeline stage %d outside [0, %d)", stage, stages);
  DL_CHECK(micro_batches >= 1, "--micro-batches must be >= 1, got %d", micro_batches);
  std::vector<PipelineAction> a;
  if (kind == PipelineScheduleKind::kGPipe) {
    for (int i = 0; i < micro_batches; ++i) a.push_back({true, i});
    for (int i = 0; i < micro_batches; ++i) a.push_back({false, i});
    return a;
  }
  const int warmup = std::min(stages - stage - 1, micro_batches);
  int f = 0, b = 0;
  while (f < warmup) a.push_back({true, f++});
  while (f < micro_batches) {
    a.push_back({true, f++});
    a.push_back({false, b++});
  }
  while (b < micro_batches) a.push_back({false, b++});
  return a;
}

int max_in_flight(const std::vector<PipelineAction>& actions) {
  bool has_backward = false;
  for (const PipelineAction& x : actions) has_backward |= !x.forward;
  int live = 0, most = 0;
  for (const PipelineAction& x : actions) {
    live += x.forward ? 1 : -1;
    most = std::max(most, live);
    if (!has_backward) live = 0;
  }
  return most;
}

double ideal_bubble_fraction(int stages, int micro_batches) {
  return static_cast<double>(stages - 1) / (micro_batches + stages - 1);
}

std::vector<double> simulate_pipeline(const std::vector<std::vector<PipelineAction>>& stages, double forward_time,
                                      double backward_time) {
  const int p = static_cast<int>(stages.size());
  // Finish time of (stage, forward?, micro-batch).
  std::map<std::tuple<int, bool, int>, double> done;
  auto finished = [&](int s, bool fwd, int mb, double& at) {
    auto it = done.find({s, fwd, mb});
    if (it == done.end()) return false;
    at = std::max(at, it->second);
    return true;
  };
  std::vector<size_t> next(static_cast<size_t>(p), 0);
  std::vector<double> free_at(static_cast<size_t>(p), 0.0), busy(static_cast<size_t>(p), 0.0);
  for (bool progress = true; progress;) {
    progress = false;
    for (int s = 0; s < p; ++s) {
      auto& n = next[static_cast<size_t>(s)];
      while (n < stages[static_cast<size_t>(s)].size()) {
        const PipelineAction& x = stages[static_cast<size_t>(s)][n];
        double start = free_at[static_cast<size_t>(s)];
        bool ready = x.forward ? (s == 0 || finished(s - 1, true, x.micro_batch, start))
                               : (finished(s, true, x.micro_batch, start) &&
                                  (s == p - 1 || finished(s + 1, false, x.micro_batch, start)));
        if (!ready) break;
        const double t = x.forward ? forward_time : backward_time;
        free_at[static_cast<size_t>(s)] = start + t;
        busy[static_cast<size_t>(s)] += t;
        done[{s, x.forward, x.micro_batch}] = start + t;
        ++n;
        progress = true;
      }
    }
  }
  double makespan = 0;
  for (int s = 0; s < p; ++s) {
    DL_CHECK(next[static_cast<size_t>(s)] == stages[static_cast<size_t>(s)].size(),
             "pipeline schedule deadlocks: stage %d stops at action %zu", s, next[static_cast<size_t>(s)]);
    makespan = std::max(makespan, free_at[static_cast<size_t>(s)]);
  }
  std::vector<double> idle;
  for (int s = 0; s < p; ++s) idle.push_back(makespan > 0 ? 1.0 - busy[static_cast<size_t>(s)] / makespan : 0.0);
  return idle;
}

}  // namespace distllm
