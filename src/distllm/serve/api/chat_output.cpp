#include "distllm/serve/api/chat_output.h"

namespace distllm::serve::api {

ChatChoiceOutput::ChatChoiceOutput(ReasoningFormat reasoning, const ToolUse& tools)
    : reasoning_on_(reasoning != ReasoningFormat::kNone), reasoning_(reasoning), tools_(tools) {}

ReasoningSplit ChatChoiceOutput::route(ReasoningSplit split) {
  split.content = tools_.feed(split.content);
  all_reasoning_ += split.reasoning;
  all_content_ += split.content;
  return split;
}

ReasoningSplit ChatChoiceOutput::feed(std::string_view text) { return route(reasoning_.feed(text)); }

ReasoningSplit ChatChoiceOutput::finish() {
  ReasoningSplit out = route(reasoning_.finish());
  ToolCallOutput rest = tools_.finish();
  if (rest.content) {
    out.content += *rest.content;
    all_content_ += *rest.content;
  }
  calls_ = std::move(rest.calls);
  return out;
}

Json ChatChoiceOutput::message() const {
  const bool no_content = all_content_.empty() && (!calls_.empty() || reasoning_on_);
  Json m = {{"role", "assistant"}, {"content", no_content ? Json() : Json(all_content_)}};
  if (reasoning_on_) m["reasoning_content"] = all_reasoning_.empty() ? Json() : Json(all_reasoning_);
  if (!calls_.empty()) m["tool_calls"] = tool_calls_json(calls_, false);
  return m;
}

}  // namespace distllm::serve::api
