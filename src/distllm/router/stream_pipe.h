// Hands a streamed upstream response from the thread that reads it (the pump) to the
// thread that writes it to the client.
//
// Why: the client's status line must be the replica's. cpp-httplib sends the head of
// a chunked response before its content provider runs, so the router first waits
// here for the upstream status (retrying elsewhere on a 5xx before any byte): a 2xx
// becomes a stream, a 4xx is relayed with its own status and body. The queue is
// bounded, so a slow client slows the upstream read instead of buffering without
// limit; a client that leaves cancels the pump, which closes the upstream
// connection (and so cancels the request on the replica).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <mutex>
#include <string>

namespace distllm::router {

class StreamPipe {
 public:
  explicit StreamPipe(size_t max_chunks = 256) : max_chunks_(max_chunks) {}

  // Pump side. The first set_status wins. push blocks while the queue is full and
  // returns false once the consumer cancelled. finish ends the stream.
  void set_status(int status, std::string content_type);
  bool push(const char* data, size_t n);
  void finish();

  // Client side. wait_status blocks until a status is set or the pump finished
  // without one (returns 0 then). pop returns false when finished and drained.
  // pop_for waits at most `seconds` (so the caller can look at its client).
  int wait_status();
  const std::string& content_type() const { return content_type_; }  // after wait_status
  bool pop(std::string& chunk);
  enum class Pop { kChunk, kEnd, kTimeout };
  Pop pop_for(std::string& chunk, double seconds);
  void cancel();
  bool cancelled() const;

 private:
  const size_t max_chunks_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::string> chunks_;
  int status_ = 0;
  std::string content_type_;
  bool finished_ = false;
  bool cancelled_ = false;
};

}  // namespace distllm::router
