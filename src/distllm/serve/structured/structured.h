// Structured outputs (constrained decoding): the module's API in one include.
//
//   GrammarCompiler compiler(token_bytes, eos_id);
//   auto grammar = compiler.compile(GrammarSpec::json_schema(schema_text));  // HTTP thread
//   GrammarMatcher matcher(grammar);                                          // per request
//   matcher.fill_next_token_bitmask(mask);   // before sampling
//   matcher.accept_token(sampled);           // after
//
// Front ends: GBNF (gbnf.h), regex (regex_to_grammar.h), JSON Schema and choice
// lists (json_schema_to_grammar.h); they all produce the byte-level Grammar of
// grammar.h. This module knows nothing of the server: vocabularies come in as
// byte strings.
#pragma once

#include "distllm/serve/structured/compiler.h"
#include "distllm/serve/structured/gbnf.h"
#include "distllm/serve/structured/grammar.h"
#include "distllm/serve/structured/json_schema_to_grammar.h"
#include "distllm/serve/structured/matcher.h"
#include "distllm/serve/structured/regex_to_grammar.h"
#include "distllm/serve/structured/vocabulary.h"
