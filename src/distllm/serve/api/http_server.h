// The OpenAI-compatible HTTP server (cpp-httplib) in front of the engine.
//
//   POST /v1/completions, POST /v1/chat/completions   (streaming SSE or not)
//   GET  /v1/models, GET /health, GET /metrics
//
// Every HTTP request runs on one of cpp-httplib's worker threads; generation
// requests submit to the engine and wait on their output queue, watching their
// socket: a client that disconnects gets its requests aborted (their KV blocks
// are freed by the next engine step). Errors are OpenAI error objects.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "distllm/serve/chat_formatter.h"
#include "distllm/serve/engine.h"
#include "distllm/serve/metrics.h"

namespace distllm::serve::api {

struct ApiServerConfig {
  std::string host = "127.0.0.1";
  int port = 8000;  // 0: any free port (see ApiServer::bind)
  std::string model_name = "model";
  std::string api_key;  // non-empty: /v1/* needs "Authorization: Bearer <key>"
  size_t max_body_bytes = 2u << 20;
  int http_threads = 0;  // 0: enough for every running and queued request, plus 16
  // Token ids that end every request (besides the tokenizer's EOS), e.g. from
  // generation_config.json's eos_token_id list.
  std::vector<int32_t> default_stop_token_ids;
};

class ApiServer {
 public:
  ApiServer(Engine& engine, const ChatFormatter& chat, ServeMetrics& metrics, ApiServerConfig config);
  ~ApiServer();

  // Binds the listening socket and returns the port. Throws distllm::Error.
  int bind();
  // Serves until stop(). Call bind() first.
  void serve();
  void stop();
  int port() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace distllm::serve::api
