// Splitting a piece of text on a pattern, as Hugging Face's NormalizedString::split
// does for the Split, Digits, Punctuation, Metaspace, ... pre-tokenizers.
//
// The pattern's matches and the stretches between them tile the text; `invert` swaps
// which is which; the behaviour then decides what becomes of the matches:
//   Removed             dropped               "a, b" on "," -> "a", " b"
//   Isolated            a piece of their own  -> "a", ",", " b"
//   MergedWithPrevious  glued to the piece before  -> "a,", " b"
//   MergedWithNext      glued to the piece after   -> "a", ", b"
//   Contiguous          runs of matches become one piece
// Empty pieces are dropped.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "distllm/tokenizer/json_reader.h"
#include "distllm/tokenizer/regex.h"

namespace distllm {

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

// Reads a behaviour name ("Isolated", ...) at obj[key].
SplitBehavior read_split_behavior(const JsonReader& r, const nlohmann::json& obj, const char* key,
                                  const std::string& where);

// What a split looks for.
class SplitPattern {
 public:
  virtual ~SplitPattern() = default;
  // Appends the matches in `text` (in order, not overlapping) to `out`.
  virtual void find(std::string_view text, std::vector<MatchSpan>& out) const = 0;
  // Rebuilds `{"String": ...}` / `{"Regex": ...}` patterns of tokenizer.json: a string
  // is matched literally (and must not be empty).
  static std::unique_ptr<SplitPattern> from_json(const JsonReader& r, const nlohmann::json& pattern,
                                                 const std::string& where);
  static std::unique_ptr<SplitPattern> regex(const std::string& pattern, const std::string& where);
  static std::unique_ptr<SplitPattern> literal(const std::string& text);
  // Each character for which `test` holds is a match of its own (ill-formed bytes
  // are tested as U+FFFD).
  static std::unique_ptr<SplitPattern> characters(bool (*test)(uint32_t));
};

// GPT-2's split pattern, which pretokenizer.h matches without a regex engine.
extern const char kGpt2SplitPattern[];

// The pieces of `text` (as spans) after splitting on `matches`.
void split_by_matches(std::string_view text, const std::vector<MatchSpan>& matches, bool invert,
                      SplitBehavior behavior, std::vector<MatchSpan>& pieces);

}  // namespace distllm
