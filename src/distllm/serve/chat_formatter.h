// Turns chat messages into a prompt string with the model's chat template.
//
// The template comes from the model directory, in the order Hugging Face
// transformers looks: chat_template.jinja, then tokenizer_config.json's
// "chat_template" (a string, or a list of {name, template} where "default" is
// used), then chat_template.json. A template that uses Jinja features the
// interpreter lacks, or that fails on every plain conversation, is an error when
// the server starts, never a silently different prompt. Without any template the
// documented default (ChatML-like) is used:
//
//   <|im_start|>{role}\n{content}<|im_end|>\n ... <|im_start|>assistant\n
//
// and "<|im_end|>" becomes a default stop string for chat requests.
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

class ChatFormatter {
 public:
  static const char* const kDefaultTemplate;

  static ChatFormatter for_model_dir(const std::string& dir);
  static ChatFormatter from_template(const std::string& source, const std::string& origin, std::string bos_token,
                                     std::string eos_token);
  static ChatFormatter default_format();

  // Renders the prompt. Throws TemplateError when the template rejects the
  // conversation (raise_exception) or cannot render it.
  std::string apply(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                    bool add_generation_prompt) const;

  bool is_default() const { return is_default_; }
  // Stop strings every chat request gets (the default template's end-of-turn).
  const std::vector<std::string>& default_stop() const { return default_stop_; }
  const std::string& origin() const { return origin_; }

 private:
  ChatFormatter(ChatTemplate t, std::string origin) : template_(std::move(t)), origin_(std::move(origin)) {}
  void check_renders() const;

  ChatTemplate template_;
  std::string origin_;
  std::string bos_token_, eos_token_;
  bool is_default_ = false;
  std::vector<std::string> default_stop_;
};

}  // namespace distllm::serve
