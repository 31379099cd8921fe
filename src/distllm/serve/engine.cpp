#include "distllm/serve/engine.h"

#include "distllm/serve/structured/matcher.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <future>
#include <random>

#include "distllm/base/log.h"
#include "distllm/base/parallel.h"
#include "distllm/base/rng.h"
#include "distllm/base/timer.h"

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

struct Engine::RequestState {
  Sequence seq;
  GenerationRequest req;
  std::shared_ptr<OutputQueue> out;
  int index = 0;
  std::unique_ptr<Detokenizer> detok;
  double arrival = 0.0;
  double last_token = 0.0;
  bool scheduled = false;
  int cached_tokens = 0;
  std::vector<int32_t> min_tokens_suppressed;  // EOS (unless ignored) and stop ids
  // Structured output: the grammar's state and the allowed-token mask for the next
  // sample (one buffer per request: rows are sampled in parallel).
  std::unique_ptr<structured::GrammarMatcher> matcher;
  mutable std::vector<uint32_t> grammar_mask;  // filled while sampling (sample_chunk)

  // What the sampler sees of this sequence for its next token.
  SequenceContext sampling_context() const {
    SequenceContext c;
    const std::span<const int32_t> all(seq.tokens);
    c.prompt = all.first(static_cast<size_t>(seq.num_prompt_tokens));
    c.generated = all.subspan(static_cast<size_t>(seq.num_prompt_tokens));
    if (seq.num_generated() < req.min_tokens) c.suppressed = min_tokens_suppressed;
    if (matcher) c.allowed = grammar_mask;
    return c;
  }
};

