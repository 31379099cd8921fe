// tokenizer.json's "pre_tokenizer": cuts normalized text into the pieces the model
// encodes one by one (no token crosses a piece boundary).
//
// Supported: ByteLevel (add_prefix_space, use_regex), Split (a string or any regex,
// every behaviour, invert), Metaspace (replacement, prepend_scheme, split), Digits,
// Whitespace, WhitespaceSplit, Punctuation, CharDelimiterSplit, BertPreTokenizer and
// Sequence. Each step works on the pieces the previous one produced, as Hugging Face's
// PreTokenizedString does.
//
// A ByteLevel that ends the chain is not applied here: its pieces reach the model as
// raw bytes (byte_level_output()), and the model maps each byte to its token directly
// instead of building byte-level strings first.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "distllm/tokenizer/json_reader.h"

namespace distllm {

struct PieceFlags {
  bool text_start = true;   // the piece begins the whole text (Metaspace's prepend_scheme "first")
  bool split_start = true;  // the piece begins a split, not a chunk of encode_parallel (prefix spaces)
};

class PieceSink {
 public:
  virtual void piece(std::string_view piece) = 0;

 protected:
  ~PieceSink() = default;
};

class PreTokenizerStep;

class PreTokenizer {
 public:
  // tokenizer.json's "pre_tokenizer" (null: the whole text is one piece).
  static std::unique_ptr<PreTokenizer> parse(const JsonReader& r, const nlohmann::json& node, const std::string& where);
  ~PreTokenizer();

  void run(std::string_view text, PieceFlags flags, PieceSink& sink) const;

  // The chain ends with ByteLevel: pieces are raw bytes, not byte-level strings.
  bool byte_level_output() const { return byte_level_output_; }
  // The chain is one split by GPT-2's pattern (and ByteLevel): encode_parallel may cut
  // the text just before a '\n' that follows a printable ASCII character.
  // (Llama 3's and Qwen 2's patterns allow the same cut after an ASCII letter.)
  enum class NewlineCut { kNone, kAfterPrintable, kAfterLetter };
  NewlineCut newline_cut() const { return newline_cut_; }

 private:
  PreTokenizer();
  void run_from(size_t step, std::string_view text, PieceFlags flags, PieceSink& sink) const;
  std::vector<std::unique_ptr<PreTokenizerStep>> steps_;
  bool byte_level_output_ = false;
  NewlineCut newline_cut_ = NewlineCut::kNone;
  friend class PreTokenizerStep;
};

// The interface of one step (defined in pre_tokenizer_chain.cpp).
class PreTokenizerStep {
 public:
  virtual ~PreTokenizerStep() = default;
  // Produces the step's pieces of `text` and hands each to chain.run_from(next, ...).
  virtual void run(const PreTokenizer& chain, size_t next, std::string_view text, PieceFlags flags,
                   PieceSink& sink) const = 0;

 protected:
  static void forward(const PreTokenizer& chain, size_t next, std::string_view text, PieceFlags flags,
                      PieceSink& sink) {
    chain.run_from(next, text, flags, sink);
  }
};

}  // namespace distllm
