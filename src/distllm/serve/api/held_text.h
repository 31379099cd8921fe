// The one rule the streaming output parsers (reasoning_parser.h, tool_calls.h)
// share: text that could be the beginning of a marker they look for is held back
// until the next piece tells whether it is one.
#pragma once

#include <algorithm>
#include <string_view>

namespace distllm::serve::api {

// Length of the longest suffix of `text` that is a proper prefix of `marker`: the
// bytes to hold back because the marker may be starting there.
inline size_t partial_marker_suffix(std::string_view text, std::string_view marker) {
  for (size_t len = std::min(text.size(), marker.size() - 1); len > 0; --len)
    if (text.substr(text.size() - len) == marker.substr(0, len)) return len;
  return 0;
}

}  // namespace distllm::serve::api
