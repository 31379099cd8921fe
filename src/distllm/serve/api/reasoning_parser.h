// Reasoning models think before they answer: `<think> ... </think>` then the
// answer. `--reasoning-parser` splits a chat choice's text into vLLM's
// `reasoning_content` (the thinking) and `content` (the answer):
//
//   qwen3        Qwen3: thinking only when the output starts with <think>
//                (whitespace aside); otherwise (enable_thinking false, whose
//                prompt already closed an empty think block) everything is content.
//   deepseek_r1  DeepSeek-R1 and its distills: the output starts inside the
//                thinking, with or without <think> (newer templates end the prompt
//                with it), up to </think>; with no </think> everything is thinking.
//
// The tags are text and arrive split across tokens and stream chunks in any way,
// so the parser is a state machine over the text that holds back a possible start
// of a tag (as the detokenizer holds back a possible stop string) until the next
// piece decides. Fed in pieces or whole, the result is the same bytes: streamed
// and non-streamed responses agree exactly.
#pragma once

#include <string>
#include <string_view>

namespace distllm::serve::api {

enum class ReasoningFormat { kNone, kQwen3, kDeepSeekR1 };

// "none" (or empty), "qwen3", "deepseek_r1". Throws distllm::Error naming the choices.
ReasoningFormat reasoning_format_from_name(const std::string& name);

struct ReasoningSplit {
  std::string reasoning;
  std::string content;
};

class ReasoningParser {
 public:
  explicit ReasoningParser(ReasoningFormat format) : format_(format) {}

  // The text that `piece` releases (it may release nothing while a tag could begin).
  ReasoningSplit feed(std::string_view piece);
  // The choice ended: whatever is still held, where it belongs.
  ReasoningSplit finish();

 private:
  enum class State { kStart, kReasoning, kContent };
  void scan(ReasoningSplit& out);

  ReasoningFormat format_;
  State state_ = State::kStart;
  std::string held_;  // undecided text: leading text at the start, or a partial </think>
};

// The whole text at once (feed + finish).
ReasoningSplit split_reasoning(ReasoningFormat format, std::string_view text);

}  // namespace distllm::serve::api
