#include "distllm/serve/engine.h"

#include <algorithm>
#include <chrono>
#include <future>
#include <random>

#include "distllm/base/log.h"
#include "distllm/base/strings.h"
#include "distllm/base/timer.h"
#include "distllm/serve/request_admission.h"

namespace distllm::serve {
namespace {

uint64_t entropy_seed() {
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ rd() ^ static_cast<uint64_t>(now_seconds() * 1e9);
}

}  // namespace

struct Engine::Task {
  std::function<void()> fn;
  std::promise<void> done;
};

Engine::Engine(ModelRunner& runner, const TextCodec& codec, EngineConfig config, ServeMetrics& metrics,
               ModelRunner* draft_runner)
    : runner_(runner),
      codec_(codec),
      config_(config),
      metrics_(metrics),
      kv_(kv_blocks_for(config, runner), config.block_size, config.enable_prefix_cache),
      max_model_len_(max_model_len_for(config, runner)),
      scheduler_(config.scheduler, kv_),
      spec_(config.speculative, max_model_len_, runner, draft_runner, kv_.num_blocks(), config.block_size),
      output_(codec, metrics, max_model_len_),
      next_id_(config.first_request_id) {
  DL_CHECK(config.max_queued_requests >= 1, "--max-queued-requests must be at least 1, got %d",
           config.max_queued_requests);
  DL_CHECK(codec.vocab_size() <= runner.vocab_size(),
           "tokenizer has %d tokens but the model's vocabulary has only %d", codec.vocab_size(), runner.vocab_size());
  runner_.allocate_kv(kv_.num_blocks(), config.block_size);
  // Blocks before every sequence's window are given back as it moves on, when every
  // layer is windowed. Not with a draft model: it reads the same block tables and
  // catches up from positions behind the target's, whose windows reach further back.
  const int window = draft_runner ? 0 : runner_.kv_geometry().sliding_window;
  kv_.set_sliding_window(window);
  publish_stats();
  LOG_INFO("engine: %d KV blocks of %d tokens (%d tokens, KV cache %s, %zu bytes per block), max model length %d, "
           "prefix cache %s%s",
           kv_.num_blocks(), config.block_size, kv_.num_blocks() * config.block_size,
           dtype_short_name(runner_.kv_geometry().dtype), runner_.kv_bytes_per_block(config.block_size), max_model_len_,
           config.enable_prefix_cache ? "on" : "off",
           window > 0 ? strprintf(", blocks before each sequence's %d-token window freed", window).c_str() : "");
  spec_.log_setup(kv_.num_blocks(), config.block_size);
}

Engine::~Engine() { stop(); }

void Engine::start() {
  std::lock_guard<std::mutex> lock(mu_);
  DL_CHECK(!thread_.joinable(), "engine already started");
  stop_ = false;
  alive_ = true;
  thread_ = std::thread([this] { loop(); });
}

void Engine::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

int Engine::max_completion_tokens(int prompt_len) const {
  int64_t by_context = static_cast<int64_t>(max_model_len_) - prompt_len;
  int64_t by_cache = static_cast<int64_t>(kv_.num_blocks()) * config_.block_size - prompt_len;
  return static_cast<int>(std::max<int64_t>(0, std::min(by_context, by_cache)));
}

std::vector<uint64_t> Engine::submit(std::vector<GenerationRequest> requests, std::shared_ptr<OutputQueue> out) {
  DL_ASSERT(out != nullptr);
  validate_requests(requests, AdmissionLimits{runner_.vocab_size(), max_model_len_, kv_.num_blocks(),
                                              config_.block_size, config_.max_queued_requests});
  const double now = now_seconds();
  std::vector<std::unique_ptr<EngineRequest>> states;
  std::vector<uint64_t> ids;
  for (size_t i = 0; i < requests.size(); ++i) {
    auto r = std::make_unique<EngineRequest>();
    r->seq.id = next_id_.fetch_add(1);
    r->seq.num_prompt_tokens = static_cast<int>(requests[i].prompt.size());
    r->seq.tokens = requests[i].prompt;
    r->req = std::move(requests[i]);
    r->req.sampling.seed = r->req.seed ? *r->req.seed : entropy_seed();
    r->out = out;
    r->index = static_cast<int>(i);
    output_.init_request(*r);
    if (r->req.grammar) {
      try {
        r->grammar = std::make_unique<RequestGrammar>(r->req.grammar, runner_.vocab_size());
      } catch (const structured::GrammarError& e) {
        throw RequestError(400, std::string("the request's grammar cannot be followed: ") + e.what());
      }
    }
    r->arrival = now;
    ids.push_back(r->seq.id);
    states.push_back(std::move(r));
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!alive_) throw RequestError(503, "the engine is not running");
    // The published stats lag the engine thread (requests it has just taken in are
    // in neither incoming_ nor stats_.waiting), so admission counts for itself.
    const int64_t capacity =
        static_cast<int64_t>(config_.scheduler.max_num_seqs) + config_.max_queued_requests;
    if (admitted_ + static_cast<int64_t>(states.size()) > capacity) {
      metrics_.count_rejected();
      throw RequestError(429, strprintf("The server is busy: %lld requests are running or waiting (limit %d running "
                                        "+ %d queued). Retry later.",
                                        static_cast<long long>(admitted_), config_.scheduler.max_num_seqs,
                                        config_.max_queued_requests));
    }
    admitted_ += static_cast<int64_t>(states.size());
    for (auto& st : states) incoming_.push_back(std::move(st));
    stats_.requests += static_cast<int64_t>(ids.size());
  }
  wake_.notify_all();
  return ids;
}

