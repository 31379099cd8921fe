#include "distllm/comm/work.h"

#include "distllm/base/peer_wait.h"
#include "distllm/base/strings.h"
#include "distllm/base/timer.h"
#include "distllm/comm/errors.h"

namespace distllm::comm {

Work::Work(OpKind kind, uint64_t seq, std::string group) : kind_(kind), seq_(seq), group_(std::move(group)) {}

bool Work::is_success() const {
  if (!is_completed()) return false;
  std::lock_guard lk(mu_);
  return error_ == nullptr;
}

void Work::wait() {
  if (is_completed()) {
    std::lock_guard lk(mu_);
    if (error_) std::rethrow_exception(error_);
    return;
  }
  PeerWait waiting;
  std::unique_lock lk(mu_);
  cv_.wait(lk, [&] { return done_.load(std::memory_order_relaxed); });
  if (error_) std::rethrow_exception(error_);
}

void Work::wait(std::chrono::duration<double> timeout) {
  PeerWait waiting;
  std::unique_lock lk(mu_);
  if (!cv_.wait_for(lk, timeout, [&] { return done_.load(std::memory_order_relaxed); })) {
    std::string what = describe();
    throw CommTimeoutError(strprintf("wait for %s gave up after %.3f s; the operation is still in flight",
                                     what.c_str(), timeout.count()),
                           op_kind_name(kind_), group_, seq_, {});
  }
  if (error_) std::rethrow_exception(error_);
}

std::exception_ptr Work::exception() const {
  std::lock_guard lk(mu_);
  return error_;
}

std::string Work::error_message() const {
  std::exception_ptr e = exception();
  if (!e) return "";
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& ex) {
    return ex.what();
  } catch (...) {
    return "unknown error";
  }
}

std::string Work::describe() const {
  return strprintf("%s #%llu on group '%s'", op_kind_name(kind_), static_cast<unsigned long long>(seq_),
                   group_.c_str());
}

void Work::mark_started() { started_.store(now_seconds(), std::memory_order_release); }

void Work::finish(std::exception_ptr error) {
  finished_.store(now_seconds(), std::memory_order_release);
  {
    std::lock_guard lk(mu_);
    error_ = std::move(error);
    done_.store(true, std::memory_order_release);
  }
  cv_.notify_all();
}

}  // namespace distllm::comm
