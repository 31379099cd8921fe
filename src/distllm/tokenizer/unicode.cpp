#include "distllm/tokenizer/unicode.h"

#include <unicode/normalizer2.h>
#include <unicode/bytestream.h>
#include <unicode/ucasemap.h>
#include <unicode/uchar.h>

#include <memory>

#include "distllm/base/error.h"
#include "distllm/tokenizer/utf8.h"

namespace distllm {
namespace {

// Calls fn(valid_stretch) for the well-formed stretches of text and appends each
// ill-formed byte to out unchanged.
template <typename Fn>
void for_valid_stretches(std::string_view text, std::string& out, Fn&& fn) {
  while (!text.empty()) {
    size_t bad = utf8_first_invalid(text);
    if (bad > 0) fn(text.substr(0, bad));
    if (bad == text.size()) return;
    // One ill-formed byte at a time, as the rest of the tokenizer counts them.
    out.push_back(text[bad]);
    text.remove_prefix(bad + 1);
  }
}

const icu::Normalizer2& normalizer(NormalForm form) {
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* n = nullptr;
  switch (form) {
    case NormalForm::kNFC: n = icu::Normalizer2::getNFCInstance(status); break;
    case NormalForm::kNFD: n = icu::Normalizer2::getNFDInstance(status); break;
    case NormalForm::kNFKC: n = icu::Normalizer2::getNFKCInstance(status); break;
    case NormalForm::kNFKD: n = icu::Normalizer2::getNFKDInstance(status); break;
  }
  DL_CHECK(U_SUCCESS(status) && n != nullptr, "ICU: cannot load the normalizer data: %s", u_errorName(status));
  return *n;
}

struct CaseMapDeleter {
  void operator()(UCaseMap* m) const { ucasemap_close(m); }
};

UCaseMap* root_case_map() {
  thread_local std::unique_ptr<UCaseMap, CaseMapDeleter> map = [] {
    UErrorCode status = U_ZERO_ERROR;
    UCaseMap* m = ucasemap_open("", 0, &status);
    DL_CHECK(U_SUCCESS(status), "ICU: cannot open a case map: %s", u_errorName(status));
    return std::unique_ptr<UCaseMap, CaseMapDeleter>(m);
  }();
  return map.get();
}

}  // namespace

bool unicode_is_white_space(uint32_t cp) { return u_hasBinaryProperty(static_cast<UChar32>(cp), UCHAR_WHITE_SPACE); }

bool unicode_is_numeric(uint32_t cp) {
  return (U_GET_GC_MASK(static_cast<UChar32>(cp)) & U_GC_N_MASK) != 0;
}

bool unicode_is_alphanumeric(uint32_t cp) {
  return u_hasBinaryProperty(static_cast<UChar32>(cp), UCHAR_ALPHABETIC) || unicode_is_numeric(cp);
}

bool unicode_is_word(uint32_t cp) {
  auto c = static_cast<UChar32>(cp);
  return u_hasBinaryProperty(c, UCHAR_ALPHABETIC) || u_hasBinaryProperty(c, UCHAR_JOIN_CONTROL) ||
         (U_GET_GC_MASK(c) & (U_GC_M_MASK | U_GC_ND_MASK | U_GC_PC_MASK)) != 0;
}

bool unicode_is_punctuation(uint32_t cp) {
  if (cp < 0x80) return (cp >= 0x21 && cp <= 0x2F) || (cp >= 0x3A && cp <= 0x40) || (cp >= 0x5B && cp <= 0x60) ||
                        (cp >= 0x7B && cp <= 0x7E);
  return (U_GET_GC_MASK(static_cast<UChar32>(cp)) & U_GC_P_MASK) != 0;
}

bool unicode_is_mark(uint32_t cp) { return (U_GET_GC_MASK(static_cast<UChar32>(cp)) & U_GC_M_MASK) != 0; }

void unicode_normalize(NormalForm form, std::string_view text, std::string& out) {
  const icu::Normalizer2& n = normalizer(form);
  for_valid_stretches(text, out, [&](std::string_view s) {
    UErrorCode status = U_ZERO_ERROR;
    icu::StringPiece piece(s.data(), static_cast<int32_t>(s.size()));
    // Most text is already normalized: check before copying through ICU's sink.
    if (n.isNormalizedUTF8(piece, status) && U_SUCCESS(status)) {
      out.append(s);
      return;
    }
    status = U_ZERO_ERROR;
    icu::StringByteSink<std::string> sink(&out, static_cast<int32_t>(s.size()));
    n.normalizeUTF8(0, piece, sink, nullptr, status);
    DL_CHECK(U_SUCCESS(status), "ICU: normalization failed: %s", u_errorName(status));
  });
}

void unicode_lowercase(std::string_view text, std::string& out) {
  UCaseMap* map = root_case_map();
  for_valid_stretches(text, out, [&](std::string_view s) {
    size_t start = out.size();
    // Lower-casing grows a string by at most 3/2 (e.g. U+0130 -> i + U+0307).
    size_t capacity = s.size() * 3 / 2 + 4;
    for (int attempt = 0; attempt < 2; ++attempt) {
      out.resize(start + capacity);
      UErrorCode status = U_ZERO_ERROR;
      int32_t n = ucasemap_utf8ToLower(map, out.data() + start, static_cast<int32_t>(capacity), s.data(),
                                       static_cast<int32_t>(s.size()), &status);
      if (status == U_BUFFER_OVERFLOW_ERROR) {
        capacity = static_cast<size_t>(n);
        continue;
      }
      DL_CHECK(U_SUCCESS(status), "ICU: lower-casing failed: %s", u_errorName(status));
      out.resize(start + static_cast<size_t>(n));
      return;
    }
    throw_error("ICU: lower-casing failed: the result kept growing");
  });
}

}  // namespace distllm
