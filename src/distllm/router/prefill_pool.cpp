#include "distllm/router/prefill_pool.h"

namespace distllm::router {

PrefillPool::PrefillPool(std::vector<std::string> urls, ReplicaOptions options) : set_(std::move(urls), options) {}

std::shared_ptr<PrefillPool::Lease> PrefillPool::acquire() {
  std::vector<ReplicaLoad> a = set_.available();
  if (a.empty()) return nullptr;
  const ReplicaLoad* best = &a.front();
  for (const ReplicaLoad& r : a) {
    if (r.outstanding < best->outstanding || (r.outstanding == best->outstanding && r.queued < best->queued)) best = &r;
  }
  return std::make_shared<Lease>(set_, best->index);
}

}  // namespace distllm::router
