#include "distllm/serve/engine_client.h"

#include <chrono>

namespace distllm::serve {

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kAbort: return "abort";
    case FinishReason::kError: return "error";
    case FinishReason::kNone: break;
  }
  return "";
}

void OutputQueue::push(OutputDelta delta) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    pending_.push_back(std::move(delta));
  }
  cv_.notify_all();
}

bool OutputQueue::pop_all(std::vector<OutputDelta>& out, double timeout_seconds) {
  std::unique_lock<std::mutex> lock(mu_);
  if (pending_.empty()) {
    cv_.wait_for(lock, std::chrono::duration<double>(timeout_seconds), [&] { return !pending_.empty(); });
  }
  if (pending_.empty()) return false;
  for (auto& d : pending_) out.push_back(std::move(d));
  pending_.clear();
  return true;
}

}  // namespace distllm::serve
