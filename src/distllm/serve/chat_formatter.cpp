#include "distllm/serve/chat_formatter.h"

#include <filesystem>

#include "distllm/base/error.h"
#include "distllm/io/file_util.h"
#include "distllm/serve/jinja/template_json.h"

namespace distllm::serve {
namespace {

using Json = nlohmann::ordered_json;

std::string read_text(const std::filesystem::path& p) { return read_file(p.string()); }

Json read_json(const std::filesystem::path& p) {
  try {
    return Json::parse(read_text(p));
  } catch (const Json::exception& e) {
    throw_error(strprintf("%s: invalid JSON: %s", p.c_str(), e.what()));
  }
}

// "bos_token" is a string, or an AddedToken object {"content": ...}.
std::string special_token(const Json& config, const char* key) {
  auto it = config.find(key);
  if (it == config.end() || it->is_null()) return "";
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) return (*it)["content"].get<std::string>();
  return "";
}

}  // namespace

const char* const ChatFormatter::kDefaultTemplate =
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

ChatFormatter ChatFormatter::default_format() {
  ChatFormatter f(ChatTemplate::parse(kDefaultTemplate, "default chat template"), "default chat template");
  f.is_default_ = true;
  f.default_stop_ = {"<|im_end|>"};
  return f;
}

ChatFormatter ChatFormatter::from_template(const std::string& source, const std::string& origin, std::string bos_token,
                                           std::string eos_token) {
  ChatFormatter f(ChatTemplate::parse(source, origin), origin);
  f.bos_token_ = std::move(bos_token);
  f.eos_token_ = std::move(eos_token);
  f.check_renders();
  return f;
}

ChatFormatter ChatFormatter::for_model_dir(const std::string& dir) {
  namespace fs = std::filesystem;
  fs::path root(dir);
  Json config = Json::object();
  fs::path config_path = root / "tokenizer_config.json";
  if (fs::exists(config_path)) config = read_json(config_path);
  std::string bos = special_token(config, "bos_token"), eos = special_token(config, "eos_token");

  if (fs::exists(root / "chat_template.jinja")) {
    return from_template(read_text(root / "chat_template.jinja"), (root / "chat_template.jinja").string(), bos, eos);
  }
  auto it = config.find("chat_template");
  if (it != config.end() && !it->is_null()) {
    std::string origin = config_path.string() + " chat_template";
    if (it->is_string()) return from_template(it->get<std::string>(), origin, bos, eos);
    DL_CHECK(it->is_array(), "%s must be a string or a list of {name, template}", origin.c_str());
    const Json* chosen = nullptr;
    for (const auto& entry : *it) {
      DL_CHECK(entry.is_object() && entry.contains("template") && entry["template"].is_string(),
               "%s: every entry needs a string \"template\"", origin.c_str());
      if (entry.value("name", "") == "default") chosen = &entry;
    }
    DL_CHECK(chosen != nullptr, "%s lists templates but none named \"default\"", origin.c_str());
    return from_template((*chosen)["template"].get<std::string>(), origin + " (default)", bos, eos);
  }
  if (fs::exists(root / "chat_template.json")) {
    Json j = read_json(root / "chat_template.json");
    DL_CHECK(j.contains("chat_template") && j["chat_template"].is_string(), "%s: needs a string \"chat_template\"",
             (root / "chat_template.json").c_str());
    return from_template(j["chat_template"].get<std::string>(), (root / "chat_template.json").string(), bos, eos);
  }
  return none(dir + " has no chat template (no chat_template.jinja, no \"chat_template\" in tokenizer_config.json, "
              "no chat_template.json)");
}

ChatFormatter ChatFormatter::from_flag(const std::string& value, const std::string& model_dir) {
  if (value == "chatml") return default_format();
  const std::filesystem::path config_path = std::filesystem::path(model_dir) / "tokenizer_config.json";
  const Json config = std::filesystem::exists(config_path) ? read_json(config_path) : Json::object();
  return from_template(read_text(value), value, special_token(config, "bos_token"), special_token(config, "eos_token"));
}

ChatFormatter ChatFormatter::none(const std::string& why) {
  ChatFormatter f;
  f.origin_ = "no chat template";
  f.missing_ = why + ": chat completions need one; start the server with --chat-template FILE (a Jinja template), "
                     "or --chat-template chatml for the ChatML format, or use /v1/completions";
  return f;
}