Engine::Engine(ModelRunner& runner, const TextCodec& codec, EngineConfig config, ServeMetrics& metrics,
               ModelRunner* draft_runner)
    : runner_(runner),
      codec_(codec),
      config_(config),
      metrics_(metrics),
      kv_(kv_blocks_for(config, runner), config.block_size, config.enable_prefix_cache),
      scheduler_(config.scheduler, kv_),
      next_id_(config.first_request_id) {
  max_model_len_ = max_model_len_for(config, runner);
  DL_CHECK(config.max_queued_requests >= 1, "--max-queued-requests must be at least 1, got %d",
           config.max_queued_requests);
  config_.speculative.validate();
  DL_CHECK(codec.vocab_size() <= runner.vocab_size(),
           "tokenizer has %d tokens but the model's vocabulary has only %d", codec.vocab_size(), runner.vocab_size());
  if (config_.speculative.method == SpeculativeMethod::kDraft) {
    DL_CHECK(draft_runner != nullptr, "--speculative draft needs --draft-model DIR");
    DL_CHECK(draft_runner->vocab_size() == runner.vocab_size(),
             "--draft-model has a vocabulary of %d tokens but the model's has %d: the draft must use the same "
             "tokenizer and vocabulary",
             draft_runner->vocab_size(), runner.vocab_size());
  }
  runner_.allocate_kv(kv_.num_blocks(), config.block_size);
  if (config_.speculative.enabled()) {
    if (config_.speculative.method == SpeculativeMethod::kDraft) {
      proposer_ = std::make_unique<DraftModelProposer>(*draft_runner, kv_.num_blocks(), config.block_size);
    } else {
      proposer_ = std::make_unique<NgramProposer>(config_.speculative.ngram);
    }
  }
  publish_stats();
  LOG_INFO("engine: %d KV blocks of %d tokens (%d tokens, KV cache %s, %zu bytes per block), max model length %d, "
           "prefix cache %s",
           kv_.num_blocks(), config.block_size, kv_.num_blocks() * config.block_size,
           dtype_short_name(runner_.kv_geometry().dtype), runner_.kv_bytes_per_block(config.block_size), max_model_len_,
           config.enable_prefix_cache ? "on" : "off");
  if (config_.speculative.method == SpeculativeMethod::kNgram && config_.speculative.enabled()) {
    LOG_INFO("engine: speculative decoding: ngram, %d tokens, n-gram %d..%d", config_.speculative.num_speculative_tokens,
             config_.speculative.ngram.min_n, config_.speculative.ngram.max_n);
  } else if (config_.speculative.enabled()) {
    LOG_INFO("engine: speculative decoding: draft model, %d tokens, draft KV cache %zu bytes",
             config_.speculative.num_speculative_tokens,
             draft_runner->kv_bytes_per_block(config.block_size) * static_cast<size_t>(kv_.num_blocks()));
  }
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
  const int vocab = runner_.vocab_size();
  const int64_t cache_tokens = static_cast<int64_t>(kv_.num_blocks()) * config_.block_size;
  if (static_cast<int64_t>(requests.size()) > config_.max_queued_requests) {
    throw RequestError(400, strprintf("this request asks for %zu sequences but the server queues at most %d",
                                      requests.size(), config_.max_queued_requests));
  }
  for (const auto& r : requests) {
    if (r.prompt.empty()) throw RequestError(400, "the prompt is empty: it must have at least one token");
    for (int32_t t : r.prompt) {
      if (t < 0 || t >= vocab) throw RequestError(400, strprintf("prompt token id %d is outside the vocabulary [0, %d)", t, vocab));
    }
    if (r.max_tokens < 1) throw RequestError(400, strprintf("max_tokens must be at least 1, got %d", r.max_tokens));
    int64_t prompt = static_cast<int64_t>(r.prompt.size());
    int64_t total = prompt + r.max_tokens;
    if (total > max_model_len_) {
      throw RequestError(400, strprintf("This model's maximum context length is %d tokens. However, you requested %lld "
                                        "tokens (%lld in the prompt, %d for the completion). Please reduce the length "
                                        "of the prompt or the completion.",
                                        max_model_len_, static_cast<long long>(total), static_cast<long long>(prompt),
                                        r.max_tokens));
    }
    if (total > cache_tokens) {
      throw RequestError(400, strprintf("The KV cache holds %lld tokens (%d blocks of %d) but this request needs up to "
                                        "%lld (%lld in the prompt, %d for the completion). Please reduce the length "
                                        "of the prompt or the completion, or start the server with more "
                                        "--kv-cache-memory.",
                                        static_cast<long long>(cache_tokens), kv_.num_blocks(), config_.block_size,
                                        static_cast<long long>(total), static_cast<long long>(prompt), r.max_tokens));
    }
    for (int32_t t : r.stop_token_ids) {
      if (t < 0 || t >= vocab) throw RequestError(400, strprintf("stop token id %d is outside the vocabulary [0, %d)", t, vocab));
    }
    for (const auto& s : r.stop) {
      if (s.empty()) throw RequestError(400, "stop strings must not be empty");
    }
    for (const auto& [t, bias] : r.sampling.logit_bias) {
      if (t < 0 || t >= vocab) throw RequestError(400, strprintf("logit_bias token id %d is outside the vocabulary [0, %d)", t, vocab));
      if (!std::isfinite(bias)) throw RequestError(400, strprintf("logit_bias for token %d is not a finite number", t));
    }
    if (r.min_tokens < 0 || r.min_tokens > r.max_tokens) {
      throw RequestError(400, strprintf("min_tokens must be between 0 and max_tokens (%d), got %d", r.max_tokens, r.min_tokens));
    }
  }

  const double now = now_seconds();
  std::vector<std::unique_ptr<RequestState>> states;
  std::vector<uint64_t> ids;
  for (size_t i = 0; i < requests.size(); ++i) {
    auto st = std::make_unique<RequestState>();
    st->seq.id = next_id_.fetch_add(1);
    st->seq.num_prompt_tokens = static_cast<int>(requests[i].prompt.size());
    st->seq.tokens = requests[i].prompt;
    st->req = std::move(requests[i]);
    st->req.sampling.seed = st->req.seed ? *st->req.seed : entropy_seed();
    st->out = out;
    st->index = static_cast<int>(i);
    st->detok = std::make_unique<Detokenizer>(codec_.stream_decoder(), st->req.stop,
                                              st->req.include_stop_str_in_output);
    if (st->req.min_tokens > 0) {
      st->detok->set_stops_armed(false);
      if (!st->req.ignore_eos && codec_.eos_token_id() >= 0) st->min_tokens_suppressed.push_back(codec_.eos_token_id());
      for (int32_t t : st->req.stop_token_ids) st->min_tokens_suppressed.push_back(t);
    }
    if (st->req.grammar) {
      st->matcher = std::make_unique<structured::GrammarMatcher>(st->req.grammar);
      size_t words = (static_cast<size_t>(runner_.vocab_size()) + 31) / 32;
      st->grammar_mask.assign(std::max(words, st->req.grammar->mask_words()), 0);
    }
    st->arrival = now;
    ids.push_back(st->seq.id);
    states.push_back(std::move(st));
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

std::vector<std::string> Engine::export_cached_prefix(std::vector<int32_t> tokens, int max_blocks,
                                                      double timeout_seconds) {
  auto toks = std::make_shared<std::vector<int32_t>>(std::move(tokens));
  auto out = std::make_shared<std::vector<std::string>>();
  run_on_loop(
      [this, toks, out, max_blocks] {
        std::vector<int32_t> blocks = kv_.cached_prefix_blocks(*toks);
        if (blocks.size() > static_cast<size_t>(std::max(0, max_blocks))) blocks.resize(static_cast<size_t>(std::max(0, max_blocks)));
        const size_t bytes = runner_.kv_bytes_per_block(config_.block_size);
        for (int32_t b : blocks) {
          std::string data(bytes, '\0');
          runner_.read_kv_block(b, data.data());
          out->push_back(std::move(data));
        }
      },
      timeout_seconds);
  return std::move(*out);
}

int Engine::import_prefix(std::vector<int32_t> tokens, std::vector<std::string> blocks, double timeout_seconds) {
  auto toks = std::make_shared<std::vector<int32_t>>(std::move(tokens));
  auto data = std::make_shared<std::vector<std::string>>(std::move(blocks));
  auto cached = std::make_shared<int>(0);
  run_on_loop(
      [this, toks, data, cached] {
        const size_t bytes = runner_.kv_bytes_per_block(config_.block_size);
        for (const std::string& b : *data)
          DL_CHECK(b.size() == bytes, "KV block of %zu bytes, this model's take %zu", b.size(), bytes);
        *cached = kv_.import_prefix(*toks, static_cast<int>(data->size()), [&](int i, int32_t block) {
          runner_.write_kv_block(block, (*data)[static_cast<size_t>(i)].data());
        });
        if (config_.check_invariants) kv_.check_invariants();
      },
      timeout_seconds);
  return *cached;
}

void Engine::take_in() {
  std::vector<std::unique_ptr<RequestState>> incoming;
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
    RequestState* raw = st.get();
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

void Engine::finish(RequestState& st, FinishReason reason, const std::string& error, OutputDelta* last) {
  scheduler_.finish(&st.seq);  // frees the KV blocks
  if (proposer_) proposer_->release(st.seq.id);
  const double now = now_seconds();
  OutputDelta d;
  if (last) d = std::move(*last);  // the final token and the finish travel together
  d.index = st.index;
  d.finish = reason;
  d.error = error;
  d.prompt_tokens = st.seq.num_prompt_tokens;
  d.completion_tokens = static_cast<int>(st.seq.num_generated());
  d.cached_tokens = st.cached_tokens;
  switch (reason) {
    case FinishReason::kStop:
    case FinishReason::kLength:
      metrics_.observe_e2e(now - st.arrival);
      metrics_.count_finished(reason == FinishReason::kStop ? ServeMetrics::Finish::kStop : ServeMetrics::Finish::kLength);
      break;
    case FinishReason::kAbort: metrics_.count_finished(ServeMetrics::Finish::kAborted); break;
    case FinishReason::kError: metrics_.count_finished(ServeMetrics::Finish::kFailed); break;
    case FinishReason::kNone: DL_ASSERT(false);
  }
  {
    // Before the push: a client that resubmits the moment it hears back must find
    // this request's place free.
    std::lock_guard<std::mutex> lock(mu_);
    --admitted_;
  }
  st.out->push(std::move(d));
  requests_.erase(st.seq.id);  // destroys st
}

bool Engine::process_sample(RequestState& st, const SampleResult& sample, double now) {
  const int32_t token = sample.token;
  const int64_t generated_before = st.seq.num_generated();
  st.seq.tokens.push_back(token);
  metrics_.add_generation_tokens(1);
  if (generated_before == 0) {
    metrics_.observe_ttft(now - st.arrival);
    metrics_.add_prompt_tokens(st.seq.num_prompt_tokens);
  } else {
    metrics_.observe_itl(now - st.last_token);
  }
  st.last_token = now;

  OutputDelta d;
  d.index = st.index;
  d.token_ids.push_back(token);
  FinishReason reason = FinishReason::kNone;
  const auto& stop_ids = st.req.stop_token_ids;
  const bool is_eos = !st.req.ignore_eos && token == codec_.eos_token_id();
  const bool is_stop_id = std::find(stop_ids.begin(), stop_ids.end(), token) != stop_ids.end();
  // Structured output: the grammar follows every token; once only EOS could
  // follow, the output is complete.
  bool grammar_complete = false;
  if (st.matcher) {
    if (!st.matcher->accept_token(token)) {
      finish(st, FinishReason::kError, "internal error: a sampled token does not fit the request's grammar");
      return true;
    }
    grammar_complete = st.matcher->only_eos() || st.matcher->is_terminated();
  }
  // A stop token's text is not part of the output, except a stop_token_ids token
  // with include_stop_str_in_output (as vLLM does it; EOS never has text).
  if (is_eos || (is_stop_id && !st.req.include_stop_str_in_output)) {
    reason = FinishReason::kStop;
  } else {
    if (st.seq.num_generated() >= st.req.min_tokens) st.detok->set_stops_armed(true);
    Detokenizer::Output o = st.detok->push(token);
    d.text = std::move(o.text);
    if (sample.has_logprobs) d.logprobs.push_back(sample.logprobs);
    if (o.stopped || is_stop_id) reason = FinishReason::kStop;
  }
  if (reason == FinishReason::kNone && grammar_complete) reason = FinishReason::kStop;
  if (reason == FinishReason::kNone &&
      (st.seq.num_generated() >= st.req.max_tokens || static_cast<int64_t>(st.seq.tokens.size()) >= max_model_len_)) {
    reason = FinishReason::kLength;
  }
  if (reason != FinishReason::kNone) {
    Detokenizer::Output tail = st.detok->finish();  // text held back for a stop string that never came
    d.text += tail.text;
    if (tail.stopped) reason = FinishReason::kStop;
  }
  if (reason != FinishReason::kNone) {
    finish(st, reason, "", &d);
    return true;
  }
  st.out->push(std::move(d));
  return false;
}

void Engine::propose_drafts() {
  const SpeculativeConfig& spec = config_.speculative;
  const bool off = !spec.enabled() || (spec.disable_by_batch_size > 0 &&
                                       scheduler_.num_running() > static_cast<size_t>(spec.disable_by_batch_size));
  for (Sequence* seq : scheduler_.running()) {
    seq->draft.clear();
    if (off) continue;
    const int64_t len = static_cast<int64_t>(seq->tokens.size());
    if (len - seq->num_computed != 1) continue;  // still prefilling
    const RequestState& st = *requests_.at(seq->id);
    // A step emits up to k + 1 tokens: never draft past max_tokens or the context.
    int64_t k = spec.num_speculative_tokens;
    k = std::min<int64_t>(k, st.req.max_tokens - seq->num_generated() - 1);
    k = std::min<int64_t>(k, max_model_len_ - len - 1);
    if (k <= 0) continue;
    seq->draft = proposer_->propose(*seq, static_cast<int>(k));
  }
}

VerifyResult Engine::sample_chunk(const RequestState& st, const ScheduledChunk& c, const float* logits,
                                  SamplerScratch& scratch) const {
  const size_t vocab = static_cast<size_t>(runner_.vocab_size());
  const Sequence& seq = st.seq;
  const std::span<const int32_t> all(seq.tokens);
  const std::span<const int32_t> draft(seq.draft.data(), static_cast<size_t>(c.num_draft));
  std::vector<int32_t> history;  // generated tokens plus the drafts accepted so far
  // Structured output: row i's mask is the grammar's after draft[0, i). The matcher
  // follows the accepted drafts here and is rolled back afterwards: process_sample
  // accepts the emitted tokens for good.
  size_t grammar_steps = 0;
  struct Rollback {
    structured::GrammarMatcher* m;
    size_t& n;
    ~Rollback() {
      if (m && n) m->rollback(n);
    }
  } undo{st.matcher.get(), grammar_steps};
  return verify_draft(draft, [&](int i) {
    // Row i sees the sequence as it would be after the i accepted drafts: penalties
    // count them, min_tokens suppression depends on the count including them.
    SequenceContext ctx = st.sampling_context();
    if (st.matcher) {
      if (i > 0) {
        // verify_draft only asks for row i once row i - 1 sampled draft[i - 1],
        // which that row's mask allowed.
        DL_CHECK(st.matcher->accept_token(draft[static_cast<size_t>(i - 1)]),
                 "internal error: an accepted draft token does not fit the grammar");
        ++grammar_steps;
      }
      st.matcher->fill_next_token_bitmask(st.grammar_mask);
    }
    if (i > 0) {
      if (history.empty()) history.assign(all.begin() + seq.num_prompt_tokens, all.end());
      history.push_back(draft[static_cast<size_t>(i - 1)]);
      ctx.generated = history;
      ctx.suppressed = {};
      if (seq.num_generated() + i < st.req.min_tokens) ctx.suppressed = st.min_tokens_suppressed;
    }
    std::span<const float> row(logits + static_cast<size_t>(i) * vocab, vocab);
    return sample_token(row, st.req.sampling, static_cast<uint64_t>(seq.num_generated() + i), scratch, ctx);
  });
}

void Engine::step() {
  propose_drafts();
  SchedulerOutput out = scheduler_.schedule();
  if (out.empty()) return;
  if (proposer_) {
    bool drafts = false;
    for (const ScheduledChunk& c : out.chunks) drafts |= c.num_draft > 0;
    if (drafts) {
      try {
        proposer_->finalize(out.chunks, kv_);
      } catch (const std::exception& e) {
        // The drafts keep their placeholder tokens: verification rejects what does
        // not match, so the output is unchanged; only this step's speedup is lost.
        LOG_ERROR("engine: draft proposer failed: %s", e.what());
      }
    }
  }
  const double scheduled_at = now_seconds();
  for (Sequence* seq : out.admitted) {
    RequestState& st = *requests_.at(seq->id);
    if (!st.scheduled) {
      st.scheduled = true;
      metrics_.observe_queue_time(scheduled_at - st.arrival);
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
  std::vector<float> logits;
  try {
    runner_.execute(batch, logits);
  } catch (const std::exception& e) {
    LOG_ERROR("engine: model step failed (%zu sequences): %s", batch.size(), e.what());
    for (const ScheduledChunk& c : out.chunks) {
      auto it = requests_.find(c.seq->id);
      if (it != requests_.end()) finish(*it->second, FinishReason::kError, std::string("model error: ") + e.what());
    }
    return;
  }
  ++steps_;
  max_batch_ = std::max(max_batch_, static_cast<int>(batch.size()));
  scheduler_.on_step_done(out);
  const size_t vocab = static_cast<size_t>(runner_.vocab_size());
  size_t rows = 0;
  for (const ScheduledChunk& c : out.chunks) rows += static_cast<size_t>(c.num_logits);
  DL_CHECK(logits.size() == rows * vocab, "model runner returned %zu logits, expected %zu rows of %zu", logits.size(),
           rows, vocab);
  // Sample every sequence first, in parallel (a full-vocabulary softmax per row is a
  // visible share of a decode step at batch 16), then apply the results in batch
  // order on this thread. Each row's draw depends only on its own logits, seed and
  // step, so the split across threads changes nothing. A speculative chunk's rows
  // are verified in order within its sequence (speculative.h).
  std::vector<const ScheduledChunk*> sampled;
  std::vector<RequestState*> sampled_state;
  std::vector<size_t> first_row;
  sampled.reserve(out.chunks.size());
  for (size_t i = 0, row = 0; i < out.chunks.size(); ++i) {
    const ScheduledChunk& c = out.chunks[i];
    if (c.num_logits == 0) continue;
    sampled.push_back(&c);
    sampled_state.push_back(requests_.at(c.seq->id).get());
    first_row.push_back(row);
    row += static_cast<size_t>(c.num_logits);
  }
  const size_t n = sampled.size();
  std::vector<VerifyResult> results(n);
  std::vector<std::string> errors(n);
  if (scratch_.size() < static_cast<size_t>(num_threads())) scratch_.resize(static_cast<size_t>(num_threads()));
  parallel_chunks(0, static_cast<int64_t>(n), [&](int64_t lo, int64_t hi, int t) {
    for (int64_t r = lo; r < hi; ++r) {
      const size_t i = static_cast<size_t>(r);
      try {
        results[i] = sample_chunk(*sampled_state[i], *sampled[i], logits.data() + first_row[i] * vocab,
                                  scratch_[static_cast<size_t>(t)]);
      } catch (const std::exception& e) {
        errors[i] = std::string("sampling failed: ") + e.what();
      }
    }
  });
  const double now = now_seconds();
  for (size_t i = 0; i < n; ++i) {
    RequestState& st = *sampled_state[i];
    Sequence* seq = &st.seq;
    if (!errors[i].empty()) {
      finish(st, FinishReason::kError, errors[i]);
      continue;
    }
    const VerifyResult& v = results[i];
    metrics_.observe_speculation(sampled[i]->num_draft, v.num_accepted);
    bool finished = false;
    // Emit in order; a stop condition on any of them ends the request there, and
    // nothing after it is emitted.
    for (const SampleResult& sample : v.samples) {
      if ((finished = process_sample(st, sample, now))) break;
    }
    if (!finished && sampled[i]->num_draft > 0) {
      proposer_->on_verified(*seq, v.num_accepted);
      scheduler_.accept_draft(seq, v.num_accepted);
    }
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
    RequestState& st = *requests_.at(id);
    try {
      scheduler_.finish(&st.seq);
    } catch (const std::exception&) {
      // The KV bookkeeping may be what failed; the handler must still hear back.
    }
    OutputDelta d;
    d.index = st.index;
    d.finish = FinishReason::kError;
    d.error = "the engine stopped";
    st.out->push(std::move(d));
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
