// Tool calls: request validation, the forced-call schema, and the free-text
// parsers of the three formats, on outputs written as each model family writes them.
#include <gtest/gtest.h>

#include "distllm/base/error.h"
#include "distllm/serve/api/openai_protocol.h"
#include "distllm/serve/api/tool_calls.h"

namespace distllm::serve::api {
namespace {

Json weather_tools() {
  return Json::parse(R"([
    {"type": "function", "function": {"name": "get_weather", "description": "Weather for a city",
      "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
    {"type": "function", "function": {"name": "get_time"}}])");
}

std::string error_of(const Json& body, ToolCallFormat format = ToolCallFormat::kHermes) {
  try {
    parse_tool_use(body, format);
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), 400);
    return e.what();
  }
  return "";
}

TEST(ToolCalls, ChoiceDefaultsAndValidation) {
  Json body = {{"tools", weather_tools()}};
  EXPECT_EQ(parse_tool_use(body, ToolCallFormat::kHermes).mode, ToolChoiceMode::kAuto);
  EXPECT_EQ(parse_tool_use(body, ToolCallFormat::kNone).mode, ToolChoiceMode::kNone) << "no parser: tools only reach the template";
  body["tool_choice"] = "required";
  ToolUse use = parse_tool_use(body, ToolCallFormat::kNone);
  EXPECT_EQ(use.mode, ToolChoiceMode::kRequired);
  ASSERT_EQ(use.functions.size(), 2u);
  EXPECT_EQ(use.functions[1].parameters, Json({{"type", "object"}}));
  body["tool_choice"] = {{"type", "function"}, {"function", {{"name", "get_time"}}}};
  use = parse_tool_use(body, ToolCallFormat::kNone);
  EXPECT_EQ(use.mode, ToolChoiceMode::kNamed);
  EXPECT_EQ(use.named, "get_time");

  EXPECT_NE(error_of({{"tools", weather_tools()}, {"tool_choice", "auto"}}, ToolCallFormat::kNone).find("--tool-call-parser"), std::string::npos);
  EXPECT_NE(error_of({{"tools", weather_tools()}, {"tool_choice", "sometimes"}}).find("'tool_choice' must be"), std::string::npos);
  EXPECT_NE(error_of({{"tools", weather_tools()}, {"tool_choice", {{"type", "function"}, {"function", {{"name", "nope"}}}}}}).find("not in 'tools'"), std::string::npos);
  EXPECT_NE(error_of({{"tool_choice", "required"}}).find("needs a non-empty 'tools'"), std::string::npos);
  EXPECT_NE(error_of({{"tools", 3}}).find("'tools' must be an array"), std::string::npos);
  EXPECT_NE(error_of({{"tools", Json::parse(R"([{"type": "retrieval"}])")}}).find("tools[0].type"), std::string::npos);
  EXPECT_NE(error_of({{"tools", Json::parse(R"([{"type": "function", "function": {"name": "a b"}}])")}}).find("tools[0].function.name"), std::string::npos);
  EXPECT_NE(error_of({{"tools", Json::parse(R"([{"type": "function", "function": {"name": "f", "parameters": 1}}])")}}).find("parameters"), std::string::npos);
  Json twice = weather_tools();
  twice[1]["function"]["name"] = "get_weather";
  EXPECT_NE(error_of({{"tools", twice}}).find("defined twice"), std::string::npos);
}

TEST(ToolCalls, ForcedCallsHaveAJsonSchema) {
  ToolUse use = parse_tool_use({{"tools", weather_tools()}, {"tool_choice", {{"type", "function"}, {"function", {{"name", "get_weather"}}}}}}, ToolCallFormat::kNone);
  EXPECT_EQ(*tool_output_schema(use), weather_tools()[0]["function"]["parameters"]);
  use = parse_tool_use({{"tools", weather_tools()}, {"tool_choice", "required"}}, ToolCallFormat::kNone);
  Json schema = *tool_output_schema(use);
  EXPECT_EQ(schema["type"], "array");
  EXPECT_EQ(schema["minItems"], 1);
  ASSERT_EQ(schema["items"]["anyOf"].size(), 2u);
  EXPECT_EQ(schema["items"]["anyOf"][1]["properties"]["name"]["const"], "get_time");
  EXPECT_FALSE(schema.contains("maxItems"));
  use = parse_tool_use({{"tools", weather_tools()}, {"tool_choice", "required"}, {"parallel_tool_calls", false}}, ToolCallFormat::kNone);
  EXPECT_EQ((*tool_output_schema(use))["maxItems"], 1);
  EXPECT_EQ(extract_tool_calls(use, R"([{"name": "get_time", "parameters": {}}, {"name": "get_time", "parameters": {}}])").calls.size(), 1u);
  EXPECT_NE(error_of({{"tools", weather_tools()}, {"parallel_tool_calls", "no"}}).find("parallel_tool_calls"), std::string::npos);
  use.mode = ToolChoiceMode::kAuto;
  EXPECT_FALSE(tool_output_schema(use).has_value());
}

TEST(ToolCalls, ForcedOutputsBecomeCalls) {
  ToolUse named = parse_tool_use({{"tools", weather_tools()}, {"tool_choice", {{"type", "function"}, {"function", {{"name", "get_weather"}}}}}}, ToolCallFormat::kNone);
  ToolCallOutput out = extract_tool_calls(named, R"({ "city" : "Oslo" })");
  EXPECT_FALSE(out.content.has_value());
  ASSERT_EQ(out.calls.size(), 1u);
  EXPECT_EQ(out.calls[0].name, "get_weather");
  EXPECT_EQ(out.calls[0].arguments, R"({"city":"Oslo"})");
  EXPECT_EQ(out.calls[0].id.rfind("call_", 0), 0u);
  // Cut short by max_tokens: the text stays content.
  out = extract_tool_calls(named, R"({"city": "Os)");
  EXPECT_TRUE(out.calls.empty());
  EXPECT_EQ(*out.content, R"({"city": "Os)");
  ToolUse required = parse_tool_use({{"tools", weather_tools()}, {"tool_choice", "required"}}, ToolCallFormat::kNone);
  out = extract_tool_calls(required, R"([{"name": "get_time", "parameters": {}}, {"name": "get_weather", "parameters": {"city": "Rome"}}])");
  ASSERT_EQ(out.calls.size(), 2u);
  EXPECT_EQ(out.calls[1].arguments, R"({"city":"Rome"})");
  EXPECT_NE(out.calls[0].id, out.calls[1].id);
}

ToolUse auto_use(ToolCallFormat format) { return parse_tool_use({{"tools", weather_tools()}}, format); }

TEST(ToolCalls, HermesFormat) {
  ToolCallOutput out = extract_tool_calls(auto_use(ToolCallFormat::kHermes),
      "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n"
      "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>");
  EXPECT_EQ(*out.content, "Let me check.\n");
  ASSERT_EQ(out.calls.size(), 2u);
  EXPECT_EQ(out.calls[0].name, "get_weather");
  EXPECT_EQ(out.calls[0].arguments, R"({"city":"Paris"})");
  // The closing tag of the last call may be the stop string that ended the text.
  out = extract_tool_calls(auto_use(ToolCallFormat::kHermes), "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"city\": \"Oslo\"}}\n");
  ASSERT_EQ(out.calls.size(), 1u);
  EXPECT_FALSE(out.content.has_value());
  // Malformed JSON or plain text: all content, no calls.
  for (const char* text : {"<tool_call>{\"name\": \"get_time\", \"arguments\": {</tool_call>", "Just text.", "<tool_call>[1]</tool_call>"}) {
    out = extract_tool_calls(auto_use(ToolCallFormat::kHermes), text);
    EXPECT_TRUE(out.calls.empty()) << text;
    EXPECT_EQ(*out.content, text);
  }
}

TEST(ToolCalls, Llama3JsonFormat) {
  ToolCallOutput out = extract_tool_calls(auto_use(ToolCallFormat::kLlama3Json),
                                          "<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Lima\"}}");
  ASSERT_EQ(out.calls.size(), 1u);
  EXPECT_EQ(out.calls[0].arguments, R"({"city":"Lima"})");
  EXPECT_FALSE(out.content.has_value());
  out = extract_tool_calls(auto_use(ToolCallFormat::kLlama3Json),
                           "{\"name\": \"get_time\", \"parameters\": {}}; {\"name\": \"get_weather\", \"parameters\": {\"city\": \"Kyiv\"}}");
  ASSERT_EQ(out.calls.size(), 2u);
  EXPECT_EQ(out.calls[1].name, "get_weather");
  out = extract_tool_calls(auto_use(ToolCallFormat::kLlama3Json), "The weather is {unknown}.");
  EXPECT_TRUE(out.calls.empty());
}

TEST(ToolCalls, MistralFormat) {
  ToolCallOutput out = extract_tool_calls(auto_use(ToolCallFormat::kMistral),
      "[TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Bern\"}}, {\"name\": \"get_time\", \"arguments\": {}}]");
  ASSERT_EQ(out.calls.size(), 2u);
  EXPECT_EQ(out.calls[0].id.size(), 9u) << "Mistral's template wants 9-character ids back";
  EXPECT_FALSE(out.content.has_value());
  out = extract_tool_calls(auto_use(ToolCallFormat::kMistral), "No tools needed.");
  EXPECT_TRUE(out.calls.empty());
  EXPECT_THROW(tool_call_format_from_name("pythonic"), Error);
}

TEST(ToolCalls, JsonShapes) {
  std::vector<ToolCall> calls = {{"call_1", "f", "{}"}, {"call_2", "g", R"({"a":1})"}};
  Json j = tool_calls_json(calls, false);
  EXPECT_EQ(j[1], Json::parse(R"({"id": "call_2", "type": "function", "function": {"name": "g", "arguments": "{\"a\":1}"}})"));
  Json d = tool_calls_json(calls, true);
  EXPECT_EQ(d[1]["index"], 1);
  EXPECT_EQ(d[1].begin().key(), "index");
}

}  // namespace
}  // namespace distllm::serve::api
