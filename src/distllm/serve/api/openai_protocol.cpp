#include "distllm/serve/api/openai_protocol.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <random>

#include "distllm/base/strings.h"
#include "distllm/serve/structured/ordered_json.h"
#include "distllm/tokenizer/utf8.h"

namespace distllm::serve::api {
namespace {

const char* json_type_name(const Json& v) {
  switch (v.type()) {
    case Json::value_t::null: return "null";
    case Json::value_t::boolean: return "a boolean";
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned: return "an integer";
    case Json::value_t::number_float: return "a number";
    case Json::value_t::string: return "a string";
    case Json::value_t::array: return "an array";
    case Json::value_t::object: return "an object";
    default: return "an unknown type";
  }
}

[[noreturn]] void bad(const std::string& param, const std::string& message) {
  throw ApiError(400, message, param, "invalid_request_error");
}

[[noreturn]] void wrong_type(const std::string& param, const char* expected, const Json& got) {
  bad(param, strprintf("'%s' must be %s, got %s", param.c_str(), expected, json_type_name(got)));
}

const Json* field(const Json& body, const char* key) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return nullptr;
  return &*it;
}

std::optional<int64_t> get_int(const Json& body, const char* key, int64_t lo, int64_t hi) {
  const Json* v = field(body, key);
  if (!v) return std::nullopt;
  int64_t x;
  if (v->is_number_unsigned()) {
    uint64_t u = v->get<uint64_t>();
    if (u > static_cast<uint64_t>(hi)) bad(key, strprintf("'%s' must be between %lld and %lld, got %llu", key, (long long)lo, (long long)hi, (unsigned long long)u));
    x = static_cast<int64_t>(u);
  } else if (v->is_number_integer()) {
    x = v->get<int64_t>();
  } else {
    wrong_type(key, "an integer", *v);
  }
  if (x < lo || x > hi) bad(key, strprintf("'%s' must be between %lld and %lld, got %lld", key, (long long)lo, (long long)hi, (long long)x));
  return x;
}

std::optional<double> get_number(const Json& body, const char* key, double lo, double hi, bool lo_open = false) {
  const Json* v = field(body, key);
  if (!v) return std::nullopt;
  if (!v->is_number()) wrong_type(key, "a number", *v);
  double x = v->get<double>();
  if (!std::isfinite(x) || x > hi || (lo_open ? x <= lo : x < lo)) {
    bad(key, strprintf("'%s' must be %s %g and <= %g, got %g", key, lo_open ? ">" : ">=", lo, hi, x));
  }
  return x;
}

std::optional<bool> get_bool(const Json& body, const char* key) {
  const Json* v = field(body, key);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) wrong_type(key, "a boolean", *v);
  return v->get<bool>();
}

// A request without `model` means the one model this server serves (as vLLM and
// llama.cpp take it); an empty string is a mistake, not that default.
std::string get_model(const Json& body) {
  const Json* v = field(body, "model");
  if (!v) return {};
  if (v->is_string() && v->get_ref<const std::string&>().empty()) bad("model", "'model' must not be empty");
  if (!v->is_string()) wrong_type("model", "a string", *v);
  return v->get<std::string>();
}

std::vector<int32_t> token_array(const Json& arr, const char* param) {
  std::vector<int32_t> out;
  for (const auto& t : arr) {
    if (!t.is_number_integer()) bad(param, strprintf("'%s' token ids must be integers, got %s", param, json_type_name(t)));
    int64_t x = t.get<int64_t>();
    if (x < 0 || x > INT32_MAX) bad(param, strprintf("'%s' token id %lld is out of range", param, (long long)x));
    out.push_back(static_cast<int32_t>(x));
  }
  return out;
}

void reject_unsupported(const Json& body) {
  if (const Json* v = field(body, "echo"); v && !(v->is_boolean() && !v->get<bool>())) {
    bad("echo", "'echo' is not supported by this server");
  }
  if (const Json* v = field(body, "suffix"); v && !(v->is_string() && v->get<std::string>().empty())) {
    bad("suffix", "'suffix' is not supported by this server");
  }
}

