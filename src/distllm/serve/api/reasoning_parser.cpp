#include "distllm/serve/api/reasoning_parser.h"

#include "distllm/base/error.h"
#include "distllm/base/strings.h"
#include "distllm/serve/api/held_text.h"

namespace distllm::serve::api {
namespace {

constexpr std::string_view kOpen = "<think>";
constexpr std::string_view kClose = "</think>";

size_t first_non_space(std::string_view s) {
  size_t i = 0;
  while (i < s.size() && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r')) ++i;
  return i;
}

}  // namespace

ReasoningFormat reasoning_format_from_name(const std::string& name) {
  if (name.empty() || name == "none") return ReasoningFormat::kNone;
  if (name == "qwen3") return ReasoningFormat::kQwen3;
  if (name == "deepseek_r1") return ReasoningFormat::kDeepSeekR1;
  throw_error(strprintf("unknown reasoning parser '%s' (choose none, qwen3 or deepseek_r1)", name.c_str()));
}

ReasoningSplit ReasoningParser::feed(std::string_view piece) {
  ReasoningSplit out;
  if (format_ == ReasoningFormat::kNone || state_ == State::kContent) {
    out.content.append(held_).append(piece);
    held_.clear();
    return out;
  }
  held_.append(piece);
  scan(out);
  return out;
}

void ReasoningParser::scan(ReasoningSplit& out) {
  if (state_ == State::kStart) {
    // Undecided until the first non-space text shows whether it opens with <think>.
    const size_t lead = first_non_space(held_);
    const std::string_view rest = std::string_view(held_).substr(lead);
    if (rest.size() < kOpen.size() && kOpen.substr(0, rest.size()) == rest) return;  // maybe <think>, maybe all space
    if (rest.substr(0, kOpen.size()) == kOpen) {
      held_.erase(0, lead + kOpen.size());
      state_ = State::kReasoning;
    } else if (format_ == ReasoningFormat::kDeepSeekR1) {
      state_ = State::kReasoning;  // the prompt opened the thinking
    } else {
      state_ = State::kContent;
      out.content.append(held_);
      held_.clear();
      return;
    }
  }
  if (state_ == State::kReasoning) {
    const size_t close = held_.find(kClose);
    if (close == std::string::npos) {
      const size_t hold = partial_marker_suffix(held_, kClose);
      out.reasoning.append(held_, 0, held_.size() - hold);
      held_.erase(0, held_.size() - hold);
      return;
    }
    out.reasoning.append(held_, 0, close);
    out.content.append(held_, close + kClose.size(), std::string::npos);
    held_.clear();
    state_ = State::kContent;
  }
}

ReasoningSplit ReasoningParser::finish() {
  ReasoningSplit out;
  // Held text never became a tag. At the start it is blank or a cut-short "<thi":
  // the answer for qwen3, still the thinking for deepseek_r1 (as is a cut-short "</thi").
  const bool thinking = state_ == State::kReasoning || (state_ == State::kStart && format_ == ReasoningFormat::kDeepSeekR1);
  (thinking ? out.reasoning : out.content).append(held_);
  held_.clear();
  return out;
}

ReasoningSplit split_reasoning(ReasoningFormat format, std::string_view text) {
  ReasoningParser p(format);
  ReasoningSplit a = p.feed(text), b = p.finish();
  a.reasoning += b.reasoning;
  a.content += b.content;
  return a;
}

}  // namespace distllm::serve::api
