// OpenAI API request parsing and response shapes (completions and chat
// completions), independent of the HTTP library so it can be unit-tested.
//
// Requests are validated strictly: a field of the wrong type or out of range is a
// 400 naming the field. Unknown fields are ignored (as vLLM does); known OpenAI
// fields this server cannot honour (echo, logit_bias, penalties, best_of > n,
// suffix) are rejected rather than silently ignored. vLLM extensions accepted:
// top_k, stop_token_ids, ignore_eos, and for chat add_generation_prompt,
// continue_final_message, chat_template_kwargs and documents.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "distllm/serve/chat_formatter.h"
#include "distllm/serve/engine_client.h"
#include "distllm/serve/sampler.h"
#include "distllm/serve/structured/compiler.h"

namespace distllm::serve::api {

using Json = nlohmann::ordered_json;

// An error answered with an OpenAI error object:
// {"error": {"message", "type", "param", "code"}}.
class ApiError : public std::runtime_error {
 public:
  ApiError(int status, const std::string& message, std::string param = "", std::string code = "")
      : std::runtime_error(message), status_(status), param_(std::move(param)), code_(std::move(code)) {}
  int status() const { return status_; }
  const std::string& param() const { return param_; }
  const std::string& code() const { return code_; }

 private:
  int status_;
  std::string param_;
  std::string code_;
};


// Parses a request body; malformed JSON (including invalid UTF-8) is a 400.
Json parse_body(const std::string& body);

struct SamplingFields {
  std::optional<int64_t> max_tokens;
  double temperature = 1.0;
  double top_p = 1.0;
  int top_k = 0;
  int n = 1;
  std::vector<std::string> stop;
  std::vector<int32_t> stop_token_ids;
  std::optional<uint64_t> seed;
  bool ignore_eos = false;
  double presence_penalty = 0.0;
  double frequency_penalty = 0.0;
  double repetition_penalty = 1.0;
  double min_p = 0.0;
  std::vector<std::pair<int32_t, float>> logit_bias;  // sorted by token id
  int min_tokens = 0;
  bool include_stop_str_in_output = false;
  // Structured output: response_format (json_object / json_schema) or one of vLLM's
  // guided_json, guided_regex, guided_choice, guided_grammar. `structured_param` is
  // the field it came from (named in a 400 when the grammar does not compile).
  std::optional<structured::GrammarSpec> structured;
  std::string structured_param;
};

struct PromptInput {
  bool is_text = true;
  std::string text;
  std::vector<int32_t> tokens;
};

struct CompletionRequest {
  std::string model;  // empty when the request names none: the one served model
  std::vector<PromptInput> prompts;
  SamplingFields sampling;
  bool stream = false;
  bool include_usage = false;
  int logprobs = -1;  // -1: none; else top alternatives per token (0..20)
};

struct ChatRequest {
  std::string model;  // empty when the request names none: the one served model
  Json messages;  // validated; every content normalised to a string
  Json tools;     // null when absent
  SamplingFields sampling;
  bool stream = false;
  bool include_usage = false;
  bool logprobs = false;
  int top_logprobs = 0;
  // How the chat template renders: add_generation_prompt, continue_final_message,
  // documents and chat_template_kwargs (template variables, e.g. enable_thinking).
  ChatRenderOptions render;
};

CompletionRequest parse_completion_request(const Json& body);
ChatRequest parse_chat_request(const Json& body);

// Engine requests for one prompt (n choices, seeds seed+0, stream i for choice i).
std::vector<GenerationRequest> make_generation_requests(const SamplingFields& s, const std::vector<int32_t>& prompt,
                                                        int max_tokens, int logprobs);

// What a choice ended up with (non-streaming responses).
struct ChoiceResult {
  std::string text;
  FinishReason finish = FinishReason::kNone;
  std::vector<TokenLogprob> logprobs;
  std::vector<std::string> logprob_tokens;  // text of each logprob token, as TokenText gives it
};

struct Usage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t cached_tokens = 0;
};
Json usage_json(const Usage& u);

// A token's text for logprobs: its bytes as UTF-8, invalid bytes as U+FFFD.
std::string token_display(const std::string& bytes);

// Completions logprobs object for tokens starting at text offset `offset`.
Json completion_logprobs(const std::vector<TokenLogprob>& lps, const std::function<std::string(int32_t)>& token_bytes,
                         int64_t offset);
// Chat logprobs object: {"content": [...]}.
Json chat_logprobs(const std::vector<TokenLogprob>& lps, const std::function<std::string(int32_t)>& token_bytes);

std::string new_request_id(const char* prefix);
// The request id a client (or a router in front) sent in X-Request-Id, when it is
// 1 to 128 characters of [A-Za-z0-9._:-]; empty otherwise. Responses then use it
// (prefix + id) so logs on every hop name the same request.
std::string client_request_id(const std::string& header_value);
int64_t unix_time();

}  // namespace distllm::serve::api
