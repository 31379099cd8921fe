#include "distllm/tokenizer/pretokenizer.h"

namespace distllm {

std::vector<std::string> gpt2_pretokenize(std::string_view text) {
  std::vector<std::string> pieces;
  gpt2_pretokenize(text, [&](std::string_view piece) { pieces.emplace_back(piece); });
  return pieces;
}

}  // namespace distllm