void Engine::abort(const std::vector<uint64_t>& ids) {
  if (ids.empty()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    aborts_.insert(aborts_.end(), ids.begin(), ids.end());
  }
  wake_.notify_all();
}

void Engine::abort_all(const std::string& reason) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    abort_all_reason_ = reason;
  }
  wake_.notify_all();
}

EngineStats Engine::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

bool Engine::wait_idle(double timeout_seconds) {
  std::unique_lock<std::mutex> lock(mu_);
  return idle_.wait_for(lock, std::chrono::duration<double>(timeout_seconds),
                        [&] { return stats_.requests == 0 || !alive_; });
}

void Engine::publish_stats() {
  EngineStats s;
  s.num_blocks = kv_.num_blocks();
  s.free_blocks = kv_.num_free_blocks();
  s.cached_blocks = kv_.num_cached_blocks();
  s.active_blocks = kv_.num_active_blocks();
  s.running = static_cast<int64_t>(scheduler_.num_running());
  s.waiting = static_cast<int64_t>(scheduler_.num_waiting());
  s.steps = steps_;
  s.preemptions = scheduler_.num_preemptions();
  s.max_batch_seqs = max_batch_;
  s.peak_running_plus_waiting = peak_in_scheduler_;
  const PrefixCacheStats& p = kv_.prefix_stats();
  metrics_.set_step_state(s.running, s.waiting, kv_.usage(), s.preemptions, p.query_tokens, p.hit_tokens,
                          p.query_requests, p.hit_requests, config_.metrics_source);
  bool idle;
  {
    std::lock_guard<std::mutex> lock(mu_);
    s.requests = static_cast<int64_t>(requests_.size() + incoming_.size());
    stats_ = s;
    idle = s.requests == 0;
  }
  if (idle) idle_.notify_all();
}

void Engine::run_on_loop(std::function<void()> fn, double timeout_seconds) {
  auto task = std::make_shared<Task>();
  task->fn = std::move(fn);
  std::future<void> done = task->done.get_future();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!alive_) throw RequestError(503, "the engine is not running");
    tasks_.push_back(task);
  }
  wake_.notify_all();
  if (done.wait_for(std::chrono::duration<double>(timeout_seconds)) != std::future_status::ready) {
    throw RequestError(503, strprintf("the engine did not answer within %g s", timeout_seconds));
  }
  try {
    done.get();
  } catch (const std::future_error&) {
    throw RequestError(503, "the engine stopped");
  }
}

