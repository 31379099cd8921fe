#include "distllm/checkpoint/async_saver.h"

#include <cstring>

#include "distllm/base/timer.h"

namespace distllm::checkpoint {

AsyncSaver::AsyncSaver(CheckpointStore& store) : store_(store) {}

AsyncSaver::~AsyncSaver() {
  if (thread_.joinable()) thread_.join();
}

double AsyncSaver::save(const SaveRequest& request, const std::vector<ParamSpan>& layout, const ShardData& shard) {
  wait();
  Timer copy;
  const size_t n = static_cast<size_t>(shard.end - shard.begin);
  copies_.resize(shard.states.size());
  ShardData owned;
  owned.begin = shard.begin;
  owned.end = shard.end;
  for (size_t i = 0; i < shard.states.size(); ++i) {
    if (copies_[i].size() != n) copies_[i].resize_uninitialized(n);
    if (n > 0) std::memcpy(copies_[i].data(), shard.states[i].second, n * sizeof(float));
    owned.states.emplace_back(shard.states[i].first, copies_[i].data());
  }
  const double copy_s = copy.seconds();
  result_ = SaveResult{};
  result_.step = request.step;
  result_.copy_s = copy_s;
  finished_ = false;
  thread_ = std::thread([this, request, layout, owned] {
    Timer t;
    try {
      Published p = store_.save(request, layout, owned);
      result_.dir = p.dir;
      result_.latest_error = p.latest_error;
      result_.latest_kept = p.latest_kept;
    } catch (const std::exception& e) {
      result_.error = e.what();
    }
    result_.write_s = t.seconds();
    finished_ = true;
  });
  return copy_s;
}

SaveResult AsyncSaver::wait() {
  if (!thread_.joinable()) return SaveResult{};
  thread_.join();
  SaveResult r = result_;
  result_ = SaveResult{};
  return r;
}

SaveResult AsyncSaver::poll() {
  if (!thread_.joinable() || !finished_) return SaveResult{};
  return wait();
}

}  // namespace distllm::checkpoint