Json template_messages(const Json& messages) {
  Json out = messages;
  for (Json& m : out) {
    auto calls = m.find("tool_calls");
    if (calls == m.end() || !calls->is_array()) continue;
    for (Json& call : *calls) {
      if (!call.is_object()) continue;
      auto fn = call.find("function");
      if (fn == call.end() || !fn->is_object()) continue;
      auto args = fn->find("arguments");
      if (args == fn->end() || !args->is_string()) continue;
      Json parsed = Json::parse(args->get<std::string>(), nullptr, /*allow_exceptions=*/false);
      if (parsed.is_object()) *args = std::move(parsed);
    }
  }
  return out;
}

bool is_reserved_template_variable(const std::string& name) {
  return name == "messages" || name == "tools" || name == "documents" || name == "add_generation_prompt" ||
         name == "continue_final_message";
}

namespace {

// transformers' continue_final_message: the prompt ends right after the last
// message's text (trimmed, for templates that trim it), with no end-of-turn.
std::string cut_after_final_message(const std::string& rendered, const Json& messages) {
  const Json& last = messages.back();
  std::string text = last.contains("content") && last["content"].is_string() ? last["content"].get<std::string>() : "";
  size_t at = text.empty() ? std::string::npos : rendered.rfind(text);
  if (at == std::string::npos) {
    const size_t a = text.find_first_not_of(" \t\r\n"), b = text.find_last_not_of(" \t\r\n");
    text = a == std::string::npos ? "" : text.substr(a, b - a + 1);
    at = text.empty() ? std::string::npos : rendered.rfind(text);
  }
  if (at == std::string::npos)
    throw TemplateError("continue_final_message: the final message's content is not in the rendered prompt");
  return rendered.substr(0, at + text.size());
}

}  // namespace

std::string ChatFormatter::apply(const Json& messages, const Json& tools, const ChatRenderOptions& options) const {
  if (!missing_.empty()) throw ChatTemplateMissing(missing_);
  if (options.continue_final_message && options.add_generation_prompt)
    throw TemplateError("continue_final_message and add_generation_prompt cannot both be true");
  if (options.continue_final_message && (!messages.is_array() || messages.empty()))
    throw TemplateError("continue_final_message needs a final message");
  // As transformers: the special tokens, then the caller's variables, then the
  // conversation itself (which the caller's variables cannot replace).
  Json vars = {{"bos_token", bos_token_}, {"eos_token", eos_token_}};
  for (const auto& [k, v] : options.kwargs.items())
    if (!is_reserved_template_variable(k)) vars[k] = v;
  vars["messages"] = template_messages(messages);
  vars["tools"] = tools;
  vars["documents"] = options.documents;
  vars["add_generation_prompt"] = options.add_generation_prompt;
  const std::string rendered = template_.render(template_value_from_json(vars), clock_);
  return options.continue_final_message ? cut_after_final_message(rendered, messages) : rendered;
}

std::string ChatFormatter::apply(const Json& messages, const Json& tools, bool add_generation_prompt) const {
  ChatRenderOptions options;
  options.add_generation_prompt = add_generation_prompt;
  return apply(messages, tools, options);
}

void ChatFormatter::check_renders() const {
  // Templates may legitimately refuse some shapes (no system role, strict
  // alternation); one plain conversation must work.
  const Json conversations[] = {
      Json::array({{{"role", "system"}, {"content", "You are helpful."}},
                   {{"role", "user"}, {"content", "Hi"}},
                   {{"role", "assistant"}, {"content", "Hello"}},
                   {{"role", "user"}, {"content", "Bye"}}}),
      Json::array({{{"role", "user"}, {"content", "Hi"}},
                   {{"role", "assistant"}, {"content", "Hello"}},
                   {{"role", "user"}, {"content", "Bye"}}}),
      Json::array({{{"role", "user"}, {"content", "Hi"}}}),
  };
  std::string last_error;
  for (const auto& conv : conversations) {
    try {
      apply(conv, Json(), true);
      return;
    } catch (const TemplateError& e) {
      last_error = e.what();
    }
  }
  throw_error(strprintf("%s cannot render even a one-message conversation: %s", origin_.c_str(), last_error.c_str()));
}

}  // namespace distllm::serve
