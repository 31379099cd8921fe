// `serve_test_server`: the real HTTP server and engine around the deterministic test
// runner and byte codec (tests/serve), for tests with real clients (curl, the
// openai npm package, the soak driver) before and besides real models.
//
//   serve_test_server [--port 0] [--num-blocks 256] [--block-size 4]
//                     [--max-num-seqs 8] [--max-num-batched-tokens 64]
//                     [--max-queued-requests 16] [--step-delay-ms 0]
//                     [--eos-permille 0] [--api-key K] [--max-body-bytes N]
//                     [--max-context 1024] [--no-prefix-cache] [--model-dir DIR]
//                     [--drain-timeout 30] [--header-timeout 10] [--body-timeout 30]
//                     [--keep-alive-timeout 5] [--max-connections N] [--max-connections-per-ip N]
//                     [--tiny-model] [--tiny-layers 2] [--kv-cache-dtype f32|bf16|int8] [--role both|prefill|decode]
//                     [--kv-transfer-timeout 60] [--kv-transfer-min-tokens 0] [--kv-transfer-connect-timeout 2]
//                     [--echo] [--reasoning-parser qwen3|deepseek_r1] [--tool-call-parser hermes|llama3_json|mistral]
//
// --echo: the scripted model of serve_api/echo_runner.h (answers with the last user
// message, a byte per token), for clients checking how outputs are parsed.
// --tiny-model: a real InferenceRunner over a tiny random GPT-2 (vocabulary 257,
// fixed seed: every server process gets the same weights) instead of the test
// runner, for prefill/decode disaggregation tests (--role, kv_transfer_http.h);
// --tiny-layers changes its depth (a "different model" for mismatch tests);
// --step-delay-ms slows its steps too (so a test can act in the middle of a stream).
//
// Prints "listening on <port>" once ready; shuts down gracefully on SIGTERM/SIGINT
// (as `distllm serve`) and at once when stdin closes (so a test harness that dies
// takes the server with it).
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <unistd.h>

#include "distllm/base/parallel.h"
#include "distllm/model/transformer.h"
#include "distllm/serve/api/http_server.h"
#include "distllm/serve/api/kv_transfer_http.h"
#include "distllm/serve/inference_runner.h"
#include "distllm/serve/api/shutdown_signals.h"
#include "serve/test_codec.h"
#include "serve/test_runner.h"
#include "serve_api/echo_runner.h"

using namespace distllm::serve;

namespace {

// A runner whose every step takes at least `delay_ms` longer (for --tiny-model).
class DelayedRunner : public ModelRunner {
 public:
  DelayedRunner(ModelRunner& inner, int delay_ms) : inner_(inner), delay_ms_(delay_ms) {}
  KvGeometry kv_geometry() const override { return inner_.kv_geometry(); }
  size_t kv_bytes_per_block(int block_size) const override { return inner_.kv_bytes_per_block(block_size); }
  void allocate_kv(int num_blocks, int block_size) override { inner_.allocate_kv(num_blocks, block_size); }
  int vocab_size() const override { return inner_.vocab_size(); }
  int max_context() const override { return inner_.max_context(); }
  void execute(const std::vector<SequenceChunk>& batch, std::vector<float>& logits) override {
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms_));
    inner_.execute(batch, logits);
  }
  void read_kv_block(int32_t block, void* out) const override { inner_.read_kv_block(block, out); }
  void write_kv_block(int32_t block, const void* in) override { inner_.write_kv_block(block, in); }

 private:
  ModelRunner& inner_;
  int delay_ms_;
};

}  // namespace

