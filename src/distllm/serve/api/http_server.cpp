#include "distllm/serve/api/http_server.h"

#include "distllm/serve/api/kv_transfer_http.h"

#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>

#include "distllm/base/log.h"
#include "distllm/base/timer.h"
#include "distllm/http/edge.h"
#include "distllm/http/openai_error.h"
#include "distllm/http/peer_socket.h"
#include "distllm/serve/api/chat_output.h"
#include "distllm/serve/api/openai_protocol.h"
#include "distllm/serve/structured/structured.h"

namespace distllm::serve::api {
namespace {

constexpr double kPollSeconds = 0.05;  // how often a waiting handler checks its client
// After the drain, how long handlers get to write their final events.
constexpr double kFinalWriteSeconds = 5.0;

using http::HttpEdge;
using http::peer_closed;

std::string dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

void send_error(httplib::Response& res, int status, const std::string& message, const std::string& param = "",
                const std::string& code = "") {
  http::send_openai_error(res, status, message, param, code);
}

http::FrontLimits front_limits(const ApiServerConfig& c, int workers) {
  http::FrontLimits limits;
  limits.max_body_bytes = c.max_body_bytes;
  limits.header_timeout_s = c.header_timeout_s;
  limits.body_timeout_s = c.body_timeout_s;
  limits.keep_alive_timeout_s = c.keep_alive_timeout_s;
  limits.max_connections = c.max_connections;
  limits.max_connections_per_ip = c.max_connections_per_ip;
  limits.workers = workers;
  return limits;
}

// One API request's generation: its engine requests (one per choice) and what
// they have produced so far.
struct Generation {
  // One log line when the request's last reference goes (answered, streamed to the
  // end, or cut off by its client).
  ~Generation() {
    if (log && !ids.empty()) log_done();
  }

  EngineClient* engine = nullptr;
  bool log = false;
  double started = 0;
  std::string fingerprint;  // which model version answers (hot reloads change it)
  std::shared_ptr<OutputQueue> queue = std::make_shared<OutputQueue>();
  std::vector<uint64_t> ids;
  bool chat = false;
  std::string id;
  int64_t created = 0;
  std::string model;
  bool stream = false;
  bool include_usage = false;
  bool want_logprobs = false;
  std::vector<int64_t> prompt_lens;  // per prompt
  int n = 1;                         // choices per prompt
  std::function<std::string(int32_t)> token_bytes;
  int socket_fd = -1;
  // Chat: each choice's text becomes reasoning, content and tool calls
  // (chat_output.h), as it streams or at its end.
  ToolUse tools;
  ReasoningFormat reasoning = ReasoningFormat::kNone;
  std::vector<std::unique_ptr<ChatChoiceOutput>> outputs;

  // Per choice.
  std::vector<ChoiceResult> choices;
  std::vector<int64_t> completion_tokens, cached_tokens, text_bytes;
  std::vector<std::string> errors;
  size_t finished = 0;
  bool done = false;  // everything sent (streaming) / collected

  size_t num_choices() const { return choices.size(); }

  void abort() {
    if (!done) engine->abort(ids);
  }

  Usage usage() const {
    Usage u;
    for (int64_t p : prompt_lens) u.prompt_tokens += p;
    for (size_t i = 0; i < num_choices(); ++i) {
      u.completion_tokens += completion_tokens[i];
      if (i % static_cast<size_t>(n) == 0) u.cached_tokens += cached_tokens[i];
    }
    return u;
  }

  // Records a delta's bookkeeping (not its text: callers decide where text goes).
  void note(const OutputDelta& d) {
    size_t i = static_cast<size_t>(d.index);
    text_bytes[i] += static_cast<int64_t>(d.text.size());
    if (d.finish != FinishReason::kNone) {
      choices[i].finish = d.finish;
      completion_tokens[i] = d.completion_tokens;
      cached_tokens[i] = d.cached_tokens;
      if (d.finish == FinishReason::kError || d.finish == FinishReason::kAbort) {
        errors[i] = d.error.empty() ? "the request was cancelled" : d.error;
      }
      ++finished;
    }
  }

