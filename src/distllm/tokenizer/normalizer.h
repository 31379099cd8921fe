// tokenizer.json's "normalizer": the text between added tokens is rewritten before it
// is split (e.g. NFC for Qwen, " " -> "▁" for SentencePiece-style vocabularies).
//
// Supported: NFC, NFD, NFKC, NFKD, Lowercase, Strip, StripAccents, Replace (a string or
// a regex), Prepend, Append, and Sequence of them. Offsets are not tracked (distllm
// returns no offsets), so each step is a plain string -> string rewrite.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "distllm/tokenizer/json_reader.h"

namespace distllm {

class NormalizerStep {
 public:
  virtual ~NormalizerStep() = default;
  // Rewrites `text`; `scratch` is a buffer the step may use.
  virtual void apply(std::string& text, std::string& scratch) const = 0;
};

class Normalizer {
 public:
  // tokenizer.json's "normalizer" object (`node` at field `where`); null means none.
  static std::unique_ptr<Normalizer> parse(const JsonReader& r, const nlohmann::json& node, const std::string& where);

  // `text` normalized, written to `out`.
  void normalize(std::string_view text, std::string& out) const;

  // True when normalizing one stretch of text and its pieces separately gives the same
  // text wherever the stretch is cut just before a '\n' (no step looks across a line
  // break or adds text at the start or the end).
  bool local_at_newlines() const { return local_at_newlines_; }

 private:
  std::vector<std::unique_ptr<NormalizerStep>> steps_;
  bool local_at_newlines_ = true;
};

}  // namespace distllm
