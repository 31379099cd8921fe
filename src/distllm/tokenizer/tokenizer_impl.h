// Internals shared by the tokenizer's .cpp files (not part of the module's API): what
// a loader hands to build_tokenizer(), and the immutable tables a Tokenizer shares.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "distllm/tokenizer/added_tokens.h"
#include "distllm/tokenizer/bpe_model.h"
#include "distllm/tokenizer/decoder.h"
#include "distllm/tokenizer/normalizer.h"
#include "distllm/tokenizer/post_processor.h"
#include "distllm/tokenizer/pre_tokenizer_chain.h"

namespace distllm {

// The tokenizer as read, with names for errors.
struct TokenizerSpec {
  std::string origin;                                  // file name for messages
  std::string vocab_where;                             // e.g. "tokenizer.json: model.vocab"
  std::vector<std::pair<std::string, int64_t>> vocab;  // in file order
  BpeModelSpec model;
  std::vector<AddedToken> added;
  std::vector<std::string> added_where;  // per added token, e.g. "tokenizer.json: added_tokens[0]"
  // The pipeline's parts as tokenizer.json writes them (null: none).
  nlohmann::json normalizer, pre_tokenizer, post_processor, decoder;
};

struct TokenizerImpl {
  std::string origin;
  // Per id.
  std::vector<std::string> token_string;  // the vocab key, or an added token's content
  std::vector<std::string> token_bytes;   // the text it adds after other tokens (the decoder's view)
  std::vector<uint8_t> special;
  std::vector<uint8_t> in_model;  // listed in model.vocab
  std::unordered_map<std::string, int32_t> by_string;  // model vocab and added tokens
  std::unique_ptr<BpeModel> model;
  std::unique_ptr<Normalizer> normalizer;  // null: none
  std::unique_ptr<PreTokenizer> pre_tokenizer;
  std::unique_ptr<Decoder> decoder;
  SpecialTokensTemplate special_tokens;  // the post-processor's, for one sequence
  nlohmann::json normalizer_json, pre_tokenizer_json, post_processor_json, decoder_json;
  std::vector<AddedToken> added;
  // Hugging Face matches non-normalized added tokens in the raw text first, then
  // normalized ones in the normalized text between them.
  AddedTokenMatcher raw_pass, normalized_pass;
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
