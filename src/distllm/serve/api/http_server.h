// The OpenAI-compatible HTTP server (cpp-httplib) in front of the engine.
//
//   POST /v1/completions, POST /v1/chat/completions   (streaming SSE or not)
//   GET  /v1/models, GET /health, GET /metrics
//   POST /admin/reload   (when the server can reload its model: ApiServerConfig::reload)
//   POST /internal/kv/prefill                          (--role prefill, kv_transfer_http.h)
//
// Connections are accepted and requests read by the HTTP edge the router shares
// (http/edge.h: one event thread, read deadlines, connection caps, framing checks,
// the API key); each complete request is answered by cpp-httplib on a worker thread. Generation requests
// submit to the engine and wait on their output queue, watching their socket: a
// client that disconnects gets its requests aborted (their KV blocks are freed by
// the next engine step). Errors are OpenAI error objects.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "distllm/serve/api/reasoning_parser.h"
#include "distllm/serve/api/tool_calls.h"
#include "distllm/serve/chat_formatter.h"
#include "distllm/serve/engine.h"
#include "distllm/serve/metrics.h"
#include "distllm/serve/reloadable_engine.h"

namespace distllm::serve::api {

class KvTransfer;  // kv_transfer_http.h

struct ApiServerConfig {
  std::string host = "127.0.0.1";
  int port = 8000;  // 0: any free port (see ApiServer::bind)
  std::string model_name = "model";
  std::string api_key;  // non-empty: /v1/* and /admin/* need "Authorization: Bearer <key>"
  size_t max_body_bytes = 2u << 20;
  bool log_requests = true;  // one log line per request when it ends (vLLM's --disable-log-requests turns it off)
  int http_threads = 0;  // 0: enough for every running and queued request, plus 16
  double header_timeout_s = 10;      // a request's head must arrive within this
  double body_timeout_s = 30;        // and its body within this after the head
  double keep_alive_timeout_s = 5;   // an idle connection between requests is closed after this
  int max_connections = 4096;        // open connections at most; more get 503
  int max_connections_per_ip = 512;  // from one client address; more get 503
  // Token ids that end every request (besides the tokenizer's EOS), e.g. from
  // generation_config.json's eos_token_id list.
  std::vector<int32_t> default_stop_token_ids;
  // How the model writes tool calls in free text, for tool_choice "auto".
  ToolCallFormat tool_call_format = ToolCallFormat::kNone;
  // How the model marks its thinking (--reasoning-parser): chat responses then carry
  // it as reasoning_content, apart from the answer.
  ReasoningFormat reasoning_format = ReasoningFormat::kNone;
  // POST /admin/reload calls this (and waits for it); unset: the route is 404.
  std::function<ReloadOutcome()> reload;
  // Prefill/decode disaggregation (kv_transfer_http.h); nullptr or role both: off.
  // A prefill role serves POST /internal/kv/prefill; a decode role honours the
  // X-KV-Prefill-From header of completion and chat requests. Not owned.
  KvTransfer* kv_transfer = nullptr;
};

class ApiServer {
 public:
  ApiServer(EngineClient& engine, const ChatFormatter& chat, ServeMetrics& metrics, ApiServerConfig config);
  ~ApiServer();

  // Binds the listening socket and returns the port. Throws distllm::Error.
  int bind();
  // Serves until stop() or shutdown_gracefully(). Call bind() first.
  void serve();
  // Stops at once: requests being answered finish, nothing new is read.
  void stop();
  // Graceful shutdown (thread-safe; serve() returns at the end): new requests and
  // /health get 503, requests in the engine may finish for up to drain_timeout_s,
  // then the rest are ended (a stream gets a final event with an error and
  // finish_reason "abort", then [DONE]). Returns true when everything finished in time.
  bool shutdown_gracefully(double drain_timeout_s);
  int port() const;
  // Connections open now (for tests and logs).
  int open_connections() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace distllm::serve::api
