// Relays a replica's server-sent event stream to the client whole events at a
// time, and knows whether it ended properly (with "data: [DONE]").
//
// Why: a replica that dies mid-stream (kill -9, a crash, a dropped connection)
// leaves the client a 200 stream that just stops: no finish_reason, no error, no
// [DONE], which clients read as a complete but short answer. The router forwards
// only complete events (an event ends at a blank line), so when the replica breaks
// off it can end the client's stream the way vLLM and OpenAI end a failed one: a
// `data: {"error": {...}}` event, then `data: [DONE]`, with no half event before it.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace distllm::router {

class SseRelay {
 public:
  // Past this many bytes without an event boundary the bytes are passed through
  // as they are (an upstream that is not really SSE cannot make the router buffer
  // without limit).
  static constexpr size_t kMaxPendingBytes = 1u << 20;

  // Takes upstream bytes; appends to `out` the bytes the client may get now (the
  // complete events, unchanged).
  void feed(std::string_view bytes, std::string& out);
  // A "data: [DONE]" event was relayed.
  bool done() const { return done_; }
  // Bytes relayed so far.
  size_t relayed() const { return relayed_; }
  // What ends a stream that broke off: a blank line if the relayed bytes stopped
  // inside an event, an error event (OpenAI's error object, `status` picks its
  // type) and [DONE]. Bytes of an unfinished event are never relayed.
  std::string broken_ending(int status, std::string_view message, std::string_view code) const;

 private:
  void relay_event(std::string_view event, std::string& out);

  std::string pending_;     // bytes of the event being received
  size_t line_start_ = 0;   // where in pending_ the line being received starts
  bool done_ = false;
  bool mid_event_ = false;  // the relayed bytes end inside an event (pass-through)
  size_t relayed_ = 0;
};

}  // namespace distllm::router
