#include "distllm/tokenizer/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "distllm/base/error.h"
#include "distllm/tokenizer/utf8.h"

namespace distllm {
namespace {

// Oniguruma's \s: the White_Space property, as a class body.
constexpr const char* kWhiteSpaceClassBody =
    "\\t-\\r\\x{20}\\x{85}\\x{a0}\\x{1680}\\x{2000}-\\x{200a}\\x{2028}\\x{2029}\\x{202f}\\x{205f}\\x{3000}";

// Backtracking limits: a pattern from a file must fail with an error, never hang.
constexpr uint32_t kMatchLimit = 50'000'000;
constexpr size_t kJitStackMax = 8u << 20;

// Per-thread PCRE2 state: match data (only the whole match is read), the JIT stack.
struct MatchState {
  pcre2_match_data* data = nullptr;
  pcre2_match_context* context = nullptr;
  pcre2_jit_stack* jit_stack = nullptr;
  MatchState() {
    data = pcre2_match_data_create(1, nullptr);
    context = pcre2_match_context_create(nullptr);
    jit_stack = pcre2_jit_stack_create(32u << 10, kJitStackMax, nullptr);
    DL_CHECK(data && context && jit_stack, "PCRE2: out of memory");
    pcre2_jit_stack_assign(context, nullptr, jit_stack);
    pcre2_set_match_limit(context, kMatchLimit);
  }
  ~MatchState() {
    pcre2_jit_stack_free(jit_stack);
    pcre2_match_context_free(context);
    pcre2_match_data_free(data);
  }
};

MatchState& match_state() {
  thread_local MatchState state;
  return state;
}

std::string error_text(int code) {
  PCRE2_UCHAR buf[256];
  int n = pcre2_get_error_message(code, buf, sizeof buf);
  return n < 0 ? strprintf("PCRE2 error %d", code) : std::string(reinterpret_cast<const char*>(buf));
}

bool is_hex(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

}  // namespace

std::string Regex::translate(std::string_view p, const std::string& where) {
  std::string out;
  out.reserve(p.size() + 64);
  bool in_class = false;
  for (size_t i = 0; i < p.size(); ++i) {
    char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      char e = p[i + 1];
      if (e == 's' || e == 'S') {
        if (!in_class) {
          out += e == 's' ? "[" : "[^";
          out += kWhiteSpaceClassBody;
          out += "]";
        } else if (e == 's') {
          out += kWhiteSpaceClassBody;
        } else {
          throw_error(where + ": \\S inside a character class is not supported");
        }
        ++i;
        continue;
      }
      if (e == 'u' && i + 5 < p.size() && is_hex(p[i + 2]) && is_hex(p[i + 3]) && is_hex(p[i + 4]) &&
          is_hex(p[i + 5])) {
        out += "\\x{";
        out.append(p.substr(i + 2, 4));
        out += "}";
        i += 5;
        continue;
      }
      out += c;
      out += e;  // any other escape, including an escaped ']' or '[', passes as it is
      ++i;
      continue;
    }
    if (in_class) {
      if (c == '[' && i + 1 < p.size() && p[i + 1] == ':') {  // a POSIX class [:alpha:] inside a class
        size_t close = p.find(":]", i + 2);
        if (close != std::string_view::npos) {
          out.append(p.substr(i, close + 2 - i));
          i = close + 1;
          continue;
        }
      }
      if (c == ']') in_class = false;
      out += c;
      continue;
    }
    if (c == '[') {
      in_class = true;
      out += c;
      // A ']' right after '[' or '[^' is a literal member, not the end.
      if (i + 1 < p.size() && p[i + 1] == '^') out += p[++i];
      if (i + 1 < p.size() && p[i + 1] == ']') out += p[++i];
      continue;
    }
    out += c;
  }
  return out;
}

Regex::Regex(std::string_view pattern, const std::string& where) : pattern_(pattern) {
  std::string translated = translate(pattern, where);
  int code = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* re = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                                 PCRE2_UTF | PCRE2_UCP, &code, &offset, nullptr);
  if (re == nullptr)
    throw_error(strprintf("%s: the regular expression does not compile: %s (at offset %zu of '%s')", where.c_str(),
                          error_text(code).c_str(), static_cast<size_t>(offset), utf8_sanitize(translated).c_str()));
  // JIT is an optimization: where it is unavailable, the interpreter gives the same matches.
  (void)pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);
  code_ = re;
}

Regex::~Regex() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

void Regex::find_all_valid(std::string_view text, std::vector<MatchSpan>& out) const {
  auto* re = static_cast<pcre2_code*>(code_);
  MatchState& st = match_state();
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  const size_t n = text.size();
  size_t start = 0;
  bool have_last = false;
  size_t last_end = 0;
  while (start <= n) {
    int rc = pcre2_match(re, subject, n, start, PCRE2_NO_UTF_CHECK, st.data, st.context);
    if (rc == PCRE2_ERROR_NOMATCH) return;
    if (rc < 0)
      throw_error(strprintf("regular expression '%s': matching failed: %s", utf8_sanitize(pattern_).c_str(),
                            error_text(rc).c_str()));
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(st.data);
    size_t b = ov[0], e = ov[1];
    if (b == e && have_last && last_end == e) {
      // No empty match where the previous match ended: look again one character on.
      if (start >= n) return;
      Utf8Step step = utf8_step(reinterpret_cast<const unsigned char*>(text.data()) + start, n - start);
      start += step.length;
      continue;
    }
    out.push_back({b, e});
    have_last = true;
    last_end = e;
    start = e;
    if (b == e && e == n) return;
  }
}

void Regex::find_all(std::string_view text, std::vector<MatchSpan>& out) const {
  size_t bad = utf8_first_invalid(text);
  if (bad == text.size()) {
    find_all_valid(text, out);
    return;
  }
  // Each ill-formed byte becomes U+FFFD (3 bytes); match there, map offsets back.
  std::string valid;
  std::vector<size_t> original;  // original[i]: offset in `text` of valid[i]
  valid.reserve(text.size() + 16);
  original.reserve(text.size() + 16);
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  for (size_t i = 0; i < text.size();) {
    Utf8Step step = utf8_step(p + i, text.size() - i);
    if (step.kind == Utf8Step::kChar) {
      for (size_t k = 0; k < step.length; ++k) original.push_back(i + k);
      valid.append(text.substr(i, step.length));
      i += step.length;
    } else {
      for (size_t k = 0; k < 3; ++k) original.push_back(i);
      valid += "\xEF\xBF\xBD";
      i += 1;
    }
  }
  original.push_back(text.size());
  size_t first = out.size();
  find_all_valid(valid, out);
  for (size_t k = first; k < out.size(); ++k) out[k] = {original[out[k].begin], original[out[k].end]};
}

}  // namespace distllm
