// Internals shared by the tokenizer's .cpp files (not part of the module's API).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "distllm/tokenizer/bpe.h"

namespace distllm {

// A token matched in the raw text before pre-tokenization (Hugging Face's AddedToken).
struct AddedToken {
  int32_t id = 0;
  std::string content;
  bool special = false;
  bool single_word = false;  // not supported (rejected when loading)
  bool lstrip = false;       // the match swallows white space on its left
  bool rstrip = false;       // ... and on its right
  bool normalized = true;    // matched in a second pass (no normalizer: same text)
};

// Finds added tokens in text: leftmost match first, the longest one at that position.
class AddedTokenMatcher {
 public:
  struct Match {
    size_t begin, end;  // the span removed from the text, white space included
    const AddedToken* token;
  };
  void build(std::vector<const AddedToken*> tokens);
  bool empty() const { return count_ == 0; }
  bool find(std::string_view text, size_t from, Match* match) const;

 private:
  std::vector<const AddedToken*> by_first_byte_[256];  // longest first
  size_t count_ = 0;
};

enum class PreTokenizerForm {
  kByteLevel,           // {"type": "ByteLevel", ...}
  kSplitThenByteLevel,  // {"type": "Sequence", [Split(GPT-2 pattern), ByteLevel]}
};

// What a loader hands to build_tokenizer(): the model as read, with names for errors.
struct TokenizerSpec {
  std::string origin;                  // file name for messages
  std::string vocab_where;             // e.g. "tokenizer.json: model.vocab"
  std::function<std::string(size_t)> merge_where;  // e.g. "tokenizer.json: model.merges[3]"
  std::vector<std::pair<std::string, int64_t>> vocab;  // in file order
  std::vector<std::pair<std::string, std::string>> merges;
  std::vector<AddedToken> added;
  std::vector<std::string> added_where;  // per added token, e.g. "tokenizer.json: added_tokens[0]"
  std::optional<std::string> unk_token;
  bool fuse_unk = false;
  bool ignore_merges = false;
  PreTokenizerForm pre_form = PreTokenizerForm::kByteLevel;
  bool add_prefix_space = false;
  bool trim_offsets = true;
  bool use_regex = true;  // ByteLevel's own split (false only in the Sequence form)
  nlohmann::ordered_json post_processor;  // kept and written back; never applied
  std::optional<std::string> template_bos_token;  // first special token of a TemplateProcessing
};

struct TokenizerImpl {
  std::string origin;
  // Per id.
  std::vector<std::string> token_string;  // the vocab key, or an added token's content
  std::vector<std::string> token_bytes;
  std::vector<uint8_t> special;
  std::vector<uint8_t> in_model;  // listed in model.vocab
  std::unordered_map<std::string, int32_t> model_vocab;
  std::unordered_map<std::string, int32_t> by_string;  // model vocab and added tokens
  std::vector<std::pair<int32_t, int32_t>> merges;  // in rank order, duplicates dropped
  BpeMerges merge_table;
  int32_t byte_token[256];  // the token of each single byte, -1 if the vocab lacks it
  std::optional<int32_t> unk_id;
  bool fuse_unk = false;
  bool ignore_merges = false;
  PreTokenizerForm pre_form = PreTokenizerForm::kByteLevel;
  bool add_prefix_space = false;
  bool trim_offsets = true;
  bool use_regex = true;
  nlohmann::ordered_json post_processor;
  std::vector<AddedToken> added;
  // Hugging Face matches non-normalized added tokens first, then normalized ones in
  // what is left; with allow_special=false the special ones are left out.
  AddedTokenMatcher first_pass[2], second_pass[2];  // [allow_special]
  bool added_token_has_newline = false;
  std::optional<int32_t> default_eos, default_bos;
  // Identifies this tokenizer's entries in the per-thread piece caches; a new value
  // orphans them all.
  mutable std::atomic<uint64_t> cache_key{0};
};

// Validates a spec and builds the tables. Errors name spec.origin and the field.
std::shared_ptr<TokenizerImpl> build_tokenizer(TokenizerSpec spec);

// The spec of a tokenizer.json document (errors name `origin`).
TokenizerSpec parse_tokenizer_json(const std::string& json_text, const std::string& origin);

// A fresh cache key (process-wide counter).
uint64_t next_tokenizer_cache_key();

}  // namespace distllm
