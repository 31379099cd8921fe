// Lexing: a template's source becomes text segments and tag segments (token lists),
// with Hugging Face's whitespace rules (trim_blocks, lstrip_blocks, '-' and '+')
// already applied to the text.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace distllm::serve::jinja {

enum class TokKind { kName, kString, kInt, kFloat, kOp };
struct Tok {
  TokKind kind;
  std::string text;
  int64_t i = 0;
  double f = 0.0;
  int line = 0;
};

enum class SegKind { kText, kExpr, kStmt };
struct Segment {
  SegKind kind;
  std::string text;
  std::vector<Tok> toks;
  int line = 0;
};

bool is_space(char c);

// Throws distllm::Error naming `origin` and the line for a malformed tag.
std::vector<Segment> lex_template(const std::string& source, const std::string& origin);

}  // namespace distllm::serve::jinja
