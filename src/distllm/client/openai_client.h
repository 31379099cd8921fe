// A small blocking client for OpenAI-compatible servers (any of them: ours,
// vLLM, llama.cpp's...), with server-sent-event streaming. Used by
// `distllm bench serve` and by the tests.
#pragma once

#include <functional>
#include <string>

namespace distllm::client {

struct HttpResult {
  int status = 0;          // HTTP status; 0 when no response arrived
  std::string transport_error;  // why no response arrived (connection refused, timeout...)
  std::string body;        // the body of a non-streaming or non-200 response
  std::string retry_after;  // the Retry-After header, if any
  bool done = false;       // a stream ended with "data: [DONE]"
  bool cancelled = false;  // the caller stopped the stream
};

class OpenAIClient {
 public:
  // base_url: "http://host:port" (a path prefix such as "/v1" is not part of it).
  explicit OpenAIClient(std::string base_url, std::string api_key = "", double timeout_seconds = 600.0);

  HttpResult get(const std::string& path) const;
  HttpResult post(const std::string& path, const std::string& json_body) const;
  // POSTs and reads the response as server-sent events: `on_event` gets each
  // "data:" payload except the final [DONE]; returning false closes the
  // connection (the server sees a client disconnect). A non-200 response is
  // returned with its body and no events.
  HttpResult post_stream(const std::string& path, const std::string& json_body,
                         const std::function<bool(const std::string& data)>& on_event) const;

 private:
  std::string base_url_;
  std::string api_key_;
  double timeout_;
};

// Incremental parser of a text/event-stream body.
class SseParser {
 public:
  // Feeds bytes; calls `on_data` for each complete event's data (multi-line data
  // joined with '\n'); returns false as soon as on_data does.
  bool feed(const char* data, size_t n, const std::function<bool(const std::string&)>& on_data);

 private:
  std::string buffer_;
};

}  // namespace distllm::client
