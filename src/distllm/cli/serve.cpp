// `distllm serve`: the OpenAI-compatible server (docs/serving.md).

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <memory>

#include <nlohmann/json.hpp>

#include "distllm/base/error.h"
#include "distllm/base/timer.h"
#include "distllm/base/log.h"
#include "distllm/base/parallel.h"
#include "distllm/cli/command.h"
#include "distllm/cli/http_edge_flags.h"
#include "distllm/cli/model_flags.h"
#include "distllm/cli/world_command.h"
#include "distllm/io/file_util.h"
#include "distllm/model/hf_cache.h"
#include "distllm/serve/api/http_server.h"
#include "distllm/serve/api/kv_transfer_http.h"
#include "distllm/serve/api/shutdown_signals.h"
#include "distllm/serve/chat_formatter.h"
#include "distllm/serve/engine.h"
#include "distllm/serve/inference_runner.h"
#include "distllm/serve/model_bundle.h"
#include "distllm/serve/model_reloader.h"
#include "distllm/serve/model_watch.h"
#include "distllm/serve/reloadable_engine.h"
#include "distllm/serve/stats_logger.h"
#include "distllm/serve/tokenizer_codec.h"
#include "distllm/serve/tp_runner.h"
#include "distllm/train/model_conversion.h"

namespace distllm {
namespace {

namespace fs = std::filesystem;

double unix_time_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

int run_serve_impl(Args& args, const comm::ProcessGroupPtr& world) {
  apply_thread_flag(args);
  const std::string model_arg = args.get_required(
      "model", "Hugging Face model directory (config.json, model.safetensors, tokenizer.json), hub cache folder "
               "(models--ORG--NAME) or cached id ORG/NAME");
  std::string tokenizer_path = args.get_string("tokenizer", "", "tokenizer (file or directory; default: the model directory)");
  serve::api::ApiServerConfig scfg;
  scfg.host = args.get_string("host", "127.0.0.1", "address to bind (0.0.0.0 for every interface)");
  scfg.port = static_cast<int>(args.get_int("port", 8000, "port (0: any free port)"));
  std::string served_name = args.get_string("served-model-name", "", "name clients send as `model` (default: ORG/NAME for a hub id or cache folder, else the directory name)");
  scfg.api_key = args.get_string("api-key", "", "require `Authorization: Bearer KEY` on /v1/* and /admin/* (without it, both are open)");
  scfg.log_requests = !args.get_flag("disable-log-requests", "no log line per request");
  const double log_stats_interval = args.get_double(
      "log-stats-interval", 10, "seconds between throughput lines in the log while busy (0: none)");
  http::FrontLimits edge = read_http_edge_flags(args);
  scfg.http_threads = static_cast<int>(args.get_int("http-threads", 0, "HTTP worker threads (0: running + queued + 16)"));
  double drain_timeout = args.get_double("drain-timeout", 30, "on SIGTERM/SIGINT, seconds running requests may finish");
  serve::EngineConfig ecfg;
  ecfg.kv_cache_memory_gib = args.get_double("kv-cache-memory", 1.0, "GiB of K/V cache");
  ecfg.block_size = static_cast<int>(args.get_int("block-size", 16, "tokens per KV block"));
  ecfg.scheduler.max_num_batched_tokens = static_cast<int>(args.get_int("max-num-batched-tokens", 512, "token budget per engine step"));
  ecfg.scheduler.max_num_seqs = static_cast<int>(args.get_int("max-num-seqs", 64, "running requests at most"));
  ecfg.max_queued_requests = static_cast<int>(args.get_int("max-queued-requests", 256, "running + waiting beyond --max-num-seqs + this get 429"));
  ecfg.max_model_len = static_cast<int>(args.get_int("max-model-len", 0, "context length limit (0: the model's)"));
  ecfg.enable_prefix_cache = !args.get_flag("no-prefix-cache", "turn the radix prefix cache off");
  ecfg.speculative.method = serve::parse_speculative_method(
      args.get_string("speculative", "none",
                      "speculative decoding: none, ngram (prompt lookup) or draft (a smaller model, --draft-model)"));
  std::string draft_dir = args.get_string(
      "draft-model", "", "model directory of the draft model for --speculative draft (same tokenizer as --model)");
  ecfg.speculative.num_speculative_tokens =
      static_cast<int>(args.get_int("num-speculative-tokens", 4, "draft tokens verified per step (k)"));
  ecfg.speculative.ngram.min_n = static_cast<int>(args.get_int("ngram-min", 2, "shortest suffix n-gram looked up"));
  ecfg.speculative.ngram.max_n = static_cast<int>(args.get_int("ngram-max", 4, "longest suffix n-gram looked up (tried first)"));
  ecfg.speculative.disable_by_batch_size = static_cast<int>(args.get_int(
      "speculative-disable-by-batch-size", 0, "no drafts while more than this many requests run (0: always draft)"));
  const DType weight_dtype = inference_dtype_flag(args);
  const DType kv_dtype = kv_cache_dtype_flag(args);
  std::string chat_template = args.get_string(
      "chat-template", "", "Jinja chat template file (overrides the model's), or chatml for the ChatML format; a model "
                           "without a template answers chat requests with 400 unless one is given");
  std::string tool_parser = args.get_string("tool-call-parser", "none",
                                            "how the model writes tool calls, for tool_choice auto: none, hermes, llama3_json, mistral");
  std::string reasoning_parser = args.get_string(
      "reasoning-parser", "none",
      "how the model marks its thinking, returned as reasoning_content: none, qwen3 (<think>...</think> when the output "
      "opens with it), deepseek_r1 (the output starts thinking, up to </think>)");
  bool watch = args.get_flag("watch", "reload the model when --model DIR holds a new one (docs/serving.md, Hot reload)");
  double watch_interval = args.get_double("watch-interval", 2, "with --watch: seconds between looks at --model DIR");
  std::string watch_checkpoints = args.get_string(
      "watch-checkpoints", "",
      "reload from the newest checkpoint of this training --checkpoint-dir instead of --model DIR (implies --watch)");
  const std::string role_name = args.get_string(
      "role", "both",
      "both (co-located), prefill (serves POST /internal/kv/prefill: prompts' KV blocks for decode replicas) or "
      "decode (pulls a prompt's KV from the replica named by the X-KV-Prefill-From header, see `distllm route "
      "--prefill`)");
  const double kv_transfer_timeout = args.get_double(
      "kv-transfer-timeout", 60, "decode role: seconds a KV pull (remote prefill + transfer) may take before the "
                                 "prompt is computed here instead; prefill role: seconds a prefill may take");
  const double kv_transfer_connect_timeout = args.get_double(
      "kv-transfer-connect-timeout", 2, "decode role: seconds the prefill replica gets to accept a KV pull and answer "
      "its head (it does before prefilling); past them the prompt is computed here");
  const int kv_transfer_min_tokens = static_cast<int>(args.get_int(
      "kv-transfer-min-tokens", 0, "decode role: prompts shorter than this are computed here, without a KV pull"));
  const int tp = static_cast<int>(args.get_int(
      "tp", 1, "tensor-parallel size: under `mpirun -np N`, N = --tp; rank 0 serves HTTP and schedules, every rank "
               "runs its shard of each step (docs/serving.md, Tensor-parallel serving)"));
  if (args.help_or_finish()) return 0;
  check_tp_world(tp, world, "serve");
  if (tp > 1) {
    DL_CHECK(!watch && watch_checkpoints.empty(), "--watch and --watch-checkpoints are not supported with --tp");
    DL_CHECK(role_name == "both", "--role %s is not supported with --tp (KV blocks are split over the ranks)",
             role_name.c_str());
  }
  const serve::api::ServeRole role = serve::api::serve_role_from_name(role_name);
  scfg.tool_call_format = serve::api::tool_call_format_from_name(tool_parser);
  scfg.reasoning_format = serve::api::reasoning_format_from_name(reasoning_parser);

  DL_CHECK(ecfg.block_size >= 1 && ecfg.block_size <= 1024, "--block-size must be in [1, 1024], got %d", ecfg.block_size);
  DL_CHECK(scfg.port >= 0 && scfg.port <= 65535, "--port must be in [0, 65535], got %d", scfg.port);
  DL_CHECK(log_stats_interval >= 0, "--log-stats-interval must be >= 0, got %g", log_stats_interval);
  check_http_edge_flags(edge, "serve");
  scfg.max_body_bytes = edge.max_body_bytes;
  scfg.header_timeout_s = edge.header_timeout_s;
  scfg.body_timeout_s = edge.body_timeout_s;
  scfg.keep_alive_timeout_s = edge.keep_alive_timeout_s;
  scfg.max_connections = edge.max_connections;
  scfg.max_connections_per_ip = edge.max_connections_per_ip;
  DL_CHECK(drain_timeout >= 0, "--drain-timeout must not be negative");
  DL_CHECK(watch_interval > 0, "--watch-interval must be positive, got %g", watch_interval);
  if (!watch_checkpoints.empty()) {
    DL_CHECK(fs::is_directory(watch_checkpoints), "--watch-checkpoints %s is not a directory", watch_checkpoints.c_str());
    watch = true;
  }
  if (ecfg.speculative.method == serve::SpeculativeMethod::kDraft) {
    DL_CHECK(!draft_dir.empty(), "--speculative draft needs --draft-model DIR");
    draft_dir = resolve_model_dir(draft_dir);
    DL_CHECK(fs::is_directory(draft_dir), "--draft-model %s is not a directory", draft_dir.c_str());
  } else {
    DL_CHECK(draft_dir.empty(), "--draft-model is only used with --speculative draft");
  }
  const std::string model_dir = resolve_model_dir(model_arg);
  fs::path dir(model_dir);
  DL_CHECK(fs::is_directory(dir), "--model %s is not a directory", model_dir.c_str());
  scfg.model_name = served_name.empty() ? default_served_model_name(model_arg) : served_name;
  if (scfg.model_name.empty()) scfg.model_name = fs::absolute(dir).lexically_normal().parent_path().filename().string();

  // Everything that runs parallel loops before the engine thread takes over does so
  // on a thread that then exits (see run_on_transient_thread).
  Timer startup;
  // The directory's state before it is read: if it changes during the load, the
  // watcher sees a difference and loads it again.
  // (With --watch-checkpoints: the checkpoint there now counts as served; the next
  // one is loaded.)
  const std::string loaded_signature =
      watch_checkpoints.empty() ? serve::inspect_model_dir(model_dir).signature
                                : serve::inspect_checkpoint_dir(watch_checkpoints).signature;
  serve::ModelBundle bundle =
      run_on_transient_thread([&] { return serve::load_model_bundle(model_dir, tokenizer_path); });
  const double t_load = startup.seconds();
  std::shared_ptr<const ModelWeights> weights = bundle.weights;
  // Under --tp this rank's shard; it outlives every runner that points to it.
  std::unique_ptr<serve::TpShard> shard;
  InferenceTensorParallel tp_shard;
  if (tp > 1) {
    shard = std::make_unique<serve::TpShard>(world, weights->config());
    tp_shard = shard->inference();
  }
  if (tp > 1 && world->rank() != 0) {
    auto local = run_on_transient_thread(
        [&] { return std::make_unique<serve::InferenceRunner>(weights, weight_dtype, kv_dtype, tp_shard); });
    bundle.weights.reset();
    weights.reset();  // the runner keeps only its shard
    LOG_INFO("serve: tensor-parallel rank %d of %d ready", world->rank(), tp);
    serve::run_tp_worker(*local, *world);
    LOG_INFO("serve: tensor-parallel rank %d stopped", world->rank());
    return 0;
  }
  scfg.default_stop_token_ids = bundle.eos_ids;
  serve::TokenizerCodec codec(std::move(*bundle.tokenizer));
  serve::ChatFormatter chat = chat_template.empty() ? serve::ChatFormatter::for_model_dir(model_dir)
                                                   : serve::ChatFormatter::from_flag(chat_template, model_dir);
  if (!chat.has_template())
    LOG_WARN("serve: %s has no chat template: /v1/chat/completions answers 400 until the server is started with "
             "--chat-template FILE (or --chat-template chatml)",
             model_dir.c_str());
  const double t_chat = startup.seconds();
  std::shared_ptr<serve::ModelRunner> runner = run_on_transient_thread(
      [&] { return std::make_shared<serve::InferenceRunner>(weights, weight_dtype, kv_dtype, tp_shard); });
  std::shared_ptr<serve::TpLeaderRunner> tp_leader;
  if (tp > 1) runner = tp_leader = std::make_shared<serve::TpLeaderRunner>(runner, world);
  std::shared_ptr<const ModelWeights> draft_model;
  std::shared_ptr<serve::ModelRunner> draft_runner;
  if (!draft_dir.empty()) {
    draft_model = run_on_transient_thread([&] {
      serve::ModelBundle draft;
      try {
        draft = serve::load_model_bundle(draft_dir);
      } catch (const std::exception& e) {
        throw Error(strprintf("--draft-model %s: %s", draft_dir.c_str(), e.what()));
      }
      serve::check_same_tokenizer(codec.tokenizer(), *draft.tokenizer, draft_dir);
      DL_CHECK(draft.weights->config().vocab_size == weights->config().vocab_size,
               "--draft-model %s has a vocabulary of %d tokens but --model has %d", draft_dir.c_str(),
               draft.weights->config().vocab_size, weights->config().vocab_size);
      LOG_INFO("serve: draft model %s (%s)", draft_dir.c_str(), draft.weights->config().describe().c_str());
      // Every reload builds a new draft runner from these weights, long after start:
      // hold them in memory (a draft is small) rather than keep its files mapped, so
      // a draft directory rewritten in place later cannot fault the server.
      return ModelWeights::of(draft.weights->to_transformer());
    });
    draft_runner = run_on_transient_thread(
        [&] { return std::make_shared<serve::InferenceRunner>(draft_model, weight_dtype, kv_dtype); });
  }
  const double t_runner = startup.seconds();
  serve::ServeMetrics metrics(scfg.model_name);
  // The engine behind the API can swap models (hot reload): POST /admin/reload, and
  // --watch.
  serve::ReloadableEngine engine(codec, ecfg, metrics);
  const ModelConfig model_config = weights->config();
  // The runners copied what they read (a shard its slices): the mapping can go.
  bundle.weights.reset();
  weights.reset();
  run_on_transient_thread([&] { engine.install(runner, nullptr, draft_runner); });
  runner.reset();
  draft_runner.reset();
  metrics.record_model_loaded(engine.version(), unix_time_seconds(), startup.seconds(), /*is_reload=*/false);
  const double t_engine = startup.seconds();
  serve::ModelReloaderConfig rcfg{model_dir,          tokenizer_path, draft_model, watch_checkpoints,
                                  nullptr,            weight_dtype,   kv_dtype};
  if (!watch_checkpoints.empty()) {
    rcfg.load_checkpoint = [](const std::string& ck) -> std::shared_ptr<Transformer> {
      std::string step;
      std::shared_ptr<Transformer> m = load_checkpoint_model(ck, &step);
      LOG_INFO("serve: read checkpoint %s", step.c_str());
      return m;
    };
  }
  serve::ModelReloader reloader(engine, codec.tokenizer(), bundle.eos_ids, metrics, rcfg, loaded_signature);
  // A reload would replace rank 0's shard only: --tp serves the model it started with.
  if (tp == 1) scfg.reload = [&reloader] { return reloader.reload("POST /admin/reload"); };
  std::unique_ptr<serve::api::KvTransfer> kv_transfer;
  if (role != serve::api::ServeRole::kBoth) {
    // Exports and imports go to the engine serving now (a reload swaps it).
    kv_transfer = std::make_unique<serve::api::KvTransfer>(
        engine, [&engine] { return engine.current(); },
        serve::api::KvTransferConfig{role, kv_transfer_timeout, scfg.api_key, kv_transfer_min_tokens,
                                     kv_transfer_connect_timeout});
    scfg.kv_transfer = kv_transfer.get();
    LOG_INFO("serve: role %s (KV blocks: %s)", serve::api::serve_role_name(role),
             kv_transfer->fingerprint().describe().c_str());
  }
  serve::api::ApiServer server(engine, chat, metrics, scfg);
  int port = server.bind();
  if (watch) reloader.start_watching(watch_interval);
  serve::api::ShutdownOnSignals signals(server, drain_timeout);
  std::signal(SIGPIPE, SIG_IGN);
  LOG_INFO("serve: %s (%s), weights %s, KV cache %s (%d tokens), %d threads%s, chat template: %s",
           scfg.model_name.c_str(), model_config.describe().c_str(), inference_dtype_name(weight_dtype),
           inference_dtype_name(kv_dtype), engine.current()->num_blocks() * ecfg.block_size, num_threads(),
           tp > 1 ? strprintf(" per rank, tensor-parallel over %d ranks", tp).c_str() : "", chat.origin().c_str());
  LOG_INFO("serve: ready in %.2f s (weights + tokenizer %.2f, chat template %.2f, inference runner %.2f, KV cache "
           "and engine %.2f, HTTP %.2f)",
           startup.seconds(), t_load, t_chat - t_load, t_runner - t_chat, t_engine - t_runner,
           startup.seconds() - t_engine);
  std::printf("listening on http://%s:%d\n", scfg.host.c_str(), port);
  std::fflush(stdout);
  std::unique_ptr<serve::StatsLogger> stats_log;
  if (log_stats_interval > 0) stats_log = std::make_unique<serve::StatsLogger>(metrics, log_stats_interval);
  server.serve();
  stats_log.reset();
  reloader.stop_watching();
  engine.stop();
  if (tp_leader) tp_leader->shutdown_workers();
  LOG_INFO("serve: stopped");
  return 0;
}

int run_serve(Args& args) { return run_on_world(args, run_serve_impl); }

DISTLLM_REGISTER_COMMAND("serve", "OpenAI-compatible server with paged KV cache and continuous batching", run_serve);

}  // namespace
}  // namespace distllm
