#include "distllm/train/pipeline_transfers.h"

#include <algorithm>

#include <set>
#include <tuple>

#include "distllm/base/error.h"
#include "distllm/base/strings.h"

namespace distllm {

namespace {

// Tags above the ones other users of the pp group take; the activation into model
// chunk c and the gradient of its output each have their own.
constexpr int kTagBase = 16;
int activation_tag(int model_chunk) { return kTagBase + 2 * model_chunk; }
int gradient_tag(int model_chunk) { return kTagBase + 2 * model_chunk + 1; }

}  // namespace

bool pairs_passes(PipelineScheduleKind kind, int stages, int micro_batches) {
  return kind == PipelineScheduleKind::kInterleaved && micro_batches > stages;
}

std::vector<PipelineStep> pipeline_steps(const std::vector<PipelineAction>& actions, int p, int s, int v, bool pair) {
  const int chunks = p * v, prev = (s + p - 1) % p, next = (s + 1) % p;
  std::vector<PipelineStep> steps;
  std::vector<PipelineTransfer> sends;  // the previous unit's
  for (size_t i = 0; i < actions.size();) {
    PipelineStep step;
    step.transfers.swap(sends);
    step.passes.push_back(static_cast<int>(i));
    if (pair && actions[i].forward && i + 1 < actions.size() && !actions[i + 1].forward)
      step.passes.push_back(static_cast<int>(i + 1));
    i += step.passes.size();
    for (int k : step.passes) {
      const PipelineAction& a = actions[static_cast<size_t>(k)];
      const int c = a.chunk * p + s;
      if (a.forward && c > 0) step.transfers.push_back({false, true, a.chunk, a.micro_batch, prev, activation_tag(c)});
      if (!a.forward && c < chunks - 1)
        step.transfers.push_back({false, false, a.chunk, a.micro_batch, next, gradient_tag(c)});
      if (a.forward && c < chunks - 1)
        sends.push_back({true, true, a.chunk, a.micro_batch, next, activation_tag(c + 1)});
      if (!a.forward && c > 0) sends.push_back({true, false, a.chunk, a.micro_batch, prev, gradient_tag(c - 1)});
    }
    steps.push_back(std::move(step));
  }
  if (!sends.empty()) steps.push_back({std::move(sends), {}});
  return steps;
}

std::vector<int> graphs_per_chunk(const std::vector<PipelineStep>& steps, const std::vector<PipelineAction>& actions,
                                  int p, int s, int v, bool training) {
  std::vector<int> live(static_cast<size_t>(v), 0), most(static_cast<size_t>(v), 0);
  auto take = [&](int chunk) {
    const size_t c = static_cast<size_t>(chunk);
    most[c] = std::max(most[c], ++live[c]);
  };
  auto free = [&](int chunk) { --live[static_cast<size_t>(chunk)]; };
  const int chunks = p * v;
  for (const PipelineStep& step : steps) {
    // In the runner's order: sends (which may free a set), receives, then passes.
    for (const PipelineTransfer& t : step.transfers)
      if (t.send && t.activation != training) free(t.chunk);
    for (const PipelineTransfer& t : step.transfers)
      if (!t.send && t.activation) take(t.chunk);
    for (int i : step.passes) {
      const PipelineAction& a = actions[static_cast<size_t>(i)];
      const int c = a.chunk * p + s;  // the model chunk
      if (a.forward && c == 0) take(a.chunk);
      if (training ? (!a.forward && c == 0) : c == chunks - 1) free(a.chunk);
    }
  }
  return most;
}

void check_transfers(const std::vector<std::vector<PipelineStep>>& stages) {
  const size_t p = stages.size();
  // (sender, receiver, tag, micro-batch, is the send) of every posted transfer.
  std::set<std::tuple<int, int, int, int, bool>> posted;
  std::vector<size_t> at(p, 0);
  auto post = [&](size_t s) {
    if (at[s] >= stages[s].size()) return;
    for (const PipelineTransfer& t : stages[s][at[s]].transfers) {
      const int me = static_cast<int>(s);
      posted.insert(t.send ? std::tuple{me, t.peer, t.tag, t.micro_batch, true}
                           : std::tuple{t.peer, me, t.tag, t.micro_batch, false});
    }
  };
  for (size_t s = 0; s < p; ++s) post(s);
  for (bool progress = true; progress;) {
    progress = false;
    for (size_t s = 0; s < p; ++s) {
      while (at[s] < stages[s].size()) {
        bool matched = true;
        for (const PipelineTransfer& t : stages[s][at[s]].transfers) {
          const int me = static_cast<int>(s);
          matched &= posted.count(t.send ? std::tuple{me, t.peer, t.tag, t.micro_batch, false}
                                         : std::tuple{t.peer, me, t.tag, t.micro_batch, true}) > 0;
        }
        if (!matched) break;
        ++at[s];
        post(s);
        progress = true;
      }
    }
  }
  std::string stuck;
  for (size_t s = 0; s < p; ++s)
    if (at[s] < stages[s].size()) stuck += strprintf("%s stage %zu at step %zu", stuck.empty() ? "" : ",", s, at[s]);
  DL_CHECK(stuck.empty(), "pipeline transfers deadlock:%s", stuck.c_str());
}

}  // namespace distllm