// OpenAI's logit_bias: {"token id": bias in [-100, 100], ...}. Token ids are
// checked against the vocabulary by the engine.
std::vector<std::pair<int32_t, float>> parse_logit_bias(const Json& bias) {
  if (!bias.is_object()) wrong_type("logit_bias", "an object mapping token ids to numbers", bias);
  if (bias.size() > 1024) bad("logit_bias", strprintf("'logit_bias' may hold at most 1024 entries, got %zu", bias.size()));
  std::vector<std::pair<int32_t, float>> out;
  for (const auto& [key, value] : bias.items()) {
    long long id = -1;
    size_t used = 0;
    try {
      id = std::stoll(key, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (key.empty() || used != key.size() || id < 0 || id > INT32_MAX) {
      bad("logit_bias", strprintf("'logit_bias' keys must be token ids (non-negative integers as strings), got '%s'",
                                  key.c_str()));
    }
    if (!value.is_number()) {
      bad("logit_bias", strprintf("'logit_bias' value for token %lld must be a number, got %s", id, json_type_name(value)));
    }
    const double v = value.get<double>();
    if (!std::isfinite(v) || v < -100.0 || v > 100.0) {
      bad("logit_bias", strprintf("'logit_bias' value for token %lld must be between -100 and 100, got %g", id, v));
    }
    out.emplace_back(static_cast<int32_t>(id), static_cast<float>(v));
  }
  std::sort(out.begin(), out.end());
  for (size_t i = 1; i < out.size(); ++i) {
    if (out[i].first == out[i - 1].first) bad("logit_bias", strprintf("'logit_bias' names token %d twice", out[i].first));
  }
  return out;
}

// response_format and vLLM's guided_* fields: at most one, turned into a grammar spec
// (compiled later against the tokenizer's vocabulary).
void parse_structured(const Json& body, SamplingFields& s) {
  auto set = [&](const char* param, structured::GrammarSpec spec) {
    if (s.structured)
      bad(param, strprintf("'%s' cannot be combined with '%s': give one structured-output constraint", param,
                           s.structured_param.c_str()));
    s.structured = std::move(spec);
    s.structured_param = param;
  };
  if (const Json* rf = field(body, "response_format")) {
    if (!rf->is_object()) wrong_type("response_format", "an object", *rf);
    const Json* type = field(*rf, "type");
    if (!type || !type->is_string())
      bad("response_format", "'response_format.type' must be one of 'text', 'json_object', 'json_schema'");
    std::string t = type->get<std::string>();
    if (t == "json_object") {
      set("response_format", structured::GrammarSpec::json_object());
    } else if (t == "json_schema") {
      const Json* js = field(*rf, "json_schema");
      if (!js || !js->is_object()) bad("response_format", "'response_format.json_schema' must be an object");
      const Json* name = field(*js, "name");
      if (name && !name->is_string()) bad("response_format", "'response_format.json_schema.name' must be a string");
      const Json* strict = field(*js, "strict");
      if (strict && !strict->is_boolean()) bad("response_format", "'response_format.json_schema.strict' must be a boolean");
      const Json* schema = field(*js, "schema");
      if (!schema) bad("response_format", "'response_format.json_schema.schema' is required");
      // The ordered dump keeps the schema's property order, which the grammar follows.
      set("response_format", structured::GrammarSpec::json_schema(schema->dump()));
    } else if (t != "text") {
      bad("response_format", "'response_format.type' must be one of 'text', 'json_object', 'json_schema', got '" + t + "'");
    }
  }
  if (const Json* v = field(body, "guided_json")) {
    if (v->is_string()) set("guided_json", structured::GrammarSpec::json_schema(v->get<std::string>()));
    else if (v->is_object() || v->is_boolean()) set("guided_json", structured::GrammarSpec::json_schema(v->dump()));
    else wrong_type("guided_json", "a JSON Schema (object or string)", *v);
  }
  if (const Json* v = field(body, "guided_regex")) {
    if (!v->is_string()) wrong_type("guided_regex", "a string", *v);
    set("guided_regex", structured::GrammarSpec::regex(v->get<std::string>()));
  }
  if (const Json* v = field(body, "guided_choice")) {
    if (!v->is_array() || v->empty()) bad("guided_choice", "'guided_choice' must be a non-empty array of strings");
    std::vector<std::string> choices;
    for (const auto& c : *v) {
      if (!c.is_string()) bad("guided_choice", "'guided_choice' must be a non-empty array of strings");
      choices.push_back(c.get<std::string>());
    }
    set("guided_choice", structured::GrammarSpec::choice(choices));
  }
  if (const Json* v = field(body, "guided_grammar")) {
    if (!v->is_string()) wrong_type("guided_grammar", "a string (GBNF)", *v);
    set("guided_grammar", structured::GrammarSpec::gbnf(v->get<std::string>()));
  }
}

SamplingFields parse_sampling(const Json& body, const char* max_tokens_key) {
  SamplingFields s;
  s.max_tokens = get_int(body, max_tokens_key, 1, INT32_MAX);
  if (s.max_tokens == std::nullopt && std::string(max_tokens_key) != "max_tokens") {
    s.max_tokens = get_int(body, "max_tokens", 1, INT32_MAX);
  }
  if (auto t = get_number(body, "temperature", 0.0, 2.0)) s.temperature = *t;
  if (auto p = get_number(body, "top_p", 0.0, 1.0, true)) s.top_p = *p;
  if (auto k = get_int(body, "top_k", -1, INT32_MAX)) s.top_k = static_cast<int>(*k);
  if (auto n = get_int(body, "n", 1, 128)) s.n = static_cast<int>(*n);
  if (auto b = get_int(body, "best_of", 1, 128); b && *b != s.n) bad("best_of", "'best_of' other than n is not supported");
  if (const Json* stop = field(body, "stop")) {
    if (stop->is_string()) {
      s.stop.push_back(stop->get<std::string>());
    } else if (stop->is_array()) {
      if (stop->size() > 16) bad("stop", "'stop' may hold at most 16 strings");
      for (const auto& x : *stop) {
        if (!x.is_string()) bad("stop", strprintf("'stop' entries must be strings, got %s", json_type_name(x)));
        s.stop.push_back(x.get<std::string>());
      }
    } else {
      wrong_type("stop", "a string or an array of strings", *stop);
    }
    for (const auto& x : s.stop)
      if (x.empty()) bad("stop", "'stop' strings must not be empty");
  }
  if (const Json* ids = field(body, "stop_token_ids")) {
    if (!ids->is_array()) wrong_type("stop_token_ids", "an array of integers", *ids);
    s.stop_token_ids = token_array(*ids, "stop_token_ids");
  }
  if (const Json* seed = field(body, "seed")) {
    if (seed->is_number_unsigned()) s.seed = seed->get<uint64_t>();
    else if (seed->is_number_integer()) s.seed = static_cast<uint64_t>(seed->get<int64_t>());
    else wrong_type("seed", "an integer", *seed);
  }
  if (auto b = get_bool(body, "ignore_eos")) s.ignore_eos = *b;
  if (auto x = get_number(body, "presence_penalty", -2.0, 2.0)) s.presence_penalty = *x;
  if (auto x = get_number(body, "frequency_penalty", -2.0, 2.0)) s.frequency_penalty = *x;
  if (auto x = get_number(body, "repetition_penalty", 0.0, 100.0, true)) {
    // Smaller values divide logits out of the float range (kMinRepetitionPenalty).
    if (*x < static_cast<double>(kMinRepetitionPenalty))
      bad("repetition_penalty", strprintf("'repetition_penalty' must be at least %g (smaller values make logits "
                                          "infinite), got %g",
                                          static_cast<double>(kMinRepetitionPenalty), *x));
    s.repetition_penalty = *x;
  }
  if (auto x = get_number(body, "min_p", 0.0, 1.0)) s.min_p = *x;
  if (const Json* bias = field(body, "logit_bias")) s.logit_bias = parse_logit_bias(*bias);
  if (auto m = get_int(body, "min_tokens", 0, INT32_MAX)) {
    s.min_tokens = static_cast<int>(*m);
    if (s.max_tokens && *s.max_tokens < s.min_tokens) {
      bad("min_tokens", strprintf("'min_tokens' (%d) must not exceed the maximum number of tokens (%lld)", s.min_tokens,
                                  static_cast<long long>(*s.max_tokens)));
    }
  }
  if (auto b = get_bool(body, "include_stop_str_in_output")) s.include_stop_str_in_output = *b;
  parse_structured(body, s);
  return s;
}

void parse_stream(const Json& body, bool& stream, bool& include_usage) {
  if (auto b = get_bool(body, "stream")) stream = *b;
  if (const Json* opts = field(body, "stream_options")) {
    if (!opts->is_object()) wrong_type("stream_options", "an object", *opts);
    if (!stream) bad("stream_options", "'stream_options' is only allowed when 'stream' is true");
    if (auto b = get_bool(*opts, "include_usage")) include_usage = *b;
  }
}

// vLLM's chat template fields. continue_final_message ends the prompt inside the
// last message, so add_generation_prompt is false unless asked for (then a 400).
void parse_render_options(const Json& body, ChatRenderOptions& render) {
  const std::optional<bool> gen = get_bool(body, "add_generation_prompt");
  if (auto b = get_bool(body, "continue_final_message")) render.continue_final_message = *b;
  if (render.continue_final_message && gen.value_or(false))
    bad("continue_final_message", "'continue_final_message' and 'add_generation_prompt' cannot both be true");
  render.add_generation_prompt = gen.value_or(!render.continue_final_message);
  if (const Json* kwargs = field(body, "chat_template_kwargs")) {
    if (!kwargs->is_object()) wrong_type("chat_template_kwargs", "an object", *kwargs);
    for (const auto& [key, value] : kwargs->items()) {
      if (is_reserved_template_variable(key))
        bad("chat_template_kwargs", "'chat_template_kwargs' may not set '" + key + "': give it as the request's own field");
    }
    render.kwargs = *kwargs;
  }
  if (const Json* docs = field(body, "documents")) {
    if (!docs->is_array()) wrong_type("documents", "an array", *docs);
    for (const auto& d : *docs)
      if (!d.is_object()) bad("documents", "'documents' entries must be objects");
    render.documents = *docs;
  }
}

void require_object(const Json& body) {
  if (!body.is_object()) throw ApiError(400, strprintf("the request body must be a JSON object, got %s", json_type_name(body)), "", "invalid_request_error");
}

}  // namespace

Json parse_body(const std::string& body) {
  try {
    return structured::parse_ordered_json(body);  // linear in the keys, unlike Json::parse
  } catch (const Json::exception& e) {
    // Syntax errors and out-of-range numbers ("1e999"). nlohmann's messages look like
    // "[json.exception.parse_error.101] parse error at line 1, ...".
    std::string what = e.what();
    size_t p = what.find("] ");
    throw ApiError(400, "invalid JSON in the request body: " + (p == std::string::npos ? what : what.substr(p + 2)), "",
                   "invalid_json");
  }
}

CompletionRequest parse_completion_request(const Json& body) {
  require_object(body);
  CompletionRequest r;
  r.model = get_model(body);
  const Json* prompt = field(body, "prompt");
  if (!prompt) bad("prompt", "'prompt' is required");
  if (prompt->is_string()) {
    r.prompts.push_back({true, prompt->get<std::string>(), {}});
  } else if (prompt->is_array()) {
    if (prompt->empty()) bad("prompt", "'prompt' must not be an empty array");
    if ((*prompt)[0].is_number_integer()) {
      r.prompts.push_back({false, "", token_array(*prompt, "prompt")});
    } else if ((*prompt)[0].is_string()) {
      for (const auto& p : *prompt) {
        if (!p.is_string()) bad("prompt", "'prompt' arrays must hold only strings, only token ids, or only token-id arrays");
        r.prompts.push_back({true, p.get<std::string>(), {}});
      }
    } else if ((*prompt)[0].is_array()) {
      for (const auto& p : *prompt) {
        if (!p.is_array()) bad("prompt", "'prompt' arrays must hold only strings, only token ids, or only token-id arrays");
        r.prompts.push_back({false, "", token_array(p, "prompt")});
      }
    } else {
      bad("prompt", strprintf("'prompt' array entries must be strings, token ids or token-id arrays, got %s", json_type_name((*prompt)[0])));
    }
    if (r.prompts.size() > 128) bad("prompt", "'prompt' may hold at most 128 prompts");
  } else {
    wrong_type("prompt", "a string, an array of strings, or an array of token ids", *prompt);
  }
  reject_unsupported(body);
  r.sampling = parse_sampling(body, "max_tokens");
  parse_stream(body, r.stream, r.include_usage);
  if (auto lp = get_int(body, "logprobs", 0, 20)) r.logprobs = static_cast<int>(*lp);
  return r;
}

ChatRequest parse_chat_request(const Json& body) {
  require_object(body);
  ChatRequest r;
  r.model = get_model(body);
  const Json* messages = field(body, "messages");
  if (!messages) bad("messages", "'messages' is required");
  if (!messages->is_array()) wrong_type("messages", "an array", *messages);
  if (messages->empty()) bad("messages", "'messages' must not be empty");
  r.messages = Json::array();
  for (size_t i = 0; i < messages->size(); ++i) {
    const Json& m = (*messages)[i];
    std::string where = strprintf("messages[%zu]", i);
    if (!m.is_object()) wrong_type(where, "an object", m);
    const Json* role = field(m, "role");
    if (!role) bad(where + ".role", "'" + where + ".role' is required");
    if (!role->is_string()) wrong_type(where + ".role", "a string", *role);
    static const std::vector<std::string> kRoles = {"system", "developer", "user", "assistant", "tool", "function"};
    std::string role_s = role->get<std::string>();
    if (std::find(kRoles.begin(), kRoles.end(), role_s) == kRoles.end()) {
      bad(where + ".role", "'" + where + ".role' must be one of system, developer, user, assistant, tool, function; got '" + role_s + "'");
    }
    Json out = m;  // keep other fields (name, tool_calls, ...) for the template
    const Json* content = field(m, "content");
    std::string text;
    if (!content) {
      if (role_s != "assistant") bad(where + ".content", "'" + where + ".content' is required");
    } else if (content->is_string()) {
      text = content->get<std::string>();
    } else if (content->is_array()) {
      for (size_t k = 0; k < content->size(); ++k) {
        const Json& part = (*content)[k];
        std::string pw = strprintf("%s.content[%zu]", where.c_str(), k);
        if (!part.is_object()) wrong_type(pw, "an object", part);
        const Json* type = field(part, "type");
        if (!type || !type->is_string() || type->get<std::string>() != "text") {
          bad(pw + ".type", "only content parts of type 'text' are supported");
        }
        const Json* t = field(part, "text");
        if (!t || !t->is_string()) bad(pw + ".text", "'" + pw + ".text' must be a string");
        text += t->get<std::string>();
      }
    } else {
      wrong_type(where + ".content", "a string or an array of content parts", *content);
    }
    out["content"] = text;
    r.messages.push_back(std::move(out));
  }
  if (const Json* tools = field(body, "tools")) {
    if (!tools->is_array()) wrong_type("tools", "an array", *tools);
    r.tools = *tools;
  }
  reject_unsupported(body);
  r.sampling = parse_sampling(body, "max_completion_tokens");
  parse_stream(body, r.stream, r.include_usage);
  if (auto b = get_bool(body, "logprobs")) r.logprobs = *b;
  if (auto k = get_int(body, "top_logprobs", 0, 20)) {
    if (!r.logprobs) bad("top_logprobs", "'top_logprobs' requires 'logprobs' to be true");
    r.top_logprobs = static_cast<int>(*k);
  }
  parse_render_options(body, r.render);
  return r;
}

std::vector<GenerationRequest> make_generation_requests(const SamplingFields& s, const std::vector<int32_t>& prompt,
                                                        int max_tokens, int logprobs) {
  std::vector<GenerationRequest> out;
  for (int i = 0; i < s.n; ++i) {
    GenerationRequest g;
    g.prompt = prompt;
    g.sampling.temperature = static_cast<float>(s.temperature);
    g.sampling.top_p = static_cast<float>(s.top_p);
    g.sampling.top_k = s.top_k;
    g.sampling.logprobs = logprobs;
    g.sampling.min_p = static_cast<float>(s.min_p);
    g.sampling.presence_penalty = static_cast<float>(s.presence_penalty);
    g.sampling.frequency_penalty = static_cast<float>(s.frequency_penalty);
    g.sampling.repetition_penalty = static_cast<float>(s.repetition_penalty);
    g.sampling.logit_bias = s.logit_bias;
    g.min_tokens = std::min(s.min_tokens, max_tokens);
    g.include_stop_str_in_output = s.include_stop_str_in_output;
    g.sampling.seed_stream = static_cast<uint64_t>(i);  // n choices of one seed differ
    g.seed = s.seed;
    g.max_tokens = max_tokens;
    g.stop = s.stop;
    g.stop_token_ids = s.stop_token_ids;
    g.ignore_eos = s.ignore_eos;
    out.push_back(std::move(g));
  }
  return out;
}

Json usage_json(const Usage& u) {
  return Json{{"prompt_tokens", u.prompt_tokens},
              {"completion_tokens", u.completion_tokens},
              {"total_tokens", u.prompt_tokens + u.completion_tokens},
              {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}}};
}

