// JSON Schema -> grammar of the JSON documents the schema accepts (or a sound
// subset of them: every document the grammar allows validates against the schema).
//
// Choices, documented because they restrict what a model may write:
// - Layout is compact with at most one space after ':' and ','; nothing else. A model
//   can therefore never loop on whitespace, and the output stays short.
// - Objects: properties are written in the schema's order (keep it by passing the
//   schema as text or as nlohmann::ordered_json); required ones always, optional ones
//   may be left out. No other properties are written, whatever additionalProperties
//   says (extra keys are optional under the schema, so leaving them out stays valid),
//   except for objects with no "properties" (and no "required"): an additionalProperties
//   schema makes them a map of string keys to values of that schema, false makes them
//   {}, and otherwise they are any JSON object.
// - Numbers: at most 15 integer digits (exact in a double), 15 fraction digits and a
//   two-digit exponent, so a value always parses to a finite number. Integer
//   minimum/maximum/exclusiveMinimum/exclusiveMaximum are exact (a digit-range
//   grammar). For "number", bounds are rounded inwards to integers (ceil of the
//   minimum, floor of the maximum) and bounded numbers carry no exponent.
// - Strings: minLength/maxLength count code points (escape sequences count as one);
//   \u escapes of surrogates are never written. "pattern" follows JSON Schema's
//   search semantics (unanchored sides may carry any characters). "format" supports
//   date, time, date-time, uuid, email and ipv4 by regexes for a subset of each
//   (e.g. days 29-31 only in months that always have them).
// - oneOf is treated as anyOf: branches that overlap can yield a value matching more
//   than one of them.
// - Anything else that constrains values is refused with an error naming the keyword.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "distllm/serve/structured/grammar.h"

namespace distllm::structured {

Grammar json_schema_to_grammar(const nlohmann::ordered_json& schema);
// Parses the text (keeping property order); a parse error is a GrammarError.
Grammar json_schema_to_grammar(std::string_view schema_text);

// Any JSON object (OpenAI's response_format {"type": "json_object"}).
Grammar json_object_grammar();

// Exactly one of the strings (vLLM's guided_choice).
Grammar choice_grammar(const std::vector<std::string>& choices);

}  // namespace distllm::structured