int main(int argc, char** argv) {
  EngineConfig cfg;
  cfg.block_size = 4;
  cfg.num_blocks = 256;
  cfg.scheduler.max_num_seqs = 8;
  cfg.scheduler.max_num_batched_tokens = 64;
  cfg.max_queued_requests = 16;
  cfg.check_invariants = true;
  testing::TestRunnerOptions ropt;
  api::ApiServerConfig scfg;
  scfg.port = 0;
  scfg.model_name = "test-model";
  std::string model_dir;
  double drain_timeout = 30;
  bool tiny_model = false;
  bool echo = false;
  int tiny_layers = 2;
  distllm::DType kv_dtype = distllm::DType::kF32;  // --kv-cache-dtype (with --tiny-model)
  api::KvTransferConfig kvcfg;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "missing value for %s\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--port") scfg.port = std::atoi(next().c_str());
    else if (a == "--num-blocks") cfg.num_blocks = std::atoi(next().c_str());
    else if (a == "--block-size") cfg.block_size = std::atoi(next().c_str());
    else if (a == "--max-num-seqs") cfg.scheduler.max_num_seqs = std::atoi(next().c_str());
    else if (a == "--max-num-batched-tokens") cfg.scheduler.max_num_batched_tokens = std::atoi(next().c_str());
    else if (a == "--max-queued-requests") cfg.max_queued_requests = std::atoi(next().c_str());
    else if (a == "--step-delay-ms") ropt.step_delay_ms = std::atoi(next().c_str());
    else if (a == "--eos-permille") ropt.eos_permille = std::atoi(next().c_str());
    else if (a == "--max-context") ropt.max_context = std::atoi(next().c_str());
    else if (a == "--api-key") scfg.api_key = next();
    else if (a == "--model-name") scfg.model_name = next();
    else if (a == "--max-body-bytes") scfg.max_body_bytes = static_cast<size_t>(std::atoll(next().c_str()));
    else if (a == "--no-prefix-cache") cfg.enable_prefix_cache = false;
    else if (a == "--model-dir") model_dir = next();
    else if (a == "--drain-timeout") drain_timeout = std::atof(next().c_str());
    else if (a == "--header-timeout") scfg.header_timeout_s = std::atof(next().c_str());
    else if (a == "--body-timeout") scfg.body_timeout_s = std::atof(next().c_str());
    else if (a == "--keep-alive-timeout") scfg.keep_alive_timeout_s = std::atof(next().c_str());
    else if (a == "--max-connections") scfg.max_connections = std::atoi(next().c_str());
    else if (a == "--max-connections-per-ip") scfg.max_connections_per_ip = std::atoi(next().c_str());
    else if (a == "--tiny-model") tiny_model = true;
    else if (a == "--echo") echo = true;
    else if (a == "--reasoning-parser") scfg.reasoning_format = api::reasoning_format_from_name(next());
    else if (a == "--tool-call-parser") scfg.tool_call_format = api::tool_call_format_from_name(next());
    else if (a == "--tiny-layers") tiny_layers = std::atoi(next().c_str());
    else if (a == "--kv-cache-dtype") kv_dtype = distllm::parse_dtype(next());
    else if (a == "--role") kvcfg.role = api::serve_role_from_name(next());
    else if (a == "--kv-transfer-timeout") kvcfg.timeout_s = std::atof(next().c_str());
    else if (a == "--kv-transfer-min-tokens") kvcfg.min_prompt_tokens = std::atoi(next().c_str());
    else if (a == "--kv-transfer-connect-timeout") kvcfg.connect_timeout_s = std::atof(next().c_str());
    else {
      std::fprintf(stderr, "unknown flag %s\n", a.c_str());
      return 2;
    }
  }
  try {
    testing::ByteCodec codec;
    testing::TestRunner test_runner(ropt);
    testing::EchoRunner echo_runner;
    std::unique_ptr<InferenceRunner> inference;
    if (tiny_model) {
      distllm::set_num_threads(1);
      distllm::ModelConfig c;
      c.family = distllm::ModelFamily::kGpt2;
      c.vocab_size = 257;
      c.n_layer = tiny_layers;
      c.n_head = 4;
      c.n_kv_head = 4;
      c.n_embd = 32;
      c.max_position = ropt.max_context < 256 ? ropt.max_context : 256;
      c.tie_embeddings = true;
      c.normalize();
      auto m = std::make_shared<distllm::Transformer>(c);
      m->init_weights(11);
      inference = std::make_unique<InferenceRunner>(m, distllm::DType::kF32, kv_dtype);
    }
    std::unique_ptr<DelayedRunner> delayed;
    if (inference && ropt.step_delay_ms > 0) delayed = std::make_unique<DelayedRunner>(*inference, ropt.step_delay_ms);
    ModelRunner& runner = delayed ? static_cast<ModelRunner&>(*delayed)
                          : inference ? static_cast<ModelRunner&>(*inference)
                          : echo      ? static_cast<ModelRunner&>(echo_runner)
                                      : test_runner;
    ServeMetrics metrics(scfg.model_name);
    Engine engine(runner, codec, cfg, metrics);
    std::unique_ptr<api::KvTransfer> kv_transfer;
    if (kvcfg.role != api::ServeRole::kBoth) {
      kvcfg.api_key = scfg.api_key;
      kv_transfer = std::make_unique<api::KvTransfer>(engine, kvcfg);
      scfg.kv_transfer = kv_transfer.get();
    }
    ChatFormatter chat = model_dir.empty() ? ChatFormatter::default_format() : ChatFormatter::for_model_dir(model_dir);
    api::ApiServer server(engine, chat, metrics, scfg);
    int port = server.bind();
    engine.start();
    api::ShutdownOnSignals signals(server, drain_timeout);
    std::signal(SIGPIPE, SIG_IGN);
    std::thread watch_stdin([&] {
      char buf[256];
      while (read(0, buf, sizeof buf) > 0) {
      }
      server.stop();
    });
    watch_stdin.detach();
    std::printf("listening on %d\n", port);
    std::fflush(stdout);
    server.serve();
    engine.stop();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