std::string token_display(const std::string& bytes) {
  std::string out;
  size_t i = 0;
  while (i < bytes.size()) {
    unsigned char c = static_cast<unsigned char>(bytes[i]);
    size_t len = c < 0x80 ? 1 : (c >= 0xC2 && c <= 0xDF) ? 2 : (c >= 0xE0 && c <= 0xEF) ? 3 : (c >= 0xF0 && c <= 0xF4) ? 4 : 0;
    bool ok = len > 0 && i + len <= bytes.size();
    uint32_t cp = len == 1 ? c : len == 2 ? (c & 0x1F) : len == 3 ? (c & 0x0F) : (c & 0x07);
    for (size_t k = 1; ok && k < len; ++k) {
      unsigned char d = static_cast<unsigned char>(bytes[i + k]);
      ok = (d & 0xC0) == 0x80;
      cp = (cp << 6) | (d & 0x3F);
    }
    if (ok && ((len == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)))) ok = false;
    if (ok) {
      out.append(bytes, i, len);
      i += len;
    } else {
      utf8_append(out, 0xFFFD);
      i += 1;
    }
  }
  return out;
}

Json completion_logprobs(const std::vector<TokenLogprob>& lps, const std::function<std::string(int32_t)>& token_bytes,
                         int64_t offset) {
  Json tokens = Json::array(), token_logprobs = Json::array(), top = Json::array(), offsets = Json::array();
  for (const auto& lp : lps) {
    std::string text = token_display(token_bytes(lp.token));
    tokens.push_back(text);
    token_logprobs.push_back(lp.logprob);
    Json alts = Json::object();
    for (const auto& [id, v] : lp.top) {
      std::string key = token_display(token_bytes(id));
      if (!alts.contains(key)) alts[key] = v;
    }
    top.push_back(std::move(alts));
    offsets.push_back(offset);
    offset += static_cast<int64_t>(token_bytes(lp.token).size());
  }
  return Json{{"tokens", tokens}, {"token_logprobs", token_logprobs}, {"top_logprobs", top}, {"text_offset", offsets}};
}

