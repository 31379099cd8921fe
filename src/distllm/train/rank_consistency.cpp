#include "distllm/train/rank_consistency.h"

#include <algorithm>
#include <cstdint>

#include "distllm/base/error.h"
#include "distllm/base/rng.h"
#include "distllm/base/strings.h"
#include "distllm/comm/text_collectives.h"

namespace distllm {
namespace {

uint64_t hash_text(const std::string& s) {
  uint64_t h = 0xCBF29CE484222325ull ^ s.size();
  for (unsigned char c : s) h = mix64(h ^ c);
  return h;
}

}  // namespace

void check_same_on_all_ranks(comm::ProcessGroup& group, const ConfigFields& fields) {
  if (group.size() == 1) return;
  const size_t n = static_cast<size_t>(group.size());
  // Round 1: the number of fields and a hash of their names (a different build or
  // version lists different fields).
  uint64_t shape[2] = {fields.size(), 0};
  for (const auto& f : fields) shape[1] = mix64(shape[1] ^ hash_text(f.first));
  std::vector<uint64_t> shapes(2 * n);
  group.allgather(shape, shapes.data(), 2 * sizeof(uint64_t), comm::DType::kU8);
  for (size_t r = 1; r < n; ++r)
    DL_CHECK(shapes[2 * r] == shapes[0] && shapes[2 * r + 1] == shapes[1],
             "rank %zu checks a different set of settings than rank 0 (a different distllm build?)", r);
  // Round 2: one hash per field.
  std::vector<uint64_t> mine(fields.size());
  for (size_t i = 0; i < fields.size(); ++i) mine[i] = hash_text(fields[i].second);
  std::vector<uint64_t> all(mine.size() * n);
  group.allgather(mine.data(), all.data(), mine.size() * sizeof(uint64_t), comm::DType::kU8);
  size_t bad = fields.size();
  size_t bad_rank = 0;
  for (size_t i = 0; i < fields.size() && bad == fields.size(); ++i)
    for (size_t r = 1; r < n; ++r)
      if (all[r * mine.size() + i] != all[i]) {
        bad = i;
        bad_rank = r;
        break;
      }
  if (bad == fields.size()) return;
  // Round 3 (only on a difference, decided identically everywhere): the values.
  std::vector<std::string> values = comm::allgather_text(&group, fields[bad].second);
  throw_error(strprintf("ranks were started with different settings: %s is '%s' on rank %zu but '%s' on rank 0 "
                        "(every rank must run the same command on the same data)",
                        fields[bad].first.c_str(), values[bad_rank].c_str(), bad_rank, values[0].c_str()));
}

}  // namespace distllm
