#include "distllm/router/sse_relay.h"

#include "distllm/http/openai_error.h"

namespace distllm::router {
namespace {

constexpr size_t kMaxDoneEventBytes = 256;  // "data: [DONE]" with room for id:, event: and comment lines

// The event's data (its "data:" lines joined by newlines, one leading space of each
// value dropped), as the SSE specification defines it.
std::string event_data(std::string_view event) {
  std::string data;
  bool any = false;
  while (!event.empty()) {
    size_t end = event.find_first_of("\r\n");
    std::string_view line = event.substr(0, end);
    if (line.substr(0, 5) == "data:") {
      std::string_view v = line.substr(5);
      if (!v.empty() && v.front() == ' ') v.remove_prefix(1);
      if (any) data += '\n';
      data.append(v);
      any = true;
    }
    if (end == std::string_view::npos) break;
    event.remove_prefix(end + 1);
  }
  return data;
}

}  // namespace

void SseRelay::relay_event(std::string_view event, std::string& out) {
  out.append(event);
  relayed_ += event.size();
  // Only a short event can be [DONE]: token events are not parsed.
  if (!mid_event_ && event.size() <= kMaxDoneEventBytes && event_data(event) == "[DONE]") done_ = true;
  mid_event_ = false;
}

void SseRelay::feed(std::string_view bytes, std::string& out) {
  pending_.append(bytes);
  // Lines end with CRLF, LF or CR; an empty line ends the event.
  size_t event_start = 0;
  size_t i = line_start_;
  while (true) {
    const size_t at = pending_.find_first_of("\r\n", i);
    if (at == std::string::npos) break;
    size_t len = 1;
    if (pending_[at] == '\r') {
      if (at + 1 == pending_.size()) break;  // a CR at the end: an LF may follow
      if (pending_[at + 1] == '\n') len = 2;
    }
    const bool blank = at == i;
    i = at + len;
    if (blank) {
      relay_event(std::string_view(pending_).substr(event_start, i - event_start), out);
      event_start = i;
    }
  }
  pending_.erase(0, event_start);
  line_start_ = i - event_start;
  if (pending_.size() > kMaxPendingBytes) {  // not SSE as we know it: pass it through
    out.append(pending_);
    relayed_ += pending_.size();
    mid_event_ = true;
    pending_.clear();
    line_start_ = 0;
  }
}

std::string SseRelay::broken_ending(int status, std::string_view message, std::string_view code) const {
  std::string out = mid_event_ ? "\n\n" : "";  // end the event the relayed bytes stopped in
  out += http::openai_error_events(status, message, code);
  return out;
}

}  // namespace distllm::router
