// The Unicode operations tokenizer.json's parts ask for, answered by ICU rather than by
// tables of our own: the character properties Rust's `char` methods test (Hugging
// Face's tokenizers are written in Rust), normalization forms and lower-casing.
//
// Text may hold bytes that are not UTF-8 (distllm encodes any byte string): the
// transforms leave such bytes where they are and treat each as a boundary, as if it
// were U+FFFD.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace distllm {

// Rust's char::is_whitespace: the White_Space property.
bool unicode_is_white_space(uint32_t cp);
// Rust's char::is_numeric: general category Nd, Nl or No.
bool unicode_is_numeric(uint32_t cp);
// Rust's char::is_alphanumeric: Alphabetic or numeric.
bool unicode_is_alphanumeric(uint32_t cp);
// `\w` of Rust's regex crate: Alphabetic, a mark, Nd, Pc or Join_Control.
bool unicode_is_word(uint32_t cp);
// Hugging Face's is_punc: ASCII punctuation or general category P*.
bool unicode_is_punctuation(uint32_t cp);
// General category M* (what StripAccents removes).
bool unicode_is_mark(uint32_t cp);

enum class NormalForm { kNFC, kNFD, kNFKC, kNFKD };

// Appends `text` in the normal form to `out`.
void unicode_normalize(NormalForm form, std::string_view text, std::string& out);
// Appends `text` lower-cased (Unicode's full lower-case mapping, as Rust's
// str::to_lowercase, final sigma included) to `out`.
void unicode_lowercase(std::string_view text, std::string& out);

}  // namespace distllm
