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
  if (name == "interleaved") return PipelineScheduleKind::kInterleaved;
  throw_error(strprintf("--pp-schedule must be gpipe, 1f1b or interleaved, got '%s'", name.c_str()));
}

const char* pipeline_schedule_name(PipelineScheduleKind kind) {
  switch (kind) {
    case PipelineScheduleKind::kGPipe: return "gpipe";
    case PipelineScheduleKind::k1F1B: return "1f1b";
    case PipelineScheduleKind::kInterleaved: return "interleaved";
  }
  return "?";
}

namespace {

// Megatron-LM's forward_backward_pipelining_with_interleaving: the k-th forward
// (and k-th backward) pass of a stage works on micro-batch (k / (p*v)) * p + k % p
// of chunk (k / p) % v, counted down for backward, so each group of p micro-batches
// goes through every chunk before the next group starts.
std::vector<PipelineAction> interleaved_schedule(int p, int s, int m, int v) {
  DL_CHECK(m % p == 0,
           "the interleaved schedule needs --micro-batches a multiple of the pipeline stages: %d micro-batches, pp=%d",
           m, p);
  const int total = m * v;
  const int warmup = std::min((p - s - 1) * 2 + (v - 1) * p, total);
  auto pass = [&](int k, bool forward) {
    const int in_group = k % (p * v), chunk = in_group / p;
    return PipelineAction{forward, (k / (p * v)) * p + k % p, forward ? chunk : v - 1 - chunk};
  };
  std::vector<PipelineAction> a;
  for (int k = 0; k < warmup; ++k) a.push_back(pass(k, true));
  for (int k = 0; k < total - warmup; ++k) {
    a.push_back(pass(k + warmup, true));
    a.push_back(pass(k, false));
  }
  for (int k = total - warmup; k < total; ++k) a.push_back(pass(k, false));
  return a;
}

}  // namespace

std::vector<PipelineAction> pipeline_schedule(PipelineScheduleKind kind, int stages, int stage, int micro_batches,
                                              int virtual_stages) {
  DL_CHECK(stages >= 1 && stage >= 0 && stage < stages, "pipeline stage %d outside [0, %d)", stage, stages);
  DL_CHECK(micro_batches >= 1, "--micro-batches must be >= 1, got %d", micro_batches);
  DL_CHECK(virtual_stages >= 1, "--virtual-stages must be >= 1, got %d", virtual_stages);
  DL_CHECK(virtual_stages == 1 || kind == PipelineScheduleKind::kInterleaved,
           "--virtual-stages %d needs --pp-schedule interleaved (got %s)", virtual_stages, pipeline_schedule_name(kind));
  if (kind == PipelineScheduleKind::kInterleaved) return interleaved_schedule(stages, stage, micro_batches, virtual_stages);
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

void check_pipeline_schedule(PipelineScheduleKind kind, int stages, int micro_batches, int virtual_stages) {
  DL_CHECK(kind != PipelineScheduleKind::kInterleaved || virtual_stages >= 2,
           "--pp-schedule interleaved needs --virtual-stages V >= 2 model chunks per stage, got %d", virtual_stages);
  pipeline_schedule(kind, stages, 0, micro_batches, virtual_stages);  // refuses the rest
}

std::vector<PipelineAction> forward_passes(const std::vector<PipelineAction>& actions) {
  std::vector<PipelineAction> f;
  for (const PipelineAction& x : actions)
    if (x.forward) f.push_back(x);
  return f;
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

double ideal_bubble_fraction(int stages, int micro_batches, int virtual_stages) {
  return static_cast<double>(stages - 1) / (static_cast<double>(virtual_stages) * micro_batches + stages - 1);
}

std::vector<double> simulate_pipeline(const std::vector<std::vector<PipelineAction>>& stages, double forward_time,
                                      double backward_time) {
  const int p = static_cast<int>(stages.size());
  int v = 1;  // chunks per stage
  for (const auto& list : stages)
    for (const PipelineAction& x : list) v = std::max(v, x.chunk + 1);
  const int chunks = p * v;
  // Finish time of (model chunk, forward?, micro-batch).
  std::map<std::tuple<int, bool, int>, double> done;
  auto finished = [&](int c, bool fwd, int mb, double& at) {
    auto it = done.find({c, fwd, mb});
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
        const int c = x.chunk * p + s;
        bool ready = x.forward ? (c == 0 || finished(c - 1, true, x.micro_batch, start))
                               : (finished(c, true, x.micro_batch, start) &&
                                  (c == chunks - 1 || finished(c + 1, false, x.micro_batch, start)));
        if (!ready) break;
        const double t = x.forward ? forward_time : backward_time;
        free_at[static_cast<size_t>(s)] = start + t;
        busy[static_cast<size_t>(s)] += t;
        done[{c, x.forward, x.micro_batch}] = start + t;
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
