// GBNF (llama.cpp's grammar syntax) -> Grammar.
//
//   root  ::= "{" ws pair ("," ws pair)* "}"   # comments run to the end of the line
//   pair  ::= [a-z]+ ":" ws ( "true" | "false" | [0-9]{1,3} )
//   ws    ::= [ \t\n]?
//
// Literals "...", classes [a-z] [^"\\], any character '.', groups ( ), alternation |,
// repetition * + ? {m} {m,} {m,n}; escapes \n \r \t \\ \" \[ \] \- \xHH \uHHHH
// \UHHHHHHHH. A rule ends at a newline unless inside parentheses or after '::=' or
// '|'. The start rule is `root`.
#pragma once

#include <string_view>

#include "distllm/serve/structured/grammar.h"

namespace distllm::structured {

// Throws GrammarError naming the line and column of the first problem.
Grammar parse_gbnf(std::string_view text);

}  // namespace distllm::structured
