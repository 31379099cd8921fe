#include "distllm/serve/api/tool_calls.h"

#include <cctype>
#include <random>

#include "distllm/base/error.h"
#include "distllm/base/strings.h"
#include "distllm/serve/api/held_text.h"
#include "distllm/serve/api/openai_protocol.h"

namespace distllm::serve::api {
namespace {

[[noreturn]] void bad(const std::string& param, const std::string& message) {
  throw ApiError(400, message, param, "invalid_request_error");
}

// OpenAI's rule for function names.
bool valid_function_name(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-')) return false;
  return true;
}

std::vector<ToolFunction> parse_functions(const Json& tools) {
  if (!tools.is_array()) bad("tools", "'tools' must be an array");
  if (tools.size() > 128) bad("tools", strprintf("'tools' may hold at most 128 functions, got %zu", tools.size()));
  std::vector<ToolFunction> out;
  for (size_t i = 0; i < tools.size(); ++i) {
    const Json& t = tools[i];
    const std::string where = strprintf("tools[%zu]", i);
    if (!t.is_object()) bad(where, "'" + where + "' must be an object");
    auto type = t.find("type");
    if (type == t.end() || !type->is_string() || type->get<std::string>() != "function")
      bad(where + ".type", "'" + where + ".type' must be \"function\"");
    auto fn = t.find("function");
    if (fn == t.end() || !fn->is_object()) bad(where + ".function", "'" + where + ".function' must be an object");
    auto name = fn->find("name");
    if (name == fn->end() || !name->is_string() || !valid_function_name(name->get<std::string>()))
      bad(where + ".function.name", "'" + where + ".function.name' must be 1 to 64 letters, digits, '_' or '-'");
    ToolFunction f;
    f.name = name->get<std::string>();
    for (const auto& g : out)
      if (g.name == f.name) bad(where + ".function.name", "function '" + f.name + "' is defined twice in 'tools'");
    auto params = fn->find("parameters");
    if (params == fn->end() || params->is_null()) {
      f.parameters = Json{{"type", "object"}};
    } else if (!params->is_object()) {
      bad(where + ".function.parameters", "'" + where + ".function.parameters' must be a JSON Schema object");
    } else {
      f.parameters = *params;
    }
    out.push_back(std::move(f));
  }
  return out;
}

std::string random_id(size_t len, bool with_prefix) {
  static thread_local std::mt19937_64 rng(std::random_device{}());
  static const char kAlnum[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  std::string id = with_prefix ? "call_" : "";
  for (size_t i = 0; i < len; ++i) id += kAlnum[rng() % (sizeof kAlnum - 1)];
  return id;
}

std::string new_call_id(ToolCallFormat format) {
  // Mistral's template insists on 9 alphanumeric characters when the id comes back.
  return format == ToolCallFormat::kMistral ? random_id(9, false) : random_id(24, true);
}

// `value` as a call, when it is {"name": string, <args_key>: object}.
std::optional<ToolCall> call_from(const Json& value, std::initializer_list<const char*> args_keys,
                                  ToolCallFormat format) {
  if (!value.is_object()) return std::nullopt;
  auto name = value.find("name");
  if (name == value.end() || !name->is_string()) return std::nullopt;
  for (const char* key : args_keys) {
    auto args = value.find(key);
    if (args == value.end()) continue;
    if (!args->is_object()) return std::nullopt;
    return ToolCall{new_call_id(format), name->get<std::string>(), args->dump()};
  }
  return ToolCall{new_call_id(format), name->get<std::string>(), "{}"};
}

std::optional<Json> parse_json(const std::string& text) {
  Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return std::nullopt;
  return j;
}

std::string trim(const std::string& s) {
  size_t a = s.find_first_not_of(" \t\r\n"), b = s.find_last_not_of(" \t\r\n");
  return a == std::string::npos ? "" : s.substr(a, b - a + 1);
}

std::optional<std::string> content_or_null(const std::string& s) {
  if (trim(s).empty()) return std::nullopt;
  return s;
}

const std::string kHermesOpen = "<tool_call>";
const std::string kMistralTag = "[TOOL_CALLS]";
const std::string kPythonTag = "<|python_tag|>";

ToolCallOutput parse_hermes(const std::string& text) {
  static const std::string& kOpen = kHermesOpen;
  static const std::string kClose = "</tool_call>";
  ToolCallOutput out;
  const size_t first = text.find(kOpen);
  if (first == std::string::npos) return {text, {}};
  size_t pos = first;
  while (pos != std::string::npos) {
    const size_t body = pos + kOpen.size();
    size_t end = text.find(kClose, body);
    // A last call cut short by the stop (its closing tag is often the stop string)
    // still counts when its JSON is complete.
    std::optional<Json> j = parse_json(trim(text.substr(body, end == std::string::npos ? std::string::npos : end - body)));
    std::optional<ToolCall> call = j ? call_from(*j, {"arguments", "parameters"}, ToolCallFormat::kHermes) : std::nullopt;
    if (!call) return {text, {}};
    out.calls.push_back(std::move(*call));
    if (end == std::string::npos) break;
    pos = text.find(kOpen, end + kClose.size());
  }
  out.content = content_or_null(text.substr(0, first));
  return out;
}

ToolCallOutput parse_llama3_json(const std::string& text) {
  std::string body = trim(text);
  if (body.compare(0, kPythonTag.size(), kPythonTag) == 0) body = trim(body.substr(kPythonTag.size()));
  if (body.empty() || body[0] != '{') return {text, {}};
  ToolCallOutput out;
  // One object, or several separated by ';' (Llama 3.2's parallel calls).
  size_t start = 0;
  while (start < body.size()) {
    size_t end = body.find("};", start);
    std::string piece = end == std::string::npos ? body.substr(start) : body.substr(start, end + 1 - start);
    std::optional<Json> j = parse_json(trim(piece));
    std::optional<ToolCall> call = j ? call_from(*j, {"parameters", "arguments"}, ToolCallFormat::kLlama3Json) : std::nullopt;
    if (!call) return {text, {}};
    out.calls.push_back(std::move(*call));
    if (end == std::string::npos) break;
    start = end + 2;
  }
  return out;
}

ToolCallOutput parse_mistral(const std::string& text) {
  static const std::string& kTag = kMistralTag;
  const size_t tag = text.find(kTag);
  if (tag == std::string::npos) return {text, {}};
  std::optional<Json> j = parse_json(trim(text.substr(tag + kTag.size())));
  if (!j) return {text, {}};
  ToolCallOutput out;
  const Json items = j->is_array() ? *j : Json::array({*j});
  for (const Json& item : items) {
    std::optional<ToolCall> call = call_from(item, {"arguments", "parameters"}, ToolCallFormat::kMistral);
    if (!call) return {text, {}};
    out.calls.push_back(std::move(*call));
  }
  out.content = content_or_null(text.substr(0, tag));
  return out;
}

}  // namespace

ToolCallFormat tool_call_format_from_name(const std::string& name) {
  if (name == "none" || name.empty()) return ToolCallFormat::kNone;
  if (name == "hermes") return ToolCallFormat::kHermes;
  if (name == "llama3_json") return ToolCallFormat::kLlama3Json;
  if (name == "mistral") return ToolCallFormat::kMistral;
  throw_error(strprintf("unknown tool-call parser '%s' (choose none, hermes, llama3_json or mistral)", name.c_str()));
}

ToolUse parse_tool_use(const Json& body, ToolCallFormat server_format) {
  ToolUse use;
  use.format = server_format;
  if (auto p = body.find("parallel_tool_calls"); p != body.end() && !p->is_null()) {
    if (!p->is_boolean()) bad("parallel_tool_calls", "'parallel_tool_calls' must be a boolean");
    use.parallel = p->get<bool>();
  }
  auto tools = body.find("tools");
  const bool has_tools = tools != body.end() && !tools->is_null();
  if (has_tools) use.functions = parse_functions(*tools);
  auto choice = body.find("tool_choice");
  if (choice == body.end() || choice->is_null()) {
    use.mode = has_tools && !use.functions.empty() && server_format != ToolCallFormat::kNone ? ToolChoiceMode::kAuto
                                                                                             : ToolChoiceMode::kNone;
    return use;
  }
  if (choice->is_string()) {
    const std::string c = choice->get<std::string>();
    if (c == "none") use.mode = ToolChoiceMode::kNone;
    else if (c == "auto") use.mode = ToolChoiceMode::kAuto;
    else if (c == "required") use.mode = ToolChoiceMode::kRequired;
    else bad("tool_choice", "'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", \"function\": {\"name\": ...}}, got \"" + c + "\"");
  } else if (choice->is_object()) {
    auto fn = choice->find("function");
    auto name = fn != choice->end() && fn->is_object() ? fn->find("name") : choice->end();
    if (fn == choice->end() || !fn->is_object() || name == fn->end() || !name->is_string())
      bad("tool_choice", "'tool_choice' as an object must be {\"type\": \"function\", \"function\": {\"name\": ...}}");
    use.mode = ToolChoiceMode::kNamed;
    use.named = name->get<std::string>();
  } else {
    bad("tool_choice", "'tool_choice' must be a string or an object");
  }
  if (use.mode == ToolChoiceMode::kNone) return use;
  if (use.functions.empty()) bad("tool_choice", "'tool_choice' other than \"none\" needs a non-empty 'tools' list");
  if (use.mode == ToolChoiceMode::kNamed) {
    bool found = false;
    for (const auto& f : use.functions) found = found || f.name == use.named;
    if (!found) bad("tool_choice", "'tool_choice' names function '" + use.named + "', which is not in 'tools'");
  }
  if (use.mode == ToolChoiceMode::kAuto && server_format == ToolCallFormat::kNone)
    bad("tool_choice", "'tool_choice' \"auto\" needs the server started with --tool-call-parser (hermes, llama3_json or mistral); \"required\" and a named function work without one");
  return use;
}

std::optional<Json> tool_output_schema(const ToolUse& use) {
  if (use.mode == ToolChoiceMode::kNamed) {
    for (const auto& f : use.functions)
      if (f.name == use.named) return f.parameters;
  }
  if (use.mode != ToolChoiceMode::kRequired) return std::nullopt;
  Json any_of = Json::array();
  for (const auto& f : use.functions) {
    any_of.push_back(Json{{"type", "object"},
                          {"properties", {{"name", {{"type", "string"}, {"const", f.name}}}, {"parameters", f.parameters}}},
                          {"required", {"name", "parameters"}},
                          {"additionalProperties", false}});
  }
  Json schema = {{"type", "array"}, {"minItems", 1}, {"items", {{"anyOf", any_of}}}};
  if (!use.parallel) schema["maxItems"] = 1;
  return schema;
}

namespace {

ToolCallOutput extract_all(const ToolUse& use, const std::string& text);

}  // namespace

ToolCallOutput extract_tool_calls(const ToolUse& use, const std::string& text) {
  ToolCallOutput out = extract_all(use, text);
  if (!use.parallel && out.calls.size() > 1) out.calls.resize(1);  // the model may call one function only
  return out;
}

namespace {

ToolCallOutput extract_all(const ToolUse& use, const std::string& text) {
  switch (use.mode) {
    case ToolChoiceMode::kNone: return {text, {}};
    case ToolChoiceMode::kNamed: {
      std::optional<Json> j = parse_json(text);
      if (!j || !j->is_object()) return {text, {}};  // cut short by max_tokens
      return {std::nullopt, {ToolCall{new_call_id(use.format), use.named, j->dump()}}};
    }
    case ToolChoiceMode::kRequired: {
      std::optional<Json> j = parse_json(text);
      if (!j || !j->is_array()) return {text, {}};
      ToolCallOutput out;
      for (const Json& item : *j) {
        std::optional<ToolCall> call = call_from(item, {"parameters"}, use.format);
        if (!call) return {text, {}};
        out.calls.push_back(std::move(*call));
      }
      return out;
    }
    case ToolChoiceMode::kAuto: break;
  }
  switch (use.format) {
    case ToolCallFormat::kHermes: return parse_hermes(text);
    case ToolCallFormat::kLlama3Json: return parse_llama3_json(text);
    case ToolCallFormat::kMistral: return parse_mistral(text);
    case ToolCallFormat::kNone: break;
  }
  return {text, {}};
}

}  // namespace

Json tool_calls_json(const std::vector<ToolCall>& calls, bool with_index) {
  Json out = Json::array();
  for (size_t i = 0; i < calls.size(); ++i) {
    Json c = Json::object();
    if (with_index) c["index"] = i;  // first, as OpenAI streams it
    c["id"] = calls[i].id;
    c["type"] = "function";
    c["function"] = {{"name", calls[i].name}, {"arguments", calls[i].arguments}};
    out.push_back(std::move(c));
  }
  return out;
}

std::vector<Json> tool_call_stream_deltas(const std::vector<ToolCall>& calls) {
  std::vector<Json> out;
  for (size_t i = 0; i < calls.size(); ++i) {
    out.push_back(Json::array({{{"index", i},
                                {"id", calls[i].id},
                                {"type", "function"},
                                {"function", {{"name", calls[i].name}, {"arguments", ""}}}}}));
    out.push_back(Json::array({{{"index", i}, {"function", {{"arguments", calls[i].arguments}}}}}));
  }
  return out;
}

namespace {

bool is_blank(std::string_view s) { return s.find_first_not_of(" \t\r\n") == std::string_view::npos; }

}  // namespace

std::string ToolCallStream::feed(std::string_view content) {
  if (use_.mode == ToolChoiceMode::kNone) return std::string(content);
  if (in_calls_ || use_.forced()) {  // a forced call's output is the call: all of it is held
    in_calls_ = true;
    held_.append(content);
    return "";
  }
  return feed_free_text(content);
}

std::string ToolCallStream::feed_free_text(std::string_view content) {
  held_.append(content);
  std::string release;
  if (use_.format == ToolCallFormat::kLlama3Json) {
    // A call is the whole output: decided by its first non-blank text.
    if (!decided_free_) {
      const std::string_view rest = std::string_view(held_).substr(std::min(held_.size(), held_.find_first_not_of(" \t\r\n")));
      if (rest.empty()) return "";
      if (rest[0] == '{' || rest.substr(0, kPythonTag.size()) == kPythonTag) {
        in_calls_ = true;
        return "";
      }
      if (rest.size() < kPythonTag.size() && std::string_view(kPythonTag).substr(0, rest.size()) == rest) return "";
      decided_free_ = true;
    }
    release.swap(held_);
  } else {
    const std::string& marker = use_.format == ToolCallFormat::kHermes ? kHermesOpen : kMistralTag;
    const size_t at = held_.find(marker);
    const size_t cut = at != std::string::npos ? at : held_.size() - partial_marker_suffix(held_, marker);
    release = held_.substr(0, cut);
    held_.erase(0, cut);
    in_calls_ = at != std::string::npos;
  }
  if (!sent_text_) {
    blank_ += release;
    if (is_blank(blank_)) return "";
    release.swap(blank_);
    blank_.clear();
  }
  sent_text_ = sent_text_ || !release.empty();
  return release;
}

ToolCallOutput ToolCallStream::finish() {
  ToolCallOutput out;
  if (in_calls_) {
    out = extract_tool_calls(use_, held_);
    if (!out.calls.empty()) {
      held_.clear();
      blank_.clear();  // blank text before calls is no content
      return out;
    }
  }
  std::string rest = blank_ + held_;
  held_.clear();
  blank_.clear();
  return {rest.empty() ? std::nullopt : std::optional<std::string>(rest), {}};
}

}  // namespace distllm::serve::api
