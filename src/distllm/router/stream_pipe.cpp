#include "distllm/router/stream_pipe.h"

namespace distllm::router {

void StreamPipe::set_status(int status, std::string content_type) {
  std::lock_guard<std::mutex> lock(mu_);
  if (status_ != 0) return;
  status_ = status;
  content_type_ = std::move(content_type);
  cv_.notify_all();
}

bool StreamPipe::push(const char* data, size_t n) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return cancelled_ || chunks_.size() < max_chunks_; });
  if (cancelled_) return false;
  chunks_.emplace_back(data, n);
  cv_.notify_all();
  return true;
}

void StreamPipe::finish() {
  std::lock_guard<std::mutex> lock(mu_);
  finished_ = true;
  cv_.notify_all();
}

int StreamPipe::wait_status() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return status_ != 0 || finished_; });
  return status_;
}

bool StreamPipe::pop(std::string& chunk) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return !chunks_.empty() || finished_ || cancelled_; });
  if (chunks_.empty() || cancelled_) return false;
  chunk = std::move(chunks_.front());
  chunks_.pop_front();
  cv_.notify_all();
  return true;
}

StreamPipe::Pop StreamPipe::pop_for(std::string& chunk, double seconds) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!cv_.wait_for(lock, std::chrono::duration<double>(seconds),
                    [&] { return !chunks_.empty() || finished_ || cancelled_; }))
    return Pop::kTimeout;
  if (chunks_.empty() || cancelled_) return Pop::kEnd;
  chunk = std::move(chunks_.front());
  chunks_.pop_front();
  cv_.notify_all();
  return Pop::kChunk;
}

void StreamPipe::cancel() {
  std::lock_guard<std::mutex> lock(mu_);
  cancelled_ = true;
  cv_.notify_all();
}

bool StreamPipe::cancelled() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cancelled_;
}

}  // namespace distllm::router
