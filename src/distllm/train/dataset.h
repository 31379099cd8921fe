// Token datasets and the reproducible batch sampler.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "distllm/train/token_file.h"

namespace distllm {

// A sequence of token shards (files, or one in-memory array for byte-level text).
class TokenDataset {
 public:
  // `path` is a token file, or a directory: with manifest.json, its `split` list
  // ("train", "val", or "all": both); otherwise every <split>_*.tok file in name order. A shard
  // the manifest lists must exist, and agree with its vocab_size (header and ids).
  static TokenDataset open(const std::string& path, const std::string& split = "train");
  // Whether `path` has a non-empty `split` (a token file has only "train").
  static bool has_split(const std::string& path, const std::string& split);
  static TokenDataset open_files(const std::vector<std::string>& files);
  static TokenDataset from_tokens(std::vector<uint32_t> tokens, uint32_t vocab_size, std::string origin);

  uint64_t size() const { return total_; }
  uint32_t vocab_size() const { return vocab_size_; }  // 0 when unknown
  const std::string& origin() const { return origin_; }
  // UTF-8 bytes of text behind these tokens (0 when unknown: a manifest written
  // before it was recorded, bare token files). Bits per byte, unlike the loss,
  // compares runs whose tokenizers differ: bpb = loss / ln 2 * tokens / bytes.
  uint64_t text_bytes() const { return text_bytes_; }
  void set_text_bytes(uint64_t bytes) { text_bytes_ = bytes; }
  // Bits per byte for a mean loss in nats per token over this data (the data's own
  // tokens-per-byte ratio standing for the evaluated part's); 0 when text_bytes() is.
  double bits_per_byte(double loss_nats_per_token) const;
  size_t num_shards() const { return shards_.size(); }

  // Windows of T+1 consecutive tokens that lie inside one shard.
  uint64_t num_windows(int T) const;
  // The k-th window in [0, num_windows(T)), shard by shard, as T+1 int32 tokens.
  void window(uint64_t k, int T, int32_t* out) const;

  // Throws naming the shard if any token id is >= vocab (e.g. data prepared with
  // another tokenizer than the model's).
  void check_tokens_below(int vocab) const;

 private:
  struct Shard {
    std::shared_ptr<TokenFile> file;          // or
    std::shared_ptr<std::vector<uint32_t>> memory;
    uint64_t size = 0;
    std::string name;
  };
  std::vector<Shard> shards_;
  uint64_t total_ = 0;
  uint32_t vocab_size_ = 0;
  uint64_t text_bytes_ = 0;
  std::string origin_;
};

// Yields (B, T) token and target batches, targets shifted by one. Window j of the
// run (j = 0, 1, 2, ... across steps) is a pure function of (seed, rank, j): a
// restarted job that restores position() sees exactly the batches it would have.
// With world > 1 ranks draw disjoint sample indices (rank r takes every world-th).
class BatchSampler {
 public:
  BatchSampler(const TokenDataset& data, int batch, int seq_len, uint64_t seed, int rank = 0, int world = 1);

  void next(int32_t* tokens, int32_t* targets);
  uint64_t position() const { return position_; }  // batches drawn so far
  void set_position(uint64_t p) { position_ = p; }

 private:
  const TokenDataset& data_;
  int B_, T_;
  uint64_t seed_;
  int rank_, world_;
  uint64_t windows_;
  uint64_t position_ = 0;
  std::vector<int32_t> scratch_;
};

}  // namespace distllm
