// tokenizer.json's BPE model: one piece of pre-tokenized text -> token ids.
//
// Two ways in, with the same result as Hugging Face's BPE::tokenize:
//   - bytes (the pre-tokenizer ended with ByteLevel): each byte starts as the token of
//     its byte-level character (GPT-2, Llama 3, Qwen);
//   - characters (SentencePiece-style vocabularies, Llama 2, Mistral, Gemma): each
//     character starts as its own token or, when the vocabulary lacks it, as the
//     <0xXX> tokens of its UTF-8 bytes (byte_fallback) or as unk_token (consecutive
//     ones fused with fuse_unk); continuing_subword_prefix / end_of_word_suffix are
//     added to the symbols as Hugging Face adds them.
// The symbols are then merged by rank (bpe.h). With ignore_merges a piece that is
// itself in the vocabulary is that token.
//
// SentencePiece-style pieces can be a whole line ("▁The▁cat▁sat"): split_parts() cuts
// them where no merge can ever join the two sides (before a "▁" that no merged token
// has right after the character before it), so that BPE runs on short, cacheable
// words with the same result.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "distllm/tokenizer/bpe.h"

namespace distllm {

struct BpeModelSpec {
  std::vector<std::pair<std::string, std::string>> merges;
  std::function<std::string(size_t)> merge_where;  // names merge i in errors
  std::optional<std::string> unk_token;
  bool fuse_unk = false;
  bool ignore_merges = false;
  bool byte_fallback = false;
  std::string continuing_subword_prefix, end_of_word_suffix;
};

class BpeModel {
 public:
  // `vocab`: the model's token -> id (checked by the caller). Errors name `origin`.
  BpeModel(std::unordered_map<std::string, int32_t> vocab, const BpeModelSpec& spec, const std::string& origin);

  // Appends the ids of `piece` (raw bytes when `bytes`, else text) to `out`.
  void encode(std::string_view piece, bool bytes, std::vector<int32_t>& out, BpeScratch& scratch) const;

  // Calls fn(part) for the parts of `piece` that encode independently (see above).
  template <typename Fn>
  void split_parts(std::string_view piece, Fn&& fn) const {
    if (!splits_before_meta_) {
      fn(piece);
      return;
    }
    size_t begin = 0;
    // "▁" is E2 96 81; the parts begin at a "▁" whose previous character allows it.
    for (size_t i = 1; i + 3 <= piece.size(); ++i) {
      if (static_cast<unsigned char>(piece[i]) != 0xE2 || piece.compare(i, 3, "\xE2\x96\x81") != 0) continue;
      if (i >= 3 && piece.compare(i - 3, 3, "\xE2\x96\x81") == 0) continue;  // inside a run of "▁"
      if (glues_before_meta(piece, i)) continue;
      fn(piece.substr(begin, i - begin));
      begin = i;
    }
    fn(piece.substr(begin));
  }

  const std::unordered_map<std::string, int32_t>& vocab() const { return vocab_; }
  const std::vector<std::pair<int32_t, int32_t>>& merges() const { return merges_; }
  std::optional<int32_t> unk_id() const { return unk_id_; }
  bool fuse_unk() const { return fuse_unk_; }
  bool ignore_merges() const { return ignore_merges_; }
  bool byte_fallback() const { return byte_fallback_; }
  const std::string& continuing_subword_prefix() const { return prefix_; }
  const std::string& end_of_word_suffix() const { return suffix_; }

 private:
  void encode_bytes(std::string_view piece, std::vector<int32_t>& word) const;
  void encode_chars(std::string_view piece, std::vector<int32_t>& word) const;
  bool glues_before_meta(std::string_view piece, size_t meta) const;
  void find_meta_boundaries();

  std::string origin_;
  std::unordered_map<std::string, int32_t> vocab_;
  std::vector<std::pair<int32_t, int32_t>> merges_;  // by rank, repeated pairs dropped
  BpeMerges merge_table_;
  int32_t byte_token_[256];      // the token of each byte's byte-level character, -1 if none
  int32_t fallback_token_[256];  // the <0xXX> token of each byte, -1 if none
  int32_t ascii_token_[128];     // the token of each ASCII character, -1 if none
  std::optional<int32_t> unk_id_;
  bool fuse_unk_ = false, ignore_merges_ = false, byte_fallback_ = false;
  std::string prefix_, suffix_;
  bool splits_before_meta_ = false;
  std::unordered_set<uint32_t> glue_before_meta_;  // characters some merged token has right before "▁"
};

}  // namespace distllm
