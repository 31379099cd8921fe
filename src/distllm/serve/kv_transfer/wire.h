// The KV transfer wire format: a prompt's full KV blocks, block by block, from a
// prefill replica to a decode replica (docs/serving.md, "Prefill/decode
// disaggregation", has the byte-by-byte table). All integers little-endian.
//
//   header   magic "DLKV", u16 version (1), u8 dtype (distllm::DType: a float type
//            or int8), u8 flags (0),
//            u32 block_size, u32 num_layers, u32 num_kv_heads, u32 head_dim,
//            u32 vocab_size, u32 num_tokens, u32 num_blocks,
//            then num_tokens i32 token ids
//   block    u32 index (0, 1, ... in order), u64 FNV-1a checksum of the payload,
//            payload: for each layer, K then V, each [block_size][num_kv_heads] slices
//            of dtype: head_dim elements (int8: then their f32 scale, the cache's
//            layout in kernels/kv_layout.h)
//   end      u32 0xFFFFFFFF, u32 num_blocks (again)
//
// num_tokens == num_blocks * block_size: block i holds the K/V of tokens
// [i*block_size, (i+1)*block_size). The decoder is strict: every field is checked
// against limits before anything is allocated, and any byte after the end record is
// an error.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "distllm/tensor/dtype.h"

namespace distllm::serve::kv_transfer {

inline constexpr char kMagic[4] = {'D', 'L', 'K', 'V'};
inline constexpr uint16_t kVersion = 1;
inline constexpr uint32_t kEndMarker = 0xFFFFFFFFu;
inline constexpr size_t kFixedHeaderBytes = 36;
inline constexpr size_t kBlockRecordHeadBytes = 12;  // index + checksum
inline constexpr size_t kEndRecordBytes = 8;

// What must agree between the two replicas for KV blocks to be interchangeable.
struct KvFingerprint {
  DType dtype = DType::kF32;
  uint32_t block_size = 0;
  uint32_t num_layers = 0;
  uint32_t num_kv_heads = 0;
  uint32_t head_dim = 0;
  uint32_t vocab_size = 0;

  // Payload bytes of one block (all layers, K and V).
  size_t block_bytes() const;
  std::string describe() const;
  bool operator==(const KvFingerprint&) const = default;
};

// Empty when `theirs` can be used by `mine`, else which fields differ and how.
std::string fingerprint_mismatch(const KvFingerprint& mine, const KvFingerprint& theirs);

struct KvHeader {
  KvFingerprint fingerprint;
  uint32_t num_blocks = 0;
  std::vector<int32_t> tokens;  // num_blocks * block_size
};

uint64_t checksum(std::string_view payload);

std::string encode_header(const KvHeader& header);
std::string encode_block_head(uint32_t index, std::string_view payload);  // followed by the payload
std::string encode_end(uint32_t num_blocks);

// Everything a transfer holds, encoded at once (tests, and small transfers).
std::string encode_all(const KvHeader& header, const std::vector<std::string>& blocks);

struct DecoderLimits {
  uint32_t max_tokens = 1u << 22;
  uint32_t max_dim = 1u << 16;       // block size, layers, kv heads, head dim
  uint32_t max_vocab = 1u << 24;
  size_t max_block_bytes = 1u << 30;
  size_t max_total_bytes = size_t{16} << 30;  // all blocks together
};

// Incremental decoder: feed bytes as they arrive. Blocks are kept in order.
class KvStreamDecoder {
 public:
  enum class Status { kNeedMore, kDone, kError };

  explicit KvStreamDecoder(DecoderLimits limits = {}) : limits_(limits) {}

  Status feed(std::string_view bytes);
  Status status() const { return status_; }
  const std::string& error() const { return error_; }

  bool has_header() const { return state_ != State::kHeader && state_ != State::kTokens; }
  const KvHeader& header() const { return header_; }
  // Payloads of the blocks received whole so far (checksums verified).
  const std::vector<std::string>& blocks() const { return blocks_; }
  std::vector<std::string>& blocks() { return blocks_; }

 private:
  enum class State { kHeader, kTokens, kBlockHead, kBlockData, kEnd, kDone, kError };
  Status fail(std::string message);
  bool reject(std::string message) {
    fail(std::move(message));
    return false;
  }
  bool parse_fixed_header();

  DecoderLimits limits_;
  State state_ = State::kHeader;
  Status status_ = Status::kNeedMore;
  std::string error_;
  std::string buf_;  // bytes of the current field not yet consumed
  KvHeader header_;
  size_t block_bytes_ = 0;
  uint64_t expected_checksum_ = 0;
  std::vector<std::string> blocks_;
};

// The request body of POST /internal/kv/prefill: {"prompt_token_ids": [ids...]}.
std::string encode_prefill_request(const std::vector<int32_t>& tokens);
// Parses and checks it (a JSON object whose "prompt_token_ids" is a non-empty array
// of at most max_tokens integers in [0, vocab_size)); throws distllm::Error naming
// what is wrong.
std::vector<int32_t> parse_prefill_request(std::string_view body, uint32_t vocab_size, uint32_t max_tokens = 1u << 22);

// Decodes a complete transfer; throws distllm::Error on any problem.
KvHeader decode_all(std::string_view bytes, std::vector<std::string>& blocks, DecoderLimits limits = {});

}  // namespace distllm::serve::kv_transfer
