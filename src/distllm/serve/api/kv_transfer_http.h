// Prefill/decode disaggregation over HTTP (docs/serving.md, "Prefill/decode
// disaggregation"):
//
//   prefill replica (--role prefill): POST /internal/kv/prefill with
//     {"prompt_token_ids": [...]} submits the prompt to its engine (a one-token
//     request: the prefix cache then holds the prompt's full blocks), answers the
//     response head at once, and streams those blocks in the wire format of
//     kv_transfer/wire.h once the prefill is done (chunked, application/x-distllm-kv).
//     A prefill that fails after the head ends the stream early.
//   decode replica (--role decode): a completion or chat request carrying
//     `X-KV-Prefill-From: http://host:port` first pulls its prompt's blocks from
//     that prefill replica and imports them into its own prefix cache; the request
//     then runs normally and its prefix-cache hit leaves only the tail (less than
//     one block plus the last token) to compute here. Any failure (replica down,
//     timeout, bad bytes, another model) is logged and counted, and the request is
//     computed locally: it never fails because of the transfer. Because the head
//     comes before the prefill, a replica that is hung (SIGSTOP, a stuck process)
//     is given up on after connect_timeout_s, not after the whole transfer timeout.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <httplib.h>

#include "distllm/serve/engine.h"
#include "distllm/serve/kv_transfer/wire.h"

namespace distllm::serve::api {

enum class ServeRole { kBoth, kPrefill, kDecode };
// "both", "prefill", "decode"; throws distllm::Error for anything else.
ServeRole serve_role_from_name(std::string_view name);
const char* serve_role_name(ServeRole role);

inline constexpr const char* kPrefillFromHeader = "X-KV-Prefill-From";
inline constexpr const char* kPrefillPath = "/internal/kv/prefill";

struct KvTransferConfig {
  ServeRole role = ServeRole::kBoth;
  // A decode replica's whole pull (connect, the prefill replica's queue and
  // compute, the transfer); past it the request is computed locally.
  double timeout_s = 60;
  // Sent to the prefill replica as "Authorization: Bearer <key>" (its --api-key).
  std::string api_key;
  // Decode role: prompts shorter than this are computed here without a pull (the
  // round trip costs more than their prefill). 0: pull whenever a full block is usable.
  int min_prompt_tokens = 0;
  // Decode role: connecting to the prefill replica and getting its response head,
  // which it sends before it starts the prefill. A replica that cannot do that is
  // not answering (hung, stopped, swamped): the prompt is computed here at once.
  double connect_timeout_s = 2;
};

class KvTransfer {
 public:
  // Requests go through `client`; block export and import through the Engine
  // `engine()` returns at that moment (with hot reload, the version serving now; a
  // reload between a prefill and its export just leaves fewer blocks to send, and
  // the decode side computes what is missing). The block geometry is read from it
  // per transfer, so a reload to another geometry cannot mix block sizes.
  using EngineProvider = std::function<std::shared_ptr<Engine>()>;
  KvTransfer(EngineClient& client, EngineProvider engine, KvTransferConfig config);
  // One fixed engine (not owned), as the test server uses.
  KvTransfer(Engine& engine, KvTransferConfig config);

  ServeRole role() const { return config_.role; }
  const KvTransferConfig& config() const { return config_; }
  // The serving engine's block geometry and model shape.
  kv_transfer::KvFingerprint fingerprint() const;

  // Prefill side: answers POST /internal/kv/prefill.
  void handle_prefill(const httplib::Request& req, httplib::Response& res);

  // Decode side: pulls the K/V of `prompt`'s full blocks (the last token excluded)
  // from `prefill_url` and caches them here. Never throws: on failure it logs,
  // counts a fallback and returns 0. Returns the blocks now cached.
  int pull(const std::string& prefill_url, const std::vector<int32_t>& prompt);

  // Prometheus lines (distllm:kv_transfer_*), with the server's model_name label.
  std::string render_metrics(const std::string& model_name) const;

  struct Counters {
    int64_t blocks_sent = 0, bytes_sent = 0, prefill_requests = 0;
    int64_t blocks_received = 0, bytes_received = 0, pulls = 0, fallbacks = 0;
    double transfer_seconds = 0;  // sum over pulls (successful or not)
  };
  Counters counters() const;

 private:
  // Blocks of `n` prompt tokens a decode replica can use: the last token never is.
  static int usable_blocks(size_t n, uint32_t block_size) {
    return n < 2 ? 0 : static_cast<int>((n - 1) / block_size);
  }
  struct PrefillJob;
  std::shared_ptr<Engine> engine() const;
  // Prefill side, on the stream: waits for the prefill and exports its blocks.
  // Throws distllm::Error when it fails, times out or the decode replica left.
  std::vector<std::string> run_prefill(PrefillJob& job, const kv_transfer::KvFingerprint& fp);
  int pull_or_throw(const std::string& prefill_url, const std::vector<int32_t>& prompt, int64_t& bytes);

  EngineClient& client_;
  EngineProvider engine_;
  KvTransferConfig config_;
  std::atomic<int64_t> blocks_sent_{0}, bytes_sent_{0}, prefill_requests_{0};
  std::atomic<int64_t> blocks_received_{0}, bytes_received_{0}, pulls_{0}, fallbacks_{0};
  std::atomic<int64_t> transfer_micros_{0};
};

}  // namespace distllm::serve::api
