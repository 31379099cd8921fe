#include "distllm/tokenizer/unicode_classes.h"

#include <map>
#include <string>
#include <vector>

namespace distllm {

CharClassTable::CharClassTable() {
  // Paint a flat table, then deduplicate its 256-entry blocks (most are all "other").
  std::vector<uint8_t> flat(kMaxCodePoint + 1, static_cast<uint8_t>(CharClass::kOther));
  auto paint = [&](std::span<const CodeRange> ranges, CharClass c) {
    for (const CodeRange& r : ranges)
      for (uint32_t cp = r.first; cp <= r.last && cp <= kMaxCodePoint; ++cp) flat[cp] = static_cast<uint8_t>(c);
  };
  paint(unicode_data::letter_ranges(), CharClass::kLetter);
  paint(unicode_data::number_ranges(), CharClass::kNumber);
  paint(unicode_data::space_ranges(), CharClass::kSpace);

  std::map<std::string, uint16_t> unique;
  std::string storage;
  for (uint32_t block = 0; block < ((kMaxCodePoint + 1) >> 8); ++block) {
    std::string bytes(reinterpret_cast<const char*>(flat.data()) + block * 256, 256);
    auto [it, inserted] = unique.emplace(bytes, static_cast<uint16_t>(unique.size()));
    if (inserted) storage += bytes;
    stage1_[block] = it->second;
  }
  blocks_.assign(storage.begin(), storage.end());
}

const CharClassTable& CharClassTable::get() {
  static const CharClassTable table;
  return table;
}

}  // namespace distllm
