// Turns chat messages into a prompt string with the model's chat template.
//
// The template comes from the model directory, in the order Hugging Face
// transformers looks: chat_template.jinja, then tokenizer_config.json's
// "chat_template" (a string, or a list of {name, template} where "default" is
// used), then chat_template.json. A template that uses Jinja features the
// interpreter lacks, or that fails on every plain conversation, is an error when
// the server starts, never a silently different prompt. A model without any
// template has no chat format (as transformers and vLLM decide since templates
// stopped having a default): chat requests are refused with a message that says
// how to give one. ChatML is there when asked for by name (`--chat-template chatml`):
//
//   <|im_start|>{role}\n{content}<|im_end|>\n ... <|im_start|>assistant\n
//
// with "<|im_end|>" as a default stop string for chat requests.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "distllm/serve/jinja/chat_template.h"

namespace distllm::serve {

// The messages as chat templates expect them: OpenAI sends a tool call's
// `arguments` as a JSON string, templates (Llama 3.1, Mistral, Qwen) write them as
// an object, so a string that parses as a JSON object becomes that object (as vLLM
// and transformers do). Anything else is passed through unchanged.
nlohmann::ordered_json template_messages(const nlohmann::ordered_json& messages);

// How one request renders, besides its messages and tools (vLLM's chat request
// fields): `kwargs` are chat_template_kwargs, more template variables such as
// Qwen3's enable_thinking or Llama 3's tools_in_user_message; continue_final_message
// ends the prompt inside the last (assistant) message, so the model continues it,
// as transformers does; documents reach templates that take retrieved documents.
struct ChatRenderOptions {
  bool add_generation_prompt = true;
  bool continue_final_message = false;
  nlohmann::ordered_json documents;                            // null: none
  nlohmann::ordered_json kwargs = nlohmann::ordered_json::object();
};

// The template variables a request may not set through chat_template_kwargs: the
// ones the request's own fields give.
bool is_reserved_template_variable(const std::string& name);

// Thrown by apply() when the model has no chat template: a client error (400).
class ChatTemplateMissing : public Error {
 public:
  using Error::Error;
};

class ChatFormatter {
 public:
  static const char* const kDefaultTemplate;

  // The model directory's template; none() when it has none.
  static ChatFormatter for_model_dir(const std::string& dir);
  // `--chat-template VALUE`: a Jinja file, or "chatml" for the ChatML format.
  static ChatFormatter from_flag(const std::string& value, const std::string& model_dir);
  // No chat format: apply() throws ChatTemplateMissing saying `why` and what to do.
  static ChatFormatter none(const std::string& why);
  static ChatFormatter from_template(const std::string& source, const std::string& origin, std::string bos_token,
                                     std::string eos_token);
  static ChatFormatter default_format();

  // Renders the prompt. Throws TemplateError when the template rejects the
  // conversation (raise_exception) or cannot render it, or continue_final_message
  // cannot find the last message in what it rendered.
  std::string apply(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                    const ChatRenderOptions& options) const;
  std::string apply(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                    bool add_generation_prompt) const;
  // What strftime_now() reads (tests fix it); the local time by default.
  void set_clock(TemplateClock clock) { clock_ = std::move(clock); }

  bool is_default() const { return is_default_; }
  bool has_template() const { return missing_.empty(); }
  // Stop strings every chat request gets (the default template's end-of-turn).
  const std::vector<std::string>& default_stop() const { return default_stop_; }
  const std::string& origin() const { return origin_; }

 private:
  ChatFormatter(ChatTemplate t, std::string origin) : template_(std::move(t)), origin_(std::move(origin)) {}
  ChatFormatter() = default;
  void check_renders() const;

  ChatTemplate template_;
  std::string origin_;
  std::string bos_token_, eos_token_;
  TemplateClock clock_;
  bool is_default_ = false;
  std::vector<std::string> default_stop_;
  std::string missing_;  // non-empty: no template, and why
};

}  // namespace distllm::serve
