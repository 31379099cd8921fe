// A regular-expression subset (ECMAScript flavour, as in JSON Schema "pattern" and
// vLLM's guided_regex) -> grammar.
//
// Supported: literals, escapes (\d \D \w \W \s \S \n \r \t \f \v \0 \xHH \uHHHH and
// escaped punctuation), '.', classes [...] / [^...] (with \d \w \s inside), groups
// ( ), (?: ), named groups (?<n> ), alternation |, quantifiers * + ? {m} {m,} {m,n}
// (lazy suffix '?' accepted: it changes which match is found, not what matches),
// and the anchors ^ at the very start and $ at the very end. Backreferences,
// lookaround, word boundaries and anchors elsewhere are refused by name.
#pragma once

#include <string_view>

#include "distllm/serve/structured/grammar.h"

namespace distllm::structured {

struct RegexExpr {
  Expr expr;
  bool anchored_start = false;  // began with ^
  bool anchored_end = false;    // ended with $
};

struct RegexOptions {
  // Emit the regex's characters as they appear inside a JSON string literal:
  // '"' as \", '\' as \\, control characters as \n, \t, ... or \u00XX.
  bool json_string = false;
};

// Throws GrammarError naming the position and the construct.
RegexExpr regex_to_expr(std::string_view pattern, const RegexOptions& options = {});

// Full-match grammar (the whole output must match, as vLLM's guided_regex does).
Grammar regex_to_grammar(std::string_view pattern);

}  // namespace distllm::structured
