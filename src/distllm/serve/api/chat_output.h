// What a chat choice's generated text becomes in the response: the thinking
// (`reasoning_content`, with --reasoning-parser), the answer (`content`) and the
// tool calls (with tools), for a streamed response piece by piece and for a whole
// one at once — by the same code, so both say the same bytes.
//
//   text -> ReasoningParser -> reasoning_content
//                           -> content -> ToolCallStream -> content, tool_calls
//
// Tool calls are looked for in the content only, never in the thinking.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "distllm/serve/api/reasoning_parser.h"
#include "distllm/serve/api/tool_calls.h"

namespace distllm::serve::api {

class ChatChoiceOutput {
 public:
  // `tools` must outlive this.
  ChatChoiceOutput(ReasoningFormat reasoning, const ToolUse& tools);

  // What `text` (the next generated piece) releases now.
  ReasoningSplit feed(std::string_view text);
  // The choice ended: the rest of the text; the calls are then in calls().
  ReasoningSplit finish();

  const std::vector<ToolCall>& calls() const { return calls_; }
  // The whole message, after finish(): role, content (null when there is none
  // beside calls or thinking), reasoning_content (with a reasoning parser; null
  // without thinking) and tool_calls (when there are calls).
  Json message() const;

 private:
  ReasoningSplit route(ReasoningSplit from_reasoning);

  bool reasoning_on_;
  ReasoningParser reasoning_;
  ToolCallStream tools_;
  std::string all_reasoning_, all_content_;
  std::vector<ToolCall> calls_;
};

}  // namespace distllm::serve::api
