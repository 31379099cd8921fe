#include "distllm/tokenizer/byte_level.h"

#include <array>

#include "distllm/tokenizer/utf8.h"

namespace distllm {
namespace {

struct ByteLevelAlphabet {
  std::array<uint32_t, 256> char_of{};
  std::array<int16_t, 324> byte_of{};  // every character of the alphabet is below U+0144

  ByteLevelAlphabet() {
    byte_of.fill(-1);
    auto printable = [](int b) { return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF); };
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) char_of[b] = printable(b) ? static_cast<uint32_t>(b) : next++;
    for (int b = 0; b < 256; ++b) byte_of[char_of[b]] = static_cast<int16_t>(b);
  }
};

const ByteLevelAlphabet& alphabet() {
  static const ByteLevelAlphabet a;
  return a;
}

}  // namespace

uint32_t byte_level_char(uint8_t b) { return alphabet().char_of[b]; }

int byte_level_byte(uint32_t cp) { return cp < alphabet().byte_of.size() ? alphabet().byte_of[cp] : -1; }

std::string bytes_to_byte_level(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) utf8_append(out, byte_level_char(static_cast<uint8_t>(c)));
  return out;
}

bool byte_level_to_bytes(std::string_view text, std::string* out) {
  out->clear();
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  size_t i = 0;
  while (i < text.size()) {
    Utf8Step step = utf8_step(p + i, text.size() - i);
    if (step.kind != Utf8Step::kChar) return false;
    int b = byte_level_byte(step.cp);
    if (b < 0) return false;
    *out += static_cast<char>(b);
    i += step.length;
  }
  return true;
}

}  // namespace distllm
