#include "distllm/http/client_deadline.h"

#include <chrono>

namespace distllm::http {

ClientDeadline::ClientDeadline(httplib::Client& client, double head_s, double whole_s) : client_(client) {
  watchdog_ = std::thread([this, head_s, whole_s] { watch(head_s, whole_s); });
}

ClientDeadline::~ClientDeadline() { finish(); }

void ClientDeadline::got_head() {
  std::lock_guard<std::mutex> lock(mu_);
  head_ = true;
  cv_.notify_all();
}

ClientDeadline::Missed ClientDeadline::finish() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    done_ = true;
    cv_.notify_all();
  }
  if (watchdog_.joinable()) watchdog_.join();
  return missed_;
}

void ClientDeadline::watch(double head_s, double whole_s) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  auto at = [&](double s) { return start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s)); };
  std::unique_lock<std::mutex> lock(mu_);
  if (!cv_.wait_until(lock, at(head_s), [&] { return head_ || done_; })) {
    missed_ = Missed::kHead;
  } else if (!cv_.wait_until(lock, at(whole_s), [&] { return done_; })) {
    missed_ = Missed::kWhole;
  }
  // Stop until the request returns: a stop() that lands while the client is still
  // connecting waits for the connect (httplib holds its socket lock meanwhile) and
  // then shuts the socket; repeating covers a request between two of its reads.
  while (missed_ != Missed::kNone && !done_) {
    lock.unlock();
    client_.stop();
    lock.lock();
    cv_.wait_for(lock, std::chrono::milliseconds(100), [&] { return done_; });
  }
}

}  // namespace distllm::http