  void start_outputs() {
    for (size_t i = 0; i < num_choices(); ++i) outputs.push_back(std::make_unique<ChatChoiceOutput>(reasoning, tools));
  }

  // "stop" and "length" as OpenAI; "abort" (vLLM's word) and "error" for requests
  // the server ended: shutdown, or a model failure. With tools, OpenAI's
  // "tool_calls" when the model chose to call (auto, required); a named function
  // forced by the request ends with "stop".
  const char* finish(size_t i) const {
    const FinishReason r = choices[i].finish;
    if (chat && r == FinishReason::kStop && !outputs[i]->calls().empty() && tools.mode != ToolChoiceMode::kNamed)
      return "tool_calls";
    return finish_reason_name(r == FinishReason::kNone ? FinishReason::kStop : r);
  }

  Json chunk_base() const {
    Json c{{"id", id}, {"object", chat ? "chat.completion.chunk" : "text_completion"}, {"created", created}, {"model", model}};
    if (!fingerprint.empty()) c["system_fingerprint"] = fingerprint;
    return c;
  }

  void log_done() const {
    std::string finishes;
    for (size_t i = 0; i < num_choices(); ++i) {
      const FinishReason r = choices[i].finish;
      finishes += std::string(i ? "," : "") + (r == FinishReason::kNone ? "unfinished (client gone)"
                                                                        : finish_reason_name(r));
    }
    const Usage u = usage();
    LOG_INFO("serve: request %s (%s%s): %s; prompt %lld tokens (%lld cached), completion %lld, %.3f s%s%s",
             id.c_str(), chat ? "chat" : "completion", stream ? ", stream" : "", finishes.c_str(),
             (long long)u.prompt_tokens, (long long)u.cached_tokens, (long long)u.completion_tokens,
             now_seconds() - started, fingerprint.empty() ? "" : ", ", fingerprint.c_str());
  }
};

class Server {
 public:
  Server(EngineClient& engine, const ChatFormatter& chat, ServeMetrics& metrics, ApiServerConfig config)
      : engine_(engine), chat_(chat), metrics_(metrics), config_(std::move(config)), started_(unix_time()),
        edge_(front_limits(config_, config_.http_threads > 0 ? config_.http_threads : engine.max_in_flight() + 16),
              config_.api_key),
        svr_(edge_.routes()) {
    // The API key is checked by the edge on every head, before its body is read.
    svr_.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
      if (draining_ && req.path != "/metrics") {
        send_error(res, 503, "The server is shutting down.", "", "server_shutting_down");
        return httplib::Server::HandlerResponse::Handled;
      }
      return httplib::Server::HandlerResponse::Unhandled;
    });