void Engine::take_in() {
  std::vector<std::unique_ptr<EngineRequest>> incoming;
  std::vector<uint64_t> aborts;
  std::optional<std::string> abort_all_reason;
  std::vector<std::shared_ptr<Task>> tasks;
  {
    std::lock_guard<std::mutex> lock(mu_);
    incoming.swap(incoming_);
    aborts.swap(aborts_);
    abort_all_reason.swap(abort_all_reason_);
    tasks.swap(tasks_);
  }
  for (auto& task : tasks) {
    try {
      task->fn();
      task->done.set_value();
    } catch (...) {
      task->done.set_exception(std::current_exception());
    }
  }
  for (auto& st : incoming) {
    EngineRequest* raw = st.get();
    requests_.emplace(raw->seq.id, std::move(st));
    scheduler_.add(&raw->seq);
  }
  peak_in_scheduler_ = std::max(peak_in_scheduler_, static_cast<int64_t>(scheduler_.num_running() + scheduler_.num_waiting()));
  for (uint64_t id : aborts) {
    auto it = requests_.find(id);
    if (it != requests_.end()) finish(*it->second, FinishReason::kAbort);
  }
  if (abort_all_reason) {
    std::vector<uint64_t> all;
    for (auto& [id, st] : requests_) all.push_back(id);
    for (uint64_t id : all) finish(*requests_.at(id), FinishReason::kAbort, *abort_all_reason);
  }
}

void Engine::finish(EngineRequest& r, FinishReason reason, const std::string& error, OutputDelta* last) {
  scheduler_.finish(&r.seq);  // frees the KV blocks
  spec_.release(r.seq.id);
  OutputDelta d = output_.final_delta(r, reason, error, last, now_seconds());
  {
    // Before the push: a client that resubmits the moment it hears back must find
    // this request's place free.
    std::lock_guard<std::mutex> lock(mu_);
    --admitted_;
  }
  r.out->push(std::move(d));
  requests_.erase(r.seq.id);  // destroys r
}

void Engine::apply_samples(EngineRequest& r, const ScheduledChunk& c, const VerifyResult& v, double now) {
  metrics_.observe_speculation(c.num_draft, v.num_accepted);
  // Emit in order; a stop condition on any of them ends the request there, and
  // nothing after it is emitted. What fails while processing one request's token
  // (its grammar, its detokenizer) fails that request alone.
  for (const SampleResult& sample : v.samples) {
    OutputProcessor::TokenOutput o;
    try {
      o = output_.append_token(r, sample, now);
    } catch (const structured::GrammarError& e) {
      o.finish = FinishReason::kError;
      o.error = std::string("the request's grammar cannot be followed: ") + e.what();
    } catch (const std::exception& e) {
      o.finish = FinishReason::kError;
      o.error = std::string("output processing failed: ") + e.what();
    }
    if (o.finish != FinishReason::kNone) {
      finish(r, o.finish, o.error, &o.delta);
      return;
    }
    r.out->push(std::move(o.delta));
  }
  if (c.num_draft > 0) {
    spec_.on_verified(r.seq, v.num_accepted);
    scheduler_.accept_draft(&r.seq, v.num_accepted);
  }
}

void Engine::fail_batch(const SchedulerOutput& out, const std::string& error) {
  for (const ScheduledChunk& c : out.chunks) {
    auto it = requests_.find(c.seq->id);
    if (it != requests_.end()) finish(*it->second, FinishReason::kError, error);
  }
}

