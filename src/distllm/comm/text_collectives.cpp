#include "distllm/comm/text_collectives.h"

#include <cstdint>

namespace distllm::comm {

std::vector<std::string> allgather_text(ProcessGroup* group, const std::string& mine) {
  if (group == nullptr) return {mine};
  const size_t n = static_cast<size_t>(group->size());
  int64_t len = static_cast<int64_t>(mine.size());
  std::vector<int64_t> lens(n);
  group->allgather(&len, lens.data(), 1, DType::kI64);
  std::vector<size_t> counts(n);
  size_t total = 0;
  for (size_t r = 0; r < n; ++r) total += counts[r] = static_cast<size_t>(lens[r]);
  std::string all(total, '\0');
  group->allgatherv(mine.data(), all.data(), counts, DType::kU8);
  std::vector<std::string> out;
  size_t at = 0;
  for (size_t r = 0; r < n; ++r) {
    out.push_back(all.substr(at, counts[r]));
    at += counts[r];
  }
  return out;
}

std::string broadcast_text(ProcessGroup* group, const std::string& text, int root) {
  if (group == nullptr) return text;
  int64_t len = static_cast<int64_t>(text.size());
  group->broadcast(&len, 1, DType::kI64, root);
  std::string out = group->rank() == root ? text : std::string(static_cast<size_t>(len), '\0');
  if (len > 0) group->broadcast(out.data(), static_cast<size_t>(len), DType::kU8, root);
  return out;
}

}  // namespace distllm::comm