Json chat_logprobs(const std::vector<TokenLogprob>& lps, const std::function<std::string(int32_t)>& token_bytes) {
  auto entry = [&](int32_t id, float logprob) {
    std::string raw = token_bytes(id);
    Json bytes = Json::array();
    for (unsigned char c : raw) bytes.push_back(static_cast<int>(c));
    return Json{{"token", token_display(raw)}, {"logprob", logprob}, {"bytes", bytes}};
  };
  Json content = Json::array();
  for (const auto& lp : lps) {
    Json e = entry(lp.token, lp.logprob);
    Json top = Json::array();
    for (const auto& [id, v] : lp.top) top.push_back(entry(id, v));
    e["top_logprobs"] = top;
    content.push_back(std::move(e));
  }
  return Json{{"content", content}};
}

std::string new_request_id(const char* prefix) {
  static thread_local std::mt19937_64 rng(std::random_device{}());
  return strprintf("%s%016llx%08llx", prefix, static_cast<unsigned long long>(rng()),
                   static_cast<unsigned long long>(rng() & 0xffffffffull));
}

std::string client_request_id(const std::string& v) {
  if (v.empty() || v.size() > 128) return "";
  for (char c : v)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == ':' || c == '-')) return "";
  return v;
}

int64_t unix_time() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace distllm::serve::api