void Engine::step() {
  spec_.propose(scheduler_.running(), [this](uint64_t id) -> const EngineRequest& { return *requests_.at(id); });
  SchedulerOutput out = scheduler_.schedule();
  if (out.empty()) return;
  spec_.finalize(out.chunks, kv_);
  const double scheduled_at = now_seconds();
  for (Sequence* seq : out.admitted) {
    EngineRequest& r = *requests_.at(seq->id);
    if (!r.scheduled) {
      r.scheduled = true;
      metrics_.observe_queue_time(scheduled_at - r.arrival);
    }
  }
  std::vector<SequenceChunk> batch;
  batch.reserve(out.chunks.size());
  for (const ScheduledChunk& c : out.chunks) {
    SequenceChunk sc;
    sc.request_id = c.seq->id;
    const int64_t own = c.num_tokens - c.num_draft;  // the sequence's tokens, then its draft
    sc.tokens.assign(c.seq->tokens.begin() + c.start, c.seq->tokens.begin() + c.start + own);
    sc.tokens.insert(sc.tokens.end(), c.seq->draft.begin(), c.seq->draft.begin() + c.num_draft);
    sc.start_pos = static_cast<int32_t>(c.start);
    sc.block_table = kv_.block_table(c.seq->id);
    sc.num_logits = c.num_logits;
    if (c.cached_tokens > 0 && c.seq->num_preemptions == 0) requests_.at(c.seq->id)->cached_tokens = static_cast<int>(c.cached_tokens);
    batch.push_back(std::move(sc));
  }
  // A runner failure fails the batch's requests; the engine goes on with the rest.
  std::vector<float> logits;
  try {
    runner_.execute(batch, logits);
  } catch (const std::exception& e) {
    LOG_ERROR("engine: model step failed (%zu sequences): %s", batch.size(), e.what());
    fail_batch(out, std::string("model error: ") + e.what());
    return;
  }
  const size_t vocab = static_cast<size_t>(runner_.vocab_size());
  size_t rows = 0;
  for (const ScheduledChunk& c : out.chunks) rows += static_cast<size_t>(c.num_logits);
  if (logits.size() != rows * vocab) {
    const std::string error = strprintf("model error: the runner returned %zu logits, expected %zu rows of %zu",
                                        logits.size(), rows, vocab);
    LOG_ERROR("engine: %s", error.c_str());
    fail_batch(out, error);
    return;
  }
  ++steps_;
  max_batch_ = std::max(max_batch_, static_cast<int>(batch.size()));
  scheduler_.on_step_done(out);
  // Sample every sequence first, in parallel, then apply the results in batch
  // order on this thread.
  std::vector<SpeculativeDecoder::ChunkSamples> samples =
      spec_.sample(out.chunks, [this](uint64_t id) -> EngineRequest& { return *requests_.at(id); }, logits, vocab);
  const double now = now_seconds();
  for (SpeculativeDecoder::ChunkSamples& s : samples) {
    if (!s.error.empty()) {
      finish(*s.request, FinishReason::kError, s.error);
      continue;
    }
    apply_samples(*s.request, *s.chunk, s.result, now);
  }
  if (config_.check_invariants) kv_.check_invariants();
}

void Engine::loop() {
  try {
    while (true) {
      {
        std::unique_lock<std::mutex> lock(mu_);
        if (!stop_ && incoming_.empty() && aborts_.empty() && !abort_all_reason_ && tasks_.empty() &&
            !scheduler_.has_work()) {
          wake_.wait_for(lock, std::chrono::milliseconds(100));
        }
        if (stop_) break;
      }
      take_in();
      step();
      publish_stats();
    }
  } catch (const std::exception& e) {
    LOG_ERROR("engine: loop stopped by an internal error: %s", e.what());
  }
  // Whatever is left ends with an error so no handler waits forever.
  alive_ = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& st : incoming_) requests_.emplace(st->seq.id, std::move(st));
    incoming_.clear();
    tasks_.clear();  // their waiters hear "the engine stopped"
  }
  std::vector<uint64_t> ids;
  for (auto& [id, st] : requests_) ids.push_back(id);
  for (uint64_t id : ids) {
    EngineRequest& r = *requests_.at(id);
    try {
      scheduler_.finish(&r.seq);
    } catch (const std::exception&) {
      // The KV bookkeeping may be what failed; the handler must still hear back.
    }
    OutputDelta d;
    d.index = r.index;
    d.finish = FinishReason::kError;
    d.error = "the engine stopped";
    r.out->push(std::move(d));
    requests_.erase(id);
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.requests = 0;
    admitted_ = 0;
  }
  idle_.notify_all();
}

}  // namespace distllm::serve
