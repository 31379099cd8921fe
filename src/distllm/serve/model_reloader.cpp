#include "distllm/serve/model_reloader.h"

#include <chrono>
#include <exception>

#include "distllm/base/error.h"
#include "distllm/base/log.h"
#include "distllm/base/parallel.h"
#include "distllm/base/timer.h"
#include "distllm/serve/inference_runner.h"
#include "distllm/serve/model_bundle.h"

namespace distllm::serve {
namespace {

// A model that loaded but may not replace the serving one (409).
class Refused : public Error {
 public:
  Refused(const std::string& message, std::string code) : Error(message), code_(std::move(code)) {}
  const std::string& code() const { return code_; }

 private:
  std::string code_;
};

std::string ids_text(const std::vector<int32_t>& ids) {
  std::string s = "[";
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? ", " : "") + std::to_string(ids[i]);
  return s + "]";
}

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

ModelReloader::ModelReloader(ReloadableEngine& engine, const Tokenizer& serving, std::vector<int32_t> eos_ids,
                             ServeMetrics& metrics, ModelReloaderConfig config, std::string loaded_signature)
    : engine_(engine),
      serving_(serving),
      eos_ids_(std::move(eos_ids)),
      metrics_(metrics),
      config_(std::move(config)),
      detector_(source(), std::move(loaded_signature), kind()) {}

const std::string& ModelReloader::source() const {
  return config_.checkpoint_dir.empty() ? config_.model_dir : config_.checkpoint_dir;
}

WatchedKind ModelReloader::kind() const {
  return config_.checkpoint_dir.empty() ? WatchedKind::kModelDir : WatchedKind::kCheckpointDir;
}

ModelReloader::~ModelReloader() { stop_watching(); }

ReloadOutcome ModelReloader::reload(const std::string& trigger) {
  std::lock_guard<std::mutex> lock(reload_mu_);
  return reload_locked(trigger);
}

ReloadOutcome ModelReloader::reload_locked(const std::string& trigger) {
  const std::string& dir = source();
  Timer timer;
  ReloadOutcome out;
  ModelDirState before = inspect_watched(dir, kind());
  try {
    if (!before.complete) throw Error("it does not hold a complete model: " + before.problem);
    out.version = run_on_transient_thread([&] {
      ModelBundle b;
      if (kind() == WatchedKind::kCheckpointDir) {
        DL_CHECK(config_.load_checkpoint != nullptr, "no checkpoint loader");
        b.weights = ModelWeights::of(config_.load_checkpoint(dir));  // the serving tokenizer and stop ids go on
        b.weights->check_finite(dir);
        if (b.weights->config().vocab_size < serving_.vocab_size())
          throw Refused(strprintf("its vocabulary has %d tokens but the serving tokenizer has %d",
                                  b.weights->config().vocab_size, serving_.vocab_size()),
                        "incompatible_vocabulary");
        b.eos_ids = eos_ids_;
      } else {
        b = load_model_bundle(dir, config_.tokenizer_path);
      }
      if (b.tokenizer) {
        if (std::string diff = tokenizer_difference(serving_, *b.tokenizer); !diff.empty())
          throw Refused(diff + "; a reload must keep the serving model's tokenizer", "incompatible_tokenizer");
      }
      if (b.eos_ids != eos_ids_)
        throw Refused("its end-of-sequence ids are " + ids_text(b.eos_ids) + " but the serving model's are " +
                          ids_text(eos_ids_) + "; a reload must keep them",
                      "incompatible_tokenizer");
      if (config_.draft_model && config_.draft_model->config().vocab_size != b.weights->config().vocab_size)
        throw Refused(strprintf("its vocabulary has %d tokens but the draft model's has %d",
                                b.weights->config().vocab_size, config_.draft_model->config().vocab_size),
                      "incompatible_vocabulary");
      auto runner = std::make_shared<InferenceRunner>(b.weights, config_.weight_dtype, config_.kv_cache_dtype);
      std::shared_ptr<ModelRunner> draft;
      if (config_.draft_model)
        draft = std::make_shared<InferenceRunner>(config_.draft_model, config_.weight_dtype, config_.kv_cache_dtype);
      // Whatever changed in the directory while it was read could be a mix of two
      // models: only a state that stayed the same throughout is installed.
      ModelDirState after = inspect_watched(dir, kind());
      if (after.signature != before.signature)
        throw Refused("the model directory changed while it was being loaded; load it again once it is complete",
                      "model_changed");
      LOG_INFO("serve: reload: loaded %s (%s) in %.2f s; building its KV cache", dir.c_str(),
               b.weights->config().describe().c_str(), timer.seconds());
      return engine_.install(runner, nullptr, draft);  // the runner keeps what it reads
    });
  } catch (const Refused& e) {
    out.status = 409;
    out.code = e.code();
    out.message = strprintf("reload of %s refused: %s", dir.c_str(), e.what());
  } catch (const std::exception& e) {
    out.status = 422;
    out.code = "model_not_loadable";
    out.message = strprintf("reload of %s failed: %s", dir.c_str(), e.what());
  }
  out.seconds = timer.seconds();
  if (out.status == 200) {
    metrics_.record_model_loaded(out.version, unix_now(), out.seconds, /*is_reload=*/true);
    detector_.set_loaded(before.signature);
    out.message = strprintf("reloaded %s in %.2f s: version %lld serves new requests", dir.c_str(), out.seconds,
                            static_cast<long long>(out.version));
    LOG_INFO("serve: %s (%s)", out.message.c_str(), trigger.c_str());
  } else {
    metrics_.count_reload_failure();
    out.version = engine_.version();
    // The same files are not tried again by the watcher, only a later change is
    // (unless the directory changed under the load: then that newer state is).
    if (out.code != "model_changed" && before.complete) detector_.set_loaded(before.signature);
    LOG_ERROR("serve: %s (%s); version %lld keeps serving", out.message.c_str(), trigger.c_str(),
              static_cast<long long>(out.version));
  }
  return out;
}

void ModelReloader::start_watching(double interval_seconds) {
  DL_CHECK(interval_seconds > 0, "--watch-interval must be positive, got %g", interval_seconds);
  DL_CHECK(!watcher_.joinable(), "already watching");
  stop_watch_ = false;
  watcher_ = std::thread([this, interval_seconds] { watch_loop(interval_seconds); });
  LOG_INFO("serve: watching %s for new models every %g s", source().c_str(), interval_seconds);
}

void ModelReloader::stop_watching() {
  {
    std::lock_guard<std::mutex> lock(watch_mu_);
    stop_watch_ = true;
  }
  watch_cv_.notify_all();
  if (watcher_.joinable()) watcher_.join();
}

void ModelReloader::watch_loop(double interval_seconds) {
  std::string last_problem;
  while (true) {
    {
      std::unique_lock<std::mutex> lock(watch_mu_);
      if (watch_cv_.wait_for(lock, std::chrono::duration<double>(interval_seconds), [&] { return stop_watch_; })) return;
    }
    try {
      std::lock_guard<std::mutex> lock(reload_mu_);
      bool changed = detector_.poll();
      if (!detector_.problem().empty() && detector_.problem() != last_problem)
        LOG_INFO("serve: watch: %s (waiting for a complete model)", detector_.problem().c_str());
      last_problem = detector_.problem();
      if (changed) reload_locked("a new model appeared in the watched directory");
    } catch (const std::exception& e) {
      LOG_ERROR("serve: watch: %s", e.what());  // never ends the server
    }
  }
}

}  // namespace distllm::serve
