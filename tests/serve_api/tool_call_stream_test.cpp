// Streamed tool calls: for every format, the content sent while the text streams
// plus what finish() returns equals extract_tool_calls on the whole text, and the
// calls are the same, however the text is cut (every two-piece cut, byte by byte) —
// markers split across chunks included. And content before a call streams at once.
#include <gtest/gtest.h>

#include "distllm/serve/api/tool_calls.h"

namespace distllm::serve::api {
namespace {

ToolUse use_of(ToolCallFormat format, ToolChoiceMode mode = ToolChoiceMode::kAuto) {
  ToolUse use;
  use.mode = mode;
  use.format = format;
  use.functions = {{"get_weather", Json{{"type", "object"}}}, {"get_time", Json{{"type", "object"}}}};
  if (mode == ToolChoiceMode::kNamed) use.named = "get_weather";
  return use;
}

struct Streamed {
  std::string content;
  std::vector<std::string> sent;  // what each feed released
  ToolCallOutput final;
};

Streamed stream(const ToolUse& use, const std::vector<std::string_view>& pieces) {
  ToolCallStream s(use);
  Streamed out;
  for (auto p : pieces) {
    out.sent.push_back(s.feed(p));
    out.content += out.sent.back();
  }
  out.final = s.finish();
  out.content += out.final.content.value_or("");
  return out;
}

void expect_same(const ToolUse& use, const std::string& text) {
  const ToolCallOutput whole = extract_tool_calls(use, text);
  auto check = [&](const Streamed& s, const std::string& how) {
    ASSERT_EQ(s.content, whole.content.value_or("")) << text << " " << how;
    ASSERT_EQ(s.final.calls.size(), whole.calls.size()) << text << " " << how;
    for (size_t i = 0; i < whole.calls.size(); ++i) {
      EXPECT_EQ(s.final.calls[i].name, whole.calls[i].name);
      EXPECT_EQ(s.final.calls[i].arguments, whole.calls[i].arguments);
    }
    // Content that was sent is never content the whole text would have turned into calls.
    if (!whole.content) {
      EXPECT_EQ(s.content, "") << text << " " << how;
    }
  };
  const std::string_view t(text);
  for (size_t i = 0; i <= t.size(); ++i) check(stream(use, {t.substr(0, i), t.substr(i)}), "cut at " + std::to_string(i));
  std::vector<std::string_view> bytes;
  for (size_t i = 0; i < t.size(); ++i) bytes.push_back(t.substr(i, 1));
  check(stream(use, bytes), "byte by byte");
}

TEST(ToolCallStream, HermesAgreesWithTheWholeText) {
  const ToolUse use = use_of(ToolCallFormat::kHermes);
  for (const char* text : {
           "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n"
           "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>",
           "\n\n<tool_call>{\"name\": \"get_time\", \"arguments\": {}}</tool_call>",
           "<tool_call>{\"name\": \"get_time\", \"arguments\": {</tool_call>",
           "Just text with < and <tool and <tool_cal.",
           "  ",
           "",
           "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"city\": \"Oslo\"}}\n",
       })
    expect_same(use, text);
}

TEST(ToolCallStream, Llama3JsonAndMistralAgreeWithTheWholeText) {
  const ToolUse llama = use_of(ToolCallFormat::kLlama3Json);
  for (const char* text : {
           "<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Lima\"}}",
           " {\"name\": \"get_time\", \"parameters\": {}}; {\"name\": \"get_weather\", \"parameters\": {\"city\": \"Kyiv\"}}",
           "The weather is {unknown}.",
           "<|python_t",
           "{\"name\": \"get_time\", \"parameters\": ",
           "<|pyth and then text",
       })
    expect_same(llama, text);
  const ToolUse mistral = use_of(ToolCallFormat::kMistral);
  for (const char* text : {
           "[TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Bern\"}}, {\"name\": \"get_time\", \"arguments\": {}}]",
           "Sure. [TOOL_CALLS][{\"name\": \"get_time\", \"arguments\": {}}]",
           "No tools [TOOL needed].",
           "[TOOL_CALLS] [{\"name\": ",
       })
    expect_same(mistral, text);
  // Forced calls (named, required) hold everything: the output is the call.
  expect_same(use_of(ToolCallFormat::kNone, ToolChoiceMode::kNamed), "{\"city\": \"Oslo\"}");
  expect_same(use_of(ToolCallFormat::kNone, ToolChoiceMode::kRequired),
              "[{\"name\": \"get_time\", \"parameters\": {}}, {\"name\": \"get_weather\", \"parameters\": {}}]");
  expect_same(use_of(ToolCallFormat::kNone, ToolChoiceMode::kNamed), "{\"city\": \"Os");
}

TEST(ToolCallStream, ContentBeforeACallStreamsAtOnce) {
  ToolCallStream s(use_of(ToolCallFormat::kHermes));
  EXPECT_EQ(s.feed("\n"), "") << "blank text waits: it is dropped if a call follows";
  EXPECT_EQ(s.feed("Let me"), "\nLet me");
  EXPECT_EQ(s.feed(" check <tool"), " check ") << "a possible marker start is held";
  EXPECT_EQ(s.feed("_call>{\"name\": \"get_time\", \"arguments\": {}}"), "");
  EXPECT_EQ(s.feed("</tool_call> trailing"), "");
  ToolCallOutput out = s.finish();
  EXPECT_FALSE(out.content.has_value());
  ASSERT_EQ(out.calls.size(), 1u);
  EXPECT_EQ(out.calls[0].name, "get_time");

  ToolCallStream plain(use_of(ToolCallFormat::kHermes));
  EXPECT_EQ(plain.feed("Hello <b>"), "Hello <b>");
  EXPECT_FALSE(plain.finish().content.has_value());

  ToolCallStream none(use_of(ToolCallFormat::kHermes, ToolChoiceMode::kNone));
  EXPECT_EQ(none.feed("<tool_call>{}"), "<tool_call>{}") << "tool_choice none: all text is content";
}

TEST(ToolCallStream, StreamedDeltasNameThenArguments) {
  std::vector<ToolCall> calls = {{"call_1", "f", "{}"}, {"call_2", "g", R"({"a":1})"}};
  std::vector<Json> d = tool_call_stream_deltas(calls);
  ASSERT_EQ(d.size(), 4u);
  EXPECT_EQ(d[2][0], Json::parse(R"({"index": 1, "id": "call_2", "type": "function", "function": {"name": "g", "arguments": ""}})"));
  EXPECT_EQ(d[3][0], Json::parse(R"({"index": 1, "function": {"arguments": "{\"a\":1}"}})"));
}

}  // namespace
}  // namespace distllm::serve::api
