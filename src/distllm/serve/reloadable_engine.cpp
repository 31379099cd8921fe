#include "distllm/serve/reloadable_engine.h"

#include <algorithm>
#include <chrono>
#include <unordered_map>

#include "distllm/base/log.h"
#include "distllm/base/timer.h"

namespace distllm::serve {

namespace {
constexpr double kReapSeconds = 0.05;  // how often retiring engines are checked
}

ReloadableEngine::ReloadableEngine(const TextCodec& codec, EngineConfig config, ServeMetrics& metrics)
    : codec_(codec), config_(std::move(config)), metrics_(metrics) {
  reaper_ = std::thread([this] { reap(); });
}

ReloadableEngine::~ReloadableEngine() { stop(); }

int64_t ReloadableEngine::install(std::shared_ptr<ModelRunner> runner, std::shared_ptr<const void> keep,
                                  std::shared_ptr<ModelRunner> draft_runner) {
  DL_CHECK(runner != nullptr, "install: no runner");
  int64_t number;
  {
    std::shared_lock<std::shared_mutex> lock(mu_);
    number = next_version_;
  }
  DL_CHECK(number < (int64_t{1} << (64 - kVersionShift)), "too many model versions");
  auto v = std::make_shared<Version>();
  v->number = number;
  v->keep = std::move(keep);
  v->runner = std::move(runner);
  v->draft_runner = std::move(draft_runner);
  EngineConfig ec = config_;
  ec.first_request_id = (static_cast<uint64_t>(number) << kVersionShift) + 1;
  ec.metrics_source = static_cast<int>(number);
  v->engine = std::make_shared<Engine>(*v->runner, codec_, ec, metrics_, v->draft_runner.get());
  v->engine->start();
  std::shared_ptr<Version> old;
  {
    std::unique_lock<std::shared_mutex> lock(mu_);
    DL_CHECK(next_version_ == number, "two models installed at once");
    ++next_version_;
    old = std::move(current_);
    current_ = v;
    if (old) retiring_.push_back(old);
  }
  if (old) {
    LOG_INFO("serve: model version %lld serves new requests; version %lld finishes its %lld requests",
             static_cast<long long>(number), static_cast<long long>(old->number),
             static_cast<long long>(old->engine->stats().requests));
    reap_cv_.notify_all();
  }
  return number;
}

void ReloadableEngine::reap() {
  std::unique_lock<std::mutex> lk(reap_mu_);
  while (!stopping_) {
    reap_cv_.wait_for(lk, std::chrono::duration<double>(kReapSeconds));
    if (stopping_) break;
    std::vector<std::shared_ptr<Version>> done;
    {
      std::unique_lock<std::shared_mutex> lock(mu_);
      auto it = std::partition(retiring_.begin(), retiring_.end(),
                               [](const std::shared_ptr<Version>& v) { return v->engine->stats().requests > 0; });
      done.assign(std::make_move_iterator(it), std::make_move_iterator(retiring_.end()));
      retiring_.erase(it, retiring_.end());
    }
    lk.unlock();
    for (auto& v : done) {
      v->engine->stop();
      metrics_.retire_source(static_cast<int>(v->number));
      LOG_INFO("serve: model version %lld finished its requests and was freed", static_cast<long long>(v->number));
      v.reset();  // the engine, its KV cache, runner and weights (unless someone still looks at them)
    }
    lk.lock();
  }
}

void ReloadableEngine::stop() {
  {
    std::lock_guard<std::mutex> lk(reap_mu_);
    stopping_ = true;
  }
  reap_cv_.notify_all();
  if (reaper_.joinable()) reaper_.join();
  std::vector<std::shared_ptr<Version>> all;
  {
    std::unique_lock<std::shared_mutex> lock(mu_);
    all = std::move(retiring_);
    retiring_.clear();
    if (current_) all.push_back(current_);
  }
  for (auto& v : all) v->engine->stop();
}

std::vector<std::shared_ptr<ReloadableEngine::Version>> ReloadableEngine::all_versions() const {
  std::shared_lock<std::shared_mutex> lock(mu_);
  std::vector<std::shared_ptr<Version>> all = retiring_;
  if (current_) all.push_back(current_);
  return all;
}

int64_t ReloadableEngine::version() const {
  std::shared_lock<std::shared_mutex> lock(mu_);
  return current_ ? current_->number : 0;
}

int ReloadableEngine::retiring() const {
  std::shared_lock<std::shared_mutex> lock(mu_);
  return static_cast<int>(retiring_.size());
}

std::shared_ptr<Engine> ReloadableEngine::current() const {
  std::shared_lock<std::shared_mutex> lock(mu_);
  return current_ ? current_->engine : nullptr;
}

std::vector<uint64_t> ReloadableEngine::submit(std::vector<GenerationRequest> requests,
                                               std::shared_ptr<OutputQueue> out) {
  // Under the shared lock: a swap waits for submits in progress, so none reaches an
  // engine after it was replaced.
  std::shared_lock<std::shared_mutex> lock(mu_);
  if (!current_) throw RequestError(503, "no model is loaded yet");
  return current_->engine->submit(std::move(requests), std::move(out));
}

void ReloadableEngine::abort(const std::vector<uint64_t>& ids) {
  if (ids.empty()) return;
  std::unordered_map<int64_t, std::vector<uint64_t>> by_version;
  for (uint64_t id : ids) by_version[static_cast<int64_t>(id >> kVersionShift)].push_back(id);
  std::shared_lock<std::shared_mutex> lock(mu_);
  auto send = [&](const std::shared_ptr<Version>& v) {
    auto it = by_version.find(v->number);
    if (it != by_version.end()) v->engine->abort(it->second);
  };
  if (current_) send(current_);
  for (const auto& v : retiring_) send(v);
  // Ids of a version already freed finished long ago: nothing to cancel.
}

void ReloadableEngine::abort_all(const std::string& reason) {
  for (const auto& v : all_versions()) v->engine->abort_all(reason);
}

bool ReloadableEngine::alive() const {
  std::shared_lock<std::shared_mutex> lock(mu_);
  return current_ && current_->engine->alive();
}

int ReloadableEngine::max_model_len() const {
  std::shared_lock<std::shared_mutex> lock(mu_);
  return current_ ? current_->engine->max_model_len() : 0;
}

int ReloadableEngine::max_completion_tokens(int prompt_len) const {
  std::shared_lock<std::shared_mutex> lock(mu_);
  return current_ ? current_->engine->max_completion_tokens(prompt_len) : 0;
}

int ReloadableEngine::max_in_flight() const {
  return config_.scheduler.max_num_seqs + config_.max_queued_requests;
}

EngineStats ReloadableEngine::stats() const {
  EngineStats sum;
  for (const auto& v : all_versions()) {
    EngineStats s = v->engine->stats();
    sum.num_blocks += s.num_blocks;
    sum.free_blocks += s.free_blocks;
    sum.cached_blocks += s.cached_blocks;
    sum.active_blocks += s.active_blocks;
    sum.running += s.running;
    sum.waiting += s.waiting;
    sum.requests += s.requests;
    sum.steps += s.steps;
    sum.preemptions += s.preemptions;
    sum.max_batch_seqs = std::max(sum.max_batch_seqs, s.max_batch_seqs);
    sum.peak_running_plus_waiting = std::max(sum.peak_running_plus_waiting, s.peak_running_plus_waiting);
  }
  return sum;
}

bool ReloadableEngine::wait_idle(double timeout_seconds) {
  Timer t;
  for (const auto& v : all_versions()) {
    double left = std::max(0.0, timeout_seconds - t.seconds());
    if (!v->engine->wait_idle(left)) return false;
  }
  return true;
}

std::string ReloadableEngine::fingerprint(uint64_t id) const {
  return strprintf("distllm-v%lld", static_cast<long long>(id >> kVersionShift));
}

}  // namespace distllm::serve
