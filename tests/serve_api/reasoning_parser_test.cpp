// --reasoning-parser: what each format calls thinking and answer, and that the
// streaming state machine gives the same bytes however the text is cut (every cut
// into two pieces, every cut into three, byte by byte), so tags split across tokens
// and chunks are found exactly and a half-seen tag never leaks.
#include <gtest/gtest.h>

#include "distllm/base/error.h"
#include "distllm/serve/api/chat_output.h"
#include "distllm/serve/api/reasoning_parser.h"

namespace distllm::serve::api {
namespace {

ReasoningSplit stream(ReasoningFormat f, const std::vector<std::string_view>& pieces) {
  ReasoningParser p(f);
  ReasoningSplit all;
  for (auto piece : pieces) {
    ReasoningSplit s = p.feed(piece);
    all.reasoning += s.reasoning;
    all.content += s.content;
  }
  ReasoningSplit s = p.finish();
  all.reasoning += s.reasoning;
  all.content += s.content;
  return all;
}

// Every way of cutting `text` into two and three pieces, and byte by byte, gives
// what the whole text gives.
void expect_split_invariant(ReasoningFormat f, const std::string& text) {
  const ReasoningSplit whole = split_reasoning(f, text);
  const std::string_view t(text);
  for (size_t i = 0; i <= t.size(); ++i) {
    ReasoningSplit two = stream(f, {t.substr(0, i), t.substr(i)});
    ASSERT_EQ(two.reasoning, whole.reasoning) << text << " cut at " << i;
    ASSERT_EQ(two.content, whole.content) << text << " cut at " << i;
    for (size_t j = i; j <= t.size(); ++j) {
      ReasoningSplit three = stream(f, {t.substr(0, i), t.substr(i, j - i), t.substr(j)});
      ASSERT_EQ(three.reasoning, whole.reasoning) << text << " cut at " << i << ", " << j;
      ASSERT_EQ(three.content, whole.content) << text << " cut at " << i << ", " << j;
    }
  }
  std::vector<std::string_view> bytes;
  for (size_t i = 0; i < t.size(); ++i) bytes.push_back(t.substr(i, 1));
  ReasoningSplit each = stream(f, bytes);
  EXPECT_EQ(each.reasoning, whole.reasoning) << text;
  EXPECT_EQ(each.content, whole.content) << text;
}

const std::vector<std::string> kTexts = {
    "<think>\nStep one.\n</think>\n\nThe answer.",
    "\n <think>a</think>b",
    "<think></think>",
    "<think>unfinished thought",
    "<think>partial close </thin",
    "<thi",
    "No thinking here.",
    "   ",
    "",
    "Reasoning without an opening tag.</think>\nAnswer <think>not again</think>.",
    "<think>a < b and </ thing </think>done</think>",
    "<<think>>x</think>",
    "x<think>late</think>y",
    "</think>only the answer",
};

TEST(ReasoningParser, Qwen3ThinksOnlyWhenTheOutputOpensWithThink) {
  ReasoningSplit s = split_reasoning(ReasoningFormat::kQwen3, "<think>\nStep one.\n</think>\n\nThe answer.");
  EXPECT_EQ(s.reasoning, "\nStep one.\n");
  EXPECT_EQ(s.content, "\n\nThe answer.");
  // enable_thinking false: the prompt closed an empty think block; the output is the answer.
  s = split_reasoning(ReasoningFormat::kQwen3, "The answer.");
  EXPECT_EQ(s.reasoning, "");
  EXPECT_EQ(s.content, "The answer.");
  // A tag later in the text is text.
  s = split_reasoning(ReasoningFormat::kQwen3, "x<think>late</think>y");
  EXPECT_EQ(s.content, "x<think>late</think>y");
  // Cut short by max_tokens inside the thinking: all of it is thinking, a partial
  // closing tag included.
  s = split_reasoning(ReasoningFormat::kQwen3, "<think>partial close </thin");
  EXPECT_EQ(s.reasoning, "partial close </thin");
  EXPECT_EQ(s.content, "");
  s = split_reasoning(ReasoningFormat::kQwen3, "<thi");
  EXPECT_EQ(s.content, "<thi");
  for (const auto& t : kTexts) expect_split_invariant(ReasoningFormat::kQwen3, t);
}

TEST(ReasoningParser, DeepSeekR1StartsInsideTheThinking) {
  ReasoningSplit s = split_reasoning(ReasoningFormat::kDeepSeekR1, "Reasoning.</think>\n\nAnswer.");
  EXPECT_EQ(s.reasoning, "Reasoning.");
  EXPECT_EQ(s.content, "\n\nAnswer.");
  s = split_reasoning(ReasoningFormat::kDeepSeekR1, "<think>\nR.\n</think>A");
  EXPECT_EQ(s.reasoning, "\nR.\n");
  EXPECT_EQ(s.content, "A");
  // No </think>: everything is thinking (cut short, or the model never answered).
  s = split_reasoning(ReasoningFormat::kDeepSeekR1, "still thinking");
  EXPECT_EQ(s.reasoning, "still thinking");
  EXPECT_EQ(s.content, "");
  // Only the first </think> ends the thinking.
  s = split_reasoning(ReasoningFormat::kDeepSeekR1, "a</think>b</think>c");
  EXPECT_EQ(s.reasoning, "a");
  EXPECT_EQ(s.content, "b</think>c");
  for (const auto& t : kTexts) expect_split_invariant(ReasoningFormat::kDeepSeekR1, t);
}

TEST(ReasoningParser, NothingHeldOnceDecided) {
  ReasoningParser p(ReasoningFormat::kQwen3);
  EXPECT_EQ(p.feed("<thi").reasoning, "");
  ReasoningSplit s = p.feed("nk>abc</");
  EXPECT_EQ(s.reasoning, "abc") << "'</' may start </think>: held";
  s = p.feed("b>");
  EXPECT_EQ(s.reasoning, "</b>");
  s = p.feed("</think>ans");
  EXPECT_EQ(s.content, "ans");
  EXPECT_EQ(p.feed("<think>").content, "<think>") << "after the answer starts, tags are text";
  EXPECT_EQ(split_reasoning(ReasoningFormat::kNone, "<think>x</think>").content, "<think>x</think>");
  EXPECT_EQ(reasoning_format_from_name("deepseek_r1"), ReasoningFormat::kDeepSeekR1);
  EXPECT_EQ(reasoning_format_from_name("none"), ReasoningFormat::kNone);
  EXPECT_THROW(reasoning_format_from_name("granite"), Error);
}

// Thinking, answer and calls together: calls are found in the answer only.
TEST(ReasoningParser, ToolCallsComeFromTheContentOnly) {
  ToolUse use;
  use.mode = ToolChoiceMode::kAuto;
  use.format = ToolCallFormat::kHermes;
  use.functions = {{"get_time", Json{{"type", "object"}}}};
  const std::string text =
      "<think>Maybe <tool_call>{\"name\": \"get_time\", \"arguments\": {}}</tool_call>?</think>\n\nChecking."
      "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"city\": \"Lima\"}}\n</tool_call>";
  for (size_t cut = 0; cut <= text.size(); ++cut) {
    ChatChoiceOutput out(ReasoningFormat::kQwen3, use);
    ReasoningSplit a = out.feed(std::string_view(text).substr(0, cut));
    ReasoningSplit b = out.feed(std::string_view(text).substr(cut));
    ReasoningSplit c = out.finish();
    ASSERT_EQ(a.reasoning + b.reasoning + c.reasoning, "Maybe <tool_call>{\"name\": \"get_time\", \"arguments\": {}}</tool_call>?");
    ASSERT_EQ(a.content + b.content + c.content, "\n\nChecking.");
    ASSERT_EQ(out.calls().size(), 1u) << cut;
    EXPECT_EQ(out.calls()[0].arguments, R"({"city":"Lima"})");
    Json m = out.message();
    EXPECT_EQ(m["content"], "\n\nChecking.");
    EXPECT_EQ(m["tool_calls"][0]["function"]["name"], "get_time");
  }
  // Only thinking: content is null, as vLLM says.
  ChatChoiceOutput out(ReasoningFormat::kDeepSeekR1, use);
  out.feed("no answer yet");
  out.finish();
  EXPECT_TRUE(out.message()["content"].is_null());
  EXPECT_EQ(out.message()["reasoning_content"], "no answer yet");
}

}  // namespace
}  // namespace distllm::serve::api
