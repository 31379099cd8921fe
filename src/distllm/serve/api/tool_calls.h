// Tool calls on the chat API, as OpenAI defines them: the request's `tools` and
// `tool_choice`, the constraint on the output when a call is forced, and the
// parsers that find calls in free text when the model may choose.
//
//   tool_choice  | what the model generates                  | how calls are found
//   -------------+-------------------------------------------+-----------------------------
//   "none"       | text (tools still reach the chat template)| never
//   "auto"       | text in the model's own tool-call format  | the server's --tool-call-parser
//   "required"   | a JSON array [{"name", "parameters"}, ...] | constrained by a JSON schema
//   {function}   | the named function's arguments object     | constrained by its schema
//
// The forced forms follow vLLM: the output is held to a JSON schema built from the
// functions' `parameters` (tool_output_schema), so it always parses. Without
// `tool_choice`, a request with tools gets "auto" when the server has a parser and
// "none" otherwise (tools are then only shown to the model through its template).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace distllm::serve::api {

using Json = nlohmann::ordered_json;

struct ToolFunction {
  std::string name;
  Json parameters;  // a JSON Schema object; {"type": "object"} when the request gives none
};

enum class ToolChoiceMode { kNone, kAuto, kRequired, kNamed };

// How the model writes tool calls in free text ("auto").
enum class ToolCallFormat {
  kNone,        // the server finds no calls in free text
  kHermes,      // <tool_call>{"name": ..., "arguments": {...}}</tool_call> (Hermes, Qwen 2.5/3)
  kLlama3Json,  // {"name": ..., "parameters": {...}} (Llama 3.1-3.3), ';'-separated
  kMistral,     // [TOOL_CALLS] [{"name": ..., "arguments": {...}}, ...]
};
// "none", "hermes", "llama3_json", "mistral" (vLLM's names). Throws distllm::Error.
ToolCallFormat tool_call_format_from_name(const std::string& name);

struct ToolUse {
  std::vector<ToolFunction> functions;
  ToolChoiceMode mode = ToolChoiceMode::kNone;
  std::string named;  // with kNamed
  ToolCallFormat format = ToolCallFormat::kNone;
  bool parallel = true;  // OpenAI's parallel_tool_calls: false means at most one call

  bool active() const { return mode != ToolChoiceMode::kNone; }
  bool forced() const { return mode == ToolChoiceMode::kRequired || mode == ToolChoiceMode::kNamed; }
};

// Reads `tools` and `tool_choice` from a chat request body. Throws ApiError (400)
// naming the field: malformed tools, a choice naming no given function, "auto"
// when the server has no parser, a choice without tools.
ToolUse parse_tool_use(const Json& body, ToolCallFormat server_format);

// The JSON schema the output must follow when a call is forced (required or
// named); nullopt otherwise.
std::optional<Json> tool_output_schema(const ToolUse& use);

struct ToolCall {
  std::string id;
  std::string name;
  std::string arguments;  // JSON text of an object, compact
};

struct ToolCallOutput {
  std::optional<std::string> content;  // nullopt: null in the response
  std::vector<ToolCall> calls;
};

// Splits a finished choice's text into content and tool calls. Text that does not
// hold well-formed calls stays content with no calls (as vLLM's parsers do).
ToolCallOutput extract_tool_calls(const ToolUse& use, const std::string& text);

// OpenAI's `tool_calls` array; with `with_index`, each entry carries its index (the
// streaming delta form).
Json tool_calls_json(const std::vector<ToolCall>& calls, bool with_index);

// The streamed form, as OpenAI sends it: per call, a delta naming it (index, id,
// type, function.name, empty arguments) and one carrying its arguments; each entry
// is a `tool_calls` array for one chunk's delta.
std::vector<Json> tool_call_stream_deltas(const std::vector<ToolCall>& calls);

// A choice's content as it streams. Content before the format's call marker
// (<tool_call>, [TOOL_CALLS], or for llama3_json an output that opens with { or
// <|python_tag|>) goes out as it comes, a possible start of the marker held back;
// from the marker on, text is held until the choice ends and then parsed as
// extract_tool_calls parses it. Blank text before the marker is held too, since it
// is dropped when calls follow. So the content sent plus finish()'s equals
// extract_tool_calls' content for the whole text, and the calls are the same:
// streamed and non-streamed responses agree. `use` must outlive the stream.
class ToolCallStream {
 public:
  explicit ToolCallStream(const ToolUse& use) : use_(use) {}

  // Content that can be sent now.
  std::string feed(std::string_view content);
  // The choice ended: the content still to send (nullopt: none, and none was sent)
  // and the calls.
  ToolCallOutput finish();

 private:
  std::string feed_free_text(std::string_view content);

  const ToolUse& use_;
  std::string held_;           // undecided: a partial marker, or everything from the marker on
  std::string blank_;          // blank text not sent while nothing else was
  bool in_calls_ = false;      // the marker was seen: everything is held
  bool sent_text_ = false;     // non-blank content went out
  bool decided_free_ = false;  // llama3_json: the output did not open with a call
};

}  // namespace distllm::serve::api
