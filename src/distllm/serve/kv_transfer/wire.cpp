#include "distllm/serve/kv_transfer/wire.h"

#include <cstring>

#include <nlohmann/json.hpp>

#include "distllm/base/error.h"
#include "distllm/base/strings.h"
#include "distllm/kernels/kv_layout.h"

namespace distllm::serve::kv_transfer {
namespace {

void put_u16(std::string& out, uint16_t v) {
  out.push_back(static_cast<char>(v & 0xff));
  out.push_back(static_cast<char>(v >> 8));
}
void put_u32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void put_u64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
uint16_t get_u16(const char* p) {
  return static_cast<uint16_t>(static_cast<uint8_t>(p[0]) | (static_cast<uint16_t>(static_cast<uint8_t>(p[1])) << 8));
}
uint32_t get_u32(const char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(static_cast<uint8_t>(p[i])) << (8 * i);
  return v;
}
uint64_t get_u64(const char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(static_cast<uint8_t>(p[i])) << (8 * i);
  return v;
}

constexpr uint8_t kNumDTypes = sizeof kAllDTypes / sizeof kAllDTypes[0];

// Payload bytes of one block: K and V slices (kernels/kv_layout.h) of every layer.
// Dimensions of up to 2^16 each can take the product past 64 bits; it then
// saturates at UINT64_MAX (over any size limit) instead of wrapping to a small number.
uint64_t payload_bytes(const KvFingerprint& f) {
  uint64_t n = kernels::kv_head_bytes(f.dtype, static_cast<int>(f.head_dim));
  for (uint64_t factor : {uint64_t{2}, uint64_t{f.num_layers}, uint64_t{f.block_size}, uint64_t{f.num_kv_heads}})
    if (__builtin_mul_overflow(n, factor, &n)) return UINT64_MAX;
  return n;
}

}  // namespace

size_t KvFingerprint::block_bytes() const { return static_cast<size_t>(payload_bytes(*this)); }

std::string KvFingerprint::describe() const {
  return strprintf("%u layers, %u KV heads, head dim %u, %s, block size %u, vocabulary %u", num_layers, num_kv_heads,
                   head_dim, dtype_short_name(dtype), block_size, vocab_size);
}

std::string fingerprint_mismatch(const KvFingerprint& mine, const KvFingerprint& theirs) {
  std::string out;
  auto field = [&](const char* name, uint64_t a, uint64_t b) {
    if (a == b) return;
    if (!out.empty()) out += ", ";
    out += strprintf("%s %llu here vs %llu there", name, static_cast<unsigned long long>(a),
                     static_cast<unsigned long long>(b));
  };
  field("layers", mine.num_layers, theirs.num_layers);
  field("KV heads", mine.num_kv_heads, theirs.num_kv_heads);
  field("head dim", mine.head_dim, theirs.head_dim);
  field("block size", mine.block_size, theirs.block_size);
  field("vocabulary", mine.vocab_size, theirs.vocab_size);
  if (mine.dtype != theirs.dtype) {
    if (!out.empty()) out += ", ";
    out += strprintf("dtype %s here vs %s there", dtype_short_name(mine.dtype), dtype_short_name(theirs.dtype));
  }
  return out;
}

uint64_t checksum(std::string_view payload) {
  // FNV-1a over 64-bit little-endian words (the last one zero-padded), then the length.
  uint64_t h = 0xcbf29ce484222325ull;
  const size_t n = payload.size();
  size_t i = 0;
  for (; i + 8 <= n; i += 8) h = (h ^ get_u64(payload.data() + i)) * 0x100000001b3ull;
  if (i < n) {
    char tail[8] = {};
    std::memcpy(tail, payload.data() + i, n - i);
    h = (h ^ get_u64(tail)) * 0x100000001b3ull;
  }
  return (h ^ static_cast<uint64_t>(n)) * 0x100000001b3ull;
}

std::string encode_header(const KvHeader& header) {
  const KvFingerprint& f = header.fingerprint;
  DL_CHECK(header.tokens.size() == static_cast<size_t>(header.num_blocks) * f.block_size,
           "KV transfer header: %zu tokens for %u blocks of %u", header.tokens.size(), header.num_blocks, f.block_size);
  std::string out;
  out.reserve(kFixedHeaderBytes + 4 * header.tokens.size());
  out.append(kMagic, 4);
  put_u16(out, kVersion);
  out.push_back(static_cast<char>(static_cast<uint8_t>(f.dtype)));
  out.push_back(0);
  put_u32(out, f.block_size);
  put_u32(out, f.num_layers);
  put_u32(out, f.num_kv_heads);
  put_u32(out, f.head_dim);
  put_u32(out, f.vocab_size);
  put_u32(out, static_cast<uint32_t>(header.tokens.size()));
  put_u32(out, header.num_blocks);
  for (int32_t t : header.tokens) put_u32(out, static_cast<uint32_t>(t));
  return out;
}

std::string encode_block_head(uint32_t index, std::string_view payload) {
  std::string out;
  put_u32(out, index);
  put_u64(out, checksum(payload));
  return out;
}

std::string encode_end(uint32_t num_blocks) {
  std::string out;
  put_u32(out, kEndMarker);
  put_u32(out, num_blocks);
  return out;
}

std::string encode_all(const KvHeader& header, const std::vector<std::string>& blocks) {
  DL_CHECK(blocks.size() == header.num_blocks, "KV transfer: %zu blocks for a header of %u", blocks.size(),
           header.num_blocks);
  std::string out = encode_header(header);
  for (size_t i = 0; i < blocks.size(); ++i) {
    DL_CHECK(blocks[i].size() == header.fingerprint.block_bytes(), "KV transfer: block %zu has %zu bytes, expected %zu",
             i, blocks[i].size(), header.fingerprint.block_bytes());
    out += encode_block_head(static_cast<uint32_t>(i), blocks[i]);
    out += blocks[i];
  }
  out += encode_end(header.num_blocks);
  return out;
}

KvStreamDecoder::Status KvStreamDecoder::fail(std::string message) {
  state_ = State::kError;
  status_ = Status::kError;
  error_ = "KV transfer: " + std::move(message);
  buf_.clear();
  return status_;
}

bool KvStreamDecoder::parse_fixed_header() {
  const char* p = buf_.data();
  if (std::memcmp(p, kMagic, 4) != 0) return reject("bad magic (not a KV transfer stream)");
  const uint16_t version = get_u16(p + 4);
  if (version != kVersion) return reject(strprintf("unsupported version %u (this build reads %u)", version, kVersion));
  const uint8_t dtype = static_cast<uint8_t>(p[6]);
  // A float type, or int8 (the --kv-cache-dtype int8 cache: slices carry a scale).
  if (dtype >= kNumDTypes || !(dtype_is_float(static_cast<DType>(dtype)) || static_cast<DType>(dtype) == DType::kI8))
    return reject(strprintf("dtype %u is not a floating-point type or int8", dtype));
  if (p[7] != 0) return reject(strprintf("flags %u are not 0", static_cast<uint8_t>(p[7])));
  KvFingerprint& f = header_.fingerprint;
  f.dtype = static_cast<DType>(dtype);
  f.block_size = get_u32(p + 8);
  f.num_layers = get_u32(p + 12);
  f.num_kv_heads = get_u32(p + 16);
  f.head_dim = get_u32(p + 20);
  f.vocab_size = get_u32(p + 24);
  const uint32_t num_tokens = get_u32(p + 28);
  header_.num_blocks = get_u32(p + 32);
  for (auto [name, v] : {std::pair<const char*, uint32_t>{"block size", f.block_size},
                         {"layers", f.num_layers},
                         {"KV heads", f.num_kv_heads},
                         {"head dim", f.head_dim}}) {
    if (v < 1 || v > limits_.max_dim) return reject(strprintf("%s %u is outside [1, %u]", name, v, limits_.max_dim));
  }
  if (f.vocab_size < 1 || f.vocab_size > limits_.max_vocab)
    return reject(strprintf("vocabulary %u is outside [1, %u]", f.vocab_size, limits_.max_vocab));
  if (num_tokens > limits_.max_tokens)
    return reject(strprintf("%u tokens is more than the limit of %u", num_tokens, limits_.max_tokens));
  if (static_cast<uint64_t>(header_.num_blocks) * f.block_size != num_tokens)
    return reject(strprintf("%u tokens is not %u blocks of %u", num_tokens, header_.num_blocks, f.block_size));
  const uint64_t block = payload_bytes(f);
  if (block > limits_.max_block_bytes)
    return reject(strprintf("a block of %llu bytes is more than the limit of %zu", static_cast<unsigned long long>(block),
                          limits_.max_block_bytes));
  if (block * header_.num_blocks > limits_.max_total_bytes)
    return reject(strprintf("%u blocks of %llu bytes is more than the limit of %zu bytes", header_.num_blocks,
                          static_cast<unsigned long long>(block), limits_.max_total_bytes));
  block_bytes_ = static_cast<size_t>(block);
  header_.tokens.resize(num_tokens);
  return true;
}

KvStreamDecoder::Status KvStreamDecoder::feed(std::string_view bytes) {
  if (state_ == State::kError) return status_;
  if (state_ == State::kDone) {
    if (!bytes.empty()) return fail(strprintf("%zu bytes after the end record", bytes.size()));
    return status_;
  }
  buf_.append(bytes.data(), bytes.size());
  size_t pos = 0;
  auto have = [&](size_t n) { return buf_.size() - pos >= n; };
  while (true) {
    const char* p = buf_.data() + pos;
    if (state_ == State::kHeader) {
      if (!have(kFixedHeaderBytes)) break;
      if (!parse_fixed_header()) return status_;
      pos += kFixedHeaderBytes;
      state_ = State::kTokens;
    } else if (state_ == State::kTokens) {
      const size_t n = header_.tokens.size();
      if (!have(4 * n)) break;
      for (size_t i = 0; i < n; ++i) {
        const int32_t t = static_cast<int32_t>(get_u32(p + 4 * i));
        if (t < 0 || static_cast<uint32_t>(t) >= header_.fingerprint.vocab_size)
          return fail(strprintf("token %zu is %d, outside the vocabulary [0, %u)", i, t, header_.fingerprint.vocab_size));
        header_.tokens[i] = t;
      }
      pos += 4 * n;
      state_ = header_.num_blocks > 0 ? State::kBlockHead : State::kEnd;
    } else if (state_ == State::kBlockHead) {
      if (!have(kBlockRecordHeadBytes)) break;
      const uint32_t index = get_u32(p);
      if (index == kEndMarker)
        return fail(strprintf("end record after %zu of %u blocks", blocks_.size(), header_.num_blocks));
      if (index != blocks_.size())
        return fail(strprintf("block index %u where %zu was expected", index, blocks_.size()));
      expected_checksum_ = get_u64(p + 4);
      pos += kBlockRecordHeadBytes;
      state_ = State::kBlockData;
    } else if (state_ == State::kBlockData) {
      if (!have(block_bytes_)) break;
      std::string payload(p, block_bytes_);
      if (checksum(payload) != expected_checksum_)
        return fail(strprintf("block %zu fails its checksum (corrupt bytes)", blocks_.size()));
      blocks_.push_back(std::move(payload));
      pos += block_bytes_;
      state_ = blocks_.size() == header_.num_blocks ? State::kEnd : State::kBlockHead;
    } else if (state_ == State::kEnd) {
      if (!have(kEndRecordBytes)) break;
      if (get_u32(p) != kEndMarker) return fail("missing end record after the last block");
      if (get_u32(p + 4) != header_.num_blocks)
        return fail(strprintf("end record counts %u blocks, the header %u", get_u32(p + 4), header_.num_blocks));
      pos += kEndRecordBytes;
      if (pos != buf_.size()) return fail(strprintf("%zu bytes after the end record", buf_.size() - pos));
      state_ = State::kDone;
      status_ = Status::kDone;
      buf_.clear();
      return status_;
    } else {
      break;
    }
  }
  buf_.erase(0, pos);
  return status_;
}

std::string encode_prefill_request(const std::vector<int32_t>& tokens) {
  return nlohmann::json{{"prompt_token_ids", tokens}}.dump();
}

std::vector<int32_t> parse_prefill_request(std::string_view body, uint32_t vocab_size, uint32_t max_tokens) {
  nlohmann::json j = nlohmann::json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object()) throw Error("the body must be a JSON object");
  auto it = j.find("prompt_token_ids");
  if (it == j.end() || !it->is_array() || it->empty())
    throw Error("'prompt_token_ids' must be a non-empty array of token ids");
  if (it->size() > max_tokens)
    throw Error(strprintf("'prompt_token_ids' has %zu tokens, more than the limit of %u", it->size(), max_tokens));
  std::vector<int32_t> tokens;
  tokens.reserve(it->size());
  for (const nlohmann::json& t : *it) {
    if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= static_cast<int64_t>(vocab_size))
      throw Error(strprintf("'prompt_token_ids' must hold token ids in [0, %u)", vocab_size));
    tokens.push_back(static_cast<int32_t>(t.get<int64_t>()));
  }
  return tokens;
}

KvHeader decode_all(std::string_view bytes, std::vector<std::string>& blocks, DecoderLimits limits) {
  KvStreamDecoder d(limits);
  KvStreamDecoder::Status s = d.feed(bytes);
  if (s == KvStreamDecoder::Status::kError) throw Error(d.error());
  if (s != KvStreamDecoder::Status::kDone)
    throw Error(d.has_header() ? strprintf("KV transfer: truncated after %zu of %u blocks", d.blocks().size(),
                                           d.header().num_blocks)
                               : std::string("KV transfer: truncated header"));
  blocks = std::move(d.blocks());
  return d.header();
}

}  // namespace distllm::serve::kv_transfer
