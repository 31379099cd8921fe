// Regular expressions as tokenizer.json writes them, run by PCRE2 (UTF, Unicode
// properties, JIT).
//
// Hugging Face's tokenizers compile these patterns with Oniguruma; PCRE2 reads the same
// Perl-style syntax the files use (`\p{L}`, `(?i:...)`, `(?!...)`, `{1,3}`) and also
// backtracks leftmost-first, so a match is the same match. Where the two dialects
// differ the pattern is rewritten before compiling:
//   - `\s` / `\S` become Oniguruma's white space (the White_Space property: U+0085
//     is space, U+FEFF is not), which PCRE2 and JavaScript each draw differently;
//   - `\uHHHH` (Oniguruma's Ruby syntax) becomes `\x{HHHH}`.
// Matches are found as Rust's onig crate iterates them: from the end of the previous
// match, an empty match right where the previous one ended skipped by one character.
//
// Text that is not UTF-8 is matched as if each ill-formed byte were U+FFFD; offsets
// are always offsets into the text as given.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace distllm {

struct MatchSpan {
  size_t begin, end;
};

class Regex {
 public:
  // Throws distllm::Error naming `where` when the pattern does not compile.
  Regex(std::string_view pattern, const std::string& where);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Every match in `text`, in order, appended to `out`. Safe from many threads at once.
  void find_all(std::string_view text, std::vector<MatchSpan>& out) const;

  const std::string& pattern() const { return pattern_; }

  // The pattern after the rewriting above (for tests).
  static std::string translate(std::string_view pattern, const std::string& where);

 private:
  void find_all_valid(std::string_view text, std::vector<MatchSpan>& out) const;
  std::string pattern_;
  void* code_ = nullptr;  // pcre2_code_8
};

}  // namespace distllm