    svr_.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
      if (draining_) {
        send_error(res, 503, "The server is shutting down.", "", "server_shutting_down");
      } else if (engine_.alive()) {
        res.status = 200;
        res.set_content("", "text/plain");
      } else {
        send_error(res, 503, "the engine loop is not running");
      }
    });
    svr_.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      std::string text = metrics_.render();
      if (config_.kv_transfer) text += config_.kv_transfer->render_metrics(config_.model_name);
      res.set_content(text, "text/plain; version=0.0.4; charset=utf-8");
    });
    if (config_.kv_transfer && config_.kv_transfer->role() == ServeRole::kPrefill) {
      svr_.Post(kPrefillPath, [this](const httplib::Request& req, httplib::Response& res) {
        config_.kv_transfer->handle_prefill(req, res);
      });
    }
    svr_.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
      Json model = {{"id", config_.model_name},
                    {"object", "model"},
                    {"created", started_},
                    {"owned_by", "distllm"},
                    {"max_model_len", engine_.max_model_len()}};
      res.set_content(dump(Json{{"object", "list"}, {"data", Json::array({model})}}), "application/json");
    });
    if (config_.reload) {
      svr_.Post("/admin/reload", [this](const httplib::Request&, httplib::Response& res) {
        ReloadOutcome r = config_.reload();
        if (r.status != 200) {
          send_error(res, r.status, r.message, "", r.code);
          return;
        }
        Json body = {{"status", "reloaded"}, {"version", r.version}, {"seconds", r.seconds}, {"message", r.message}};
        res.set_content(dump(body), "application/json");
      });
    }
    svr_.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) { generate(req, res, false); });
    svr_.Post("/v1/chat/completions",
              [this](const httplib::Request& req, httplib::Response& res) { generate(req, res, true); });
  }

  int bind() {
    port_ = edge_.bind(config_.host, config_.port);
    return port_;
  }
  void serve() { edge_.run(); }
  void stop() { edge_.stop(); }
  int port() const { return port_; }
  int open_connections() const { return edge_.open_connections(); }

  bool shutdown_gracefully(double drain_timeout_s) {
    draining_ = true;
    edge_.set_draining();
    static const char kEnded[] = "The server is shutting down: the request was ended after the drain timeout.";
    bool drained = engine_.wait_idle(drain_timeout_s);
    if (!drained) {
      LOG_WARN("serve: drain timeout (%g s) passed; ending the requests still running", drain_timeout_s);
      engine_.abort_all(kEnded);
    }
    // Handlers now send their final events (or finish their last bytes).
    Timer t;
    while (edge_.busy_requests() > 0 && t.seconds() < kFinalWriteSeconds) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      // A request that slipped in as draining began is ended too.
      if (!drained && t.seconds() > 0.5 && engine_.stats().requests > 0) engine_.abort_all(kEnded);
    }
    stop();
    return drained;
  }

 private:
  void generate(const httplib::Request& req, httplib::Response& res, bool chat) {
    auto gen = std::make_shared<Generation>();
    if (std::string id = client_request_id(req.get_header_value("X-Request-Id")); !id.empty()) res.set_header("X-Request-Id", id);
    gen->started = now_seconds();
    try {
      prepare(req, *gen, chat);
    } catch (const ApiError& e) {
      send_error(res, e.status(), e.what(), e.param(), e.code());
      if (e.status() == 429) res.set_header("Retry-After", "1");
      if (config_.log_requests)
        LOG_INFO("serve: %s request refused with %d: %s", chat ? "chat" : "completion", e.status(), e.what());
      return;
    }
    gen->log = config_.log_requests;
    if (gen->stream) {
      res.set_header("Cache-Control", "no-cache");
      res.set_chunked_content_provider(
          "text/event-stream",
          [gen, first = true](size_t, httplib::DataSink& sink) mutable {
            bool ok = stream_step(*gen, sink, first);
            first = false;
            return ok;
          },
          [gen](bool) { gen->abort(); });  // no-op once everything was sent
      return;
    }
    wait_and_respond(*gen, res);
  }

  void check_model(const std::string& model) const {
    if (!model.empty() && model != config_.model_name) {
      throw ApiError(404, "The model `" + model + "` does not exist. This server serves `" + config_.model_name + "`.",
                     "model", "model_not_found");
    }
  }

  // The grammar compiler for this server's vocabulary, built on first use. Special
  // tokens (EOS and the model's stop tokens) get no bytes: a grammar never allows
  // them as text, and EOS only where the grammar may end.
  structured::GrammarCompiler& grammar_compiler() {
    std::call_once(compiler_once_, [&] {
      const TextCodec& codec = engine_.codec();
      std::vector<std::string> bytes(static_cast<size_t>(codec.vocab_size()));
      for (int32_t i = 0; i < codec.vocab_size(); ++i) bytes[static_cast<size_t>(i)] = codec.token_bytes(i);
      for (int32_t id : config_.default_stop_token_ids)
        if (id >= 0 && id < codec.vocab_size()) bytes[static_cast<size_t>(id)].clear();
      int32_t eos = codec.eos_token_id();
      if (eos < 0 || eos >= codec.vocab_size()) {
        // No EOS: a grammar then ends a request when only EOS could follow.
        bytes.emplace_back();
        eos = static_cast<int32_t>(bytes.size() - 1);
      }
      compiler_ = std::make_unique<structured::GrammarCompiler>(std::move(bytes), eos);
    });
    return *compiler_;
  }

  // Compiles the request's structured-output constraint (cached by text) and hands
  // it to every choice; a grammar that does not compile is a 400 naming the field.
  void attach_grammar(const SamplingFields& s, std::vector<GenerationRequest>& reqs) {
    if (!s.structured) return;
    std::shared_ptr<const structured::CompiledGrammar> g;
    try {
      structured::GrammarCompiler& compiler = grammar_compiler();
      size_t hits = compiler.cache_hits();
      g = compiler.compile(*s.structured);
      if (compiler.cache_hits() == hits)  // a new grammar (racy count: only for the log)
        LOG_INFO("structured output: compiled a %s grammar (%zu rules) in %.1f ms",
                 structured::grammar_kind_name(s.structured->kind), g->grammar().rules.size(), g->compile_seconds() * 1e3);
    } catch (const structured::GrammarError& e) {
      throw ApiError(400, std::string("invalid '") + s.structured_param + "': " + e.what(), s.structured_param);
    }
    for (auto& r : reqs) r.grammar = g;
  }

  void prepare(const httplib::Request& req, Generation& gen, bool chat) {
    Json body = parse_body(req.body);
    const TextCodec& codec = engine_.codec();
    gen.engine = &engine_;
    gen.chat = chat;
    gen.created = unix_time();
    gen.model = config_.model_name;
    const std::string client_id = client_request_id(req.get_header_value("X-Request-Id"));
    gen.id = client_id.empty() ? new_request_id(chat ? "chatcmpl-" : "cmpl-") : (chat ? "chatcmpl-" : "cmpl-") + client_id;
    gen.token_bytes = [&codec](int32_t id) { return codec.token_bytes(id); };
    std::vector<GenerationRequest> reqs;
    if (chat) {
      ChatRequest r = parse_chat_request(body);
      check_model(r.model);
      gen.tools = parse_tool_use(body, config_.tool_call_format);
      // A forced call (tool_choice "required" or a named function) holds the output
      // to its JSON schema, so the calls always parse.
      if (std::optional<Json> schema = tool_output_schema(gen.tools)) {
        if (r.sampling.structured)
          throw ApiError(400, "'" + r.sampling.structured_param + "' cannot be combined with a forced 'tool_choice'",
                         r.sampling.structured_param);
        r.sampling.structured = structured::GrammarSpec::json_schema(schema->dump());
        r.sampling.structured_param = "tool_choice";
      }
      // A grammar holds the whole output, so there is no thinking to find in it.
      if (!r.sampling.structured) gen.reasoning = config_.reasoning_format;
      std::string prompt;
      try {
        prompt = chat_.apply(r.messages, r.tools, r.render);
      } catch (const ChatTemplateMissing& e) {
        throw ApiError(400, e.what(), "messages", "chat_template_missing");
      } catch (const TemplateError& e) {
        throw ApiError(400, std::string("the chat template rejected these messages: ") + e.what(), "messages");
      }
      // The template wrote the BOS (if the model has one): nothing is added again.
      std::vector<int32_t> tokens = codec.encode(prompt);
      int len = static_cast<int>(tokens.size());
      int max_tokens = r.sampling.max_tokens ? static_cast<int>(*r.sampling.max_tokens)
                                             : std::max(1, engine_.max_completion_tokens(len));
      // The template's end-of-turn text is the chat format's EOS: ignore_eos skips it too.
      if (!r.sampling.ignore_eos)
        for (const auto& s : chat_.default_stop()) r.sampling.stop.push_back(s);
      reqs = make_generation_requests(r.sampling, tokens, max_tokens, r.logprobs ? r.top_logprobs : -1);
      attach_grammar(r.sampling, reqs);
      gen.prompt_lens.push_back(len);
      gen.n = r.sampling.n;
      gen.stream = r.stream;
      gen.include_usage = r.include_usage;
      gen.want_logprobs = r.logprobs;
    } else {
      CompletionRequest r = parse_completion_request(body);
      check_model(r.model);
      for (const PromptInput& p : r.prompts) {
        // A text prompt gets what the tokenizer adds around a text (BOS for Llama);
        // token ids are taken as they are.
        std::vector<int32_t> tokens = p.is_text ? codec.encode_prompt(p.text) : p.tokens;
        int max_tokens = r.sampling.max_tokens ? static_cast<int>(*r.sampling.max_tokens) : 16;  // OpenAI's default
        auto more = make_generation_requests(r.sampling, tokens, max_tokens, r.logprobs);
        attach_grammar(r.sampling, more);
        for (auto& g : more) reqs.push_back(std::move(g));
        gen.prompt_lens.push_back(static_cast<int64_t>(tokens.size()));
      }
      gen.n = r.sampling.n;
      gen.stream = r.stream;
      gen.include_usage = r.include_usage;
      gen.want_logprobs = r.logprobs >= 0;
    }
    // The model's EOS ids (generation_config.json) stop a request unless it asked to
    // run past EOS: with ignore_eos only the request's own stop_token_ids count, so it
    // generates exactly max_tokens (what benchmarks rely on).
    for (auto& g : reqs) {
      if (g.ignore_eos) continue;
      g.stop_token_ids.insert(g.stop_token_ids.end(), config_.default_stop_token_ids.begin(),
                              config_.default_stop_token_ids.end());
    }
    size_t n = reqs.size();
    gen.choices.resize(n);
    gen.completion_tokens.assign(n, 0);
    gen.cached_tokens.assign(n, 0);
    gen.text_bytes.assign(n, 0);
    gen.errors.assign(n, "");
    if (chat) gen.start_outputs();
    gen.socket_fd = http::HttpFront::current_socket();
    pull_prefill_kv(req, reqs);
    try {
      gen.ids = engine_.submit(std::move(reqs), gen.queue);
      if (!gen.ids.empty()) gen.fingerprint = engine_.fingerprint(gen.ids.front());
    } catch (const RequestError& e) {
      const char* code = e.status() == 429 ? "rate_limit_exceeded" : e.status() == 503 ? "engine_unavailable" : "invalid_request_error";
      throw ApiError(e.status(), e.what(), "", code);
    }
  }

  // Decode role: the prompts' KV comes from the prefill replica the router named
  // (a failure there only means the prompt is computed here).
  void pull_prefill_kv(const httplib::Request& req, const std::vector<GenerationRequest>& reqs) {
    if (!config_.kv_transfer || config_.kv_transfer->role() != ServeRole::kDecode) return;
    const std::string from = req.get_header_value(kPrefillFromHeader);
    if (from.empty()) return;
    for (size_t i = 0; i < reqs.size(); ++i) {
      if (i > 0 && reqs[i].prompt == reqs[i - 1].prompt) continue;  // the n choices of one prompt
      config_.kv_transfer->pull(from, reqs[i].prompt);
    }
  }

  void wait_and_respond(Generation& gen, httplib::Response& res) {
    std::vector<OutputDelta> deltas;
    Timer since_check;
    while (gen.finished < gen.num_choices()) {
      deltas.clear();
      bool got = gen.queue->pop_all(deltas, kPollSeconds);
      for (OutputDelta& d : deltas) {
        ChoiceResult& c = gen.choices[static_cast<size_t>(d.index)];
        c.text += d.text;
        c.logprobs.insert(c.logprobs.end(), d.logprobs.begin(), d.logprobs.end());
        gen.note(d);
      }
      if (gen.finished < gen.num_choices() && (!got || since_check.seconds() > kPollSeconds)) {
        since_check.reset();
        if (peer_closed(gen.socket_fd)) {
          gen.abort();  // nobody to answer; the engine frees the blocks next step
          gen.done = true;
          res.status = 499;
          return;
        }
      }
    }
    gen.done = true;
    for (size_t i = 0; i < gen.num_choices(); ++i) {
      if (gen.errors[i].empty()) continue;
      if (gen.choices[i].finish == FinishReason::kAbort) send_error(res, 503, gen.errors[i], "", "server_shutting_down");
      else send_error(res, 500, gen.errors[i], "", "generation_failed");
      return;
    }
    Json choices = Json::array();
    for (size_t i = 0; i < gen.num_choices(); ++i) {
      const ChoiceResult& c = gen.choices[i];
      Json choice = {{"index", i}};
      if (gen.chat) {
        ChatChoiceOutput& out = *gen.outputs[i];
        out.feed(c.text);
        out.finish();
        choice["message"] = out.message();
        choice["logprobs"] = gen.want_logprobs ? chat_logprobs(c.logprobs, gen.token_bytes) : Json();
      } else {
        choice["text"] = c.text;
        choice["logprobs"] = gen.want_logprobs ? completion_logprobs(c.logprobs, gen.token_bytes, 0) : Json();
      }
      choice["finish_reason"] = gen.finish(i);
      choices.push_back(std::move(choice));
    }
    Json out = {{"id", gen.id},
                {"object", gen.chat ? "chat.completion" : "text_completion"},
                {"created", gen.created},
                {"model", gen.model},
                {"choices", choices},
                {"usage", usage_json(gen.usage())}};
    if (!gen.fingerprint.empty()) out["system_fingerprint"] = gen.fingerprint;
    res.set_content(dump(out), "application/json");
  }

  // One call of the SSE content provider: waits briefly for output and sends it.
  // Returns false to drop the connection (the releaser then aborts the requests).
  static bool stream_step(Generation& gen, httplib::DataSink& sink, bool first) {
    auto send = [&](const Json& j) {
      std::string s = "data: " + dump(j) + "\n\n";
      return sink.write(s.data(), s.size());
    };
    auto with_usage_null = [&](Json chunk) {
      if (gen.include_usage) chunk["usage"] = nullptr;
      return chunk;
    };
    if (first && gen.chat) {
      for (size_t i = 0; i < gen.num_choices(); ++i) {
        Json chunk = gen.chunk_base();
        chunk["choices"] = Json::array({{{"index", i},
                                         {"delta", {{"role", "assistant"}, {"content", ""}}},
                                         {"logprobs", nullptr},
                                         {"finish_reason", nullptr}}});
        if (!send(with_usage_null(chunk))) return false;
      }
    }
    std::vector<OutputDelta> deltas;
    if (!gen.queue->pop_all(deltas, kPollSeconds)) return !peer_closed(gen.socket_fd);
    for (OutputDelta& d : deltas) {
      size_t i = static_cast<size_t>(d.index);
      int64_t offset = gen.text_bytes[i];
      gen.note(d);
      if (gen.chat) {
        // Reasoning and content as they are released (a possible tag start is held
        // back); at the choice's end the rest, then its tool calls, each a name
        // delta and an arguments delta as OpenAI streams them.
        ChatChoiceOutput& out = *gen.outputs[i];
        ReasoningSplit part = out.feed(d.text);
        if (d.finish != FinishReason::kNone) {
          ReasoningSplit rest = out.finish();
          part.reasoning += rest.reasoning;
          part.content += rest.content;
        }
        if (!part.reasoning.empty() || !part.content.empty() || !d.logprobs.empty()) {
          Json delta = Json::object();
          if (!part.reasoning.empty()) delta["reasoning_content"] = part.reasoning;
          if (!part.content.empty() || part.reasoning.empty()) delta["content"] = part.content;
          Json choice = {{"index", i},
                         {"delta", delta},
                         {"logprobs", gen.want_logprobs ? chat_logprobs(d.logprobs, gen.token_bytes) : Json()},
                         {"finish_reason", nullptr}};
          Json chunk = gen.chunk_base();
          chunk["choices"] = Json::array({choice});
          if (!send(with_usage_null(chunk))) return false;
        }
        for (const Json& calls : tool_call_stream_deltas(out.calls())) {
          Json choice = {{"index", i}, {"delta", {{"tool_calls", calls}}}, {"logprobs", nullptr}, {"finish_reason", nullptr}};
          Json chunk = gen.chunk_base();
          chunk["choices"] = Json::array({choice});
          if (!send(with_usage_null(chunk))) return false;
        }
      } else if (!d.text.empty() || !d.logprobs.empty()) {
        Json choice = {{"index", i}};
        choice["text"] = d.text;
        choice["logprobs"] = gen.want_logprobs ? completion_logprobs(d.logprobs, gen.token_bytes, offset) : Json();
        choice["finish_reason"] = nullptr;
        Json chunk = gen.chunk_base();
        chunk["choices"] = Json::array({choice});
        if (!send(with_usage_null(chunk))) return false;
      }
      if (d.finish != FinishReason::kNone) {
        // The choice's last chunk: an empty delta with its finish_reason.
        Json choice = {{"index", i}};
        if (gen.chat) choice["delta"] = Json::object();
        else choice["text"] = "";
        choice["logprobs"] = nullptr;
        choice["finish_reason"] = gen.finish(i);
        Json chunk = gen.chunk_base();
        chunk["choices"] = Json::array({choice});
        if (d.finish != FinishReason::kStop && d.finish != FinishReason::kLength) {
          // Ended by the server (shutdown, model error): the same chunk carries the
          // error, so clients neither hang nor see a bare connection close.
          bool aborted = d.finish == FinishReason::kAbort;
          chunk["error"] = http::openai_error(aborted ? 503 : 500, gen.errors[i], "",
                                              aborted ? "server_shutting_down" : "generation_failed")["error"];
        }
        if (!send(with_usage_null(chunk))) return false;
      }
    }
    if (gen.finished == gen.num_choices()) {
      if (gen.include_usage) {
        Json chunk = gen.chunk_base();
        chunk["choices"] = Json::array();
        chunk["usage"] = usage_json(gen.usage());
        if (!send(chunk)) return false;
      }
      static const char kDone[] = "data: [DONE]\n\n";
      if (!sink.write(kDone, sizeof kDone - 1)) return false;
      gen.done = true;
      sink.done();
    }
    return true;
  }

  EngineClient& engine_;
  const ChatFormatter& chat_;
  std::once_flag compiler_once_;
  std::unique_ptr<structured::GrammarCompiler> compiler_;
  ServeMetrics& metrics_;
  ApiServerConfig config_;
  int64_t started_;
  HttpEdge edge_;
  httplib::Server& svr_;  // the edge's routes
  std::atomic<bool> draining_{false};
  int port_ = 0;
};

}  // namespace

struct ApiServer::Impl {
  Server server;
  Impl(EngineClient& e, const ChatFormatter& c, ServeMetrics& m, ApiServerConfig cfg) : server(e, c, m, std::move(cfg)) {}
};

ApiServer::ApiServer(EngineClient& engine, const ChatFormatter& chat, ServeMetrics& metrics, ApiServerConfig config)
    : impl_(std::make_unique<Impl>(engine, chat, metrics, std::move(config))) {}
ApiServer::~ApiServer() { stop(); }
int ApiServer::bind() { return impl_->server.bind(); }
void ApiServer::serve() { impl_->server.serve(); }
void ApiServer::stop() { impl_->server.stop(); }
bool ApiServer::shutdown_gracefully(double drain_timeout_s) { return impl_->server.shutdown_gracefully(drain_timeout_s); }
int ApiServer::port() const { return impl_->server.port(); }
int ApiServer::open_connections() const { return impl_->server.open_connections(); }

}  // namespace distllm::serve::api
