// GPT-2's byte-level alphabet: every byte 0..255 is shown as one printable Unicode
// character, so BPE can work on strings that contain no spaces or control characters.
// Printable Latin-1 bytes ('!'..'~', '¡'..'¬', '®'..'ÿ') stand for themselves; the other
// 68 bytes, in increasing order, become U+0100, U+0101, ... (so ' ' is 'Ġ', '\n' is 'Ċ').
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace distllm {

// The character that stands for byte b.
uint32_t byte_level_char(uint8_t b);

// The byte a character stands for, or -1 when it is not in the alphabet.
int byte_level_byte(uint32_t cp);

// Raw bytes -> their byte-level string (UTF-8 encoded).
std::string bytes_to_byte_level(std::string_view bytes);

// A byte-level string -> the raw bytes it stands for. Returns false (leaving *out
// unspecified) when `text` is not UTF-8 or has a character outside the alphabet.
bool byte_level_to_bytes(std::string_view text, std::string* out);

}  // namespace distllm
