// Prefill/decode disaggregation, unit level: the KV wire format (round trip, strict
// rejection of truncated, corrupt and mismatched streams), importing blocks into
// the KV cache manager's prefix cache, and a runner's block export/import (a
// runner that continues from imported blocks computes what the exporter would).
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "distllm/base/error.h"
#include "distllm/io/file_util.h"
#include "distllm/serve/inference_runner.h"
#include "distllm/serve/kv_cache_manager.h"
#include "distllm/serve/kv_transfer/wire.h"
#include "serve/engine_harness.h"
#include "serve/test_codec.h"

namespace distllm::serve {
namespace {

using namespace kv_transfer;

KvFingerprint small_fp() {
  KvFingerprint f;
  f.dtype = DType::kF32;
  f.block_size = 4;
  f.num_layers = 2;
  f.num_kv_heads = 2;
  f.head_dim = 3;
  f.vocab_size = 100;
  return f;
}

struct Sample {
  KvHeader header;
  std::vector<std::string> blocks;
  std::string bytes;
};

Sample sample(uint32_t num_blocks) {
  Sample s;
  s.header.fingerprint = small_fp();
  s.header.num_blocks = num_blocks;
  std::mt19937 rng(5);
  for (uint32_t i = 0; i < num_blocks * 4; ++i) s.header.tokens.push_back(static_cast<int32_t>(rng() % 100));
  for (uint32_t b = 0; b < num_blocks; ++b) {
    std::string data(s.header.fingerprint.block_bytes(), '\0');
    for (char& c : data) c = static_cast<char>(rng());
    s.blocks.push_back(std::move(data));
  }
  s.bytes = encode_all(s.header, s.blocks);
  return s;
}

void put_u32(std::string& s, size_t at, uint32_t v) {
  for (int i = 0; i < 4; ++i) s[at + static_cast<size_t>(i)] = static_cast<char>((v >> (8 * i)) & 0xff);
}

std::string decode_error(const std::string& bytes) {
  std::vector<std::string> blocks;
  try {
    decode_all(bytes, blocks);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(ServeKvWire, RoundTripsWholeAndByteByByte) {
  Sample s = sample(3);
  EXPECT_EQ(s.header.fingerprint.block_bytes(), 2u * 2 * 4 * 2 * 3 * 4);
  EXPECT_EQ(s.bytes.size(), kFixedHeaderBytes + 4 * 12 + 3 * (kBlockRecordHeadBytes + s.blocks[0].size()) + kEndRecordBytes);
  std::vector<std::string> blocks;
  KvHeader h = decode_all(s.bytes, blocks);
  EXPECT_EQ(h.fingerprint, s.header.fingerprint);
  EXPECT_EQ(h.tokens, s.header.tokens);
  EXPECT_EQ(blocks, s.blocks);

  KvStreamDecoder d;
  for (size_t i = 0; i < s.bytes.size(); ++i) {
    auto st = d.feed(std::string_view(s.bytes).substr(i, 1));
    ASSERT_EQ(st, i + 1 == s.bytes.size() ? KvStreamDecoder::Status::kDone : KvStreamDecoder::Status::kNeedMore) << i;
  }
  EXPECT_EQ(d.blocks(), s.blocks);
  EXPECT_EQ(d.header().tokens, s.header.tokens);

  Sample empty = sample(0);
  EXPECT_EQ(decode_all(empty.bytes, blocks).num_blocks, 0u);
  EXPECT_TRUE(blocks.empty());
}

TEST(ServeKvWire, DecodesTheSeedsWrittenFromTheDocumentedFormat) {
  // fuzz/corpus/fuzz_kv_wire was written by an independent Python encoder of the
  // format in docs/serving.md (checksums included).
  for (auto [name, num_blocks] : {std::pair<const char*, uint32_t>{"empty", 0}, {"one_block", 1}, {"three_blocks_bf16", 3},
                                      {"two_blocks_int8", 2}}) {
    std::string bytes = distllm::read_file(std::string(DISTLLM_SOURCE_DIR) + "/fuzz/corpus/fuzz_kv_wire/" + name);
    std::vector<std::string> blocks;
    KvHeader h = decode_all(bytes, blocks);
    EXPECT_EQ(h.num_blocks, num_blocks) << name;
    EXPECT_EQ(blocks.size(), num_blocks) << name;
    EXPECT_EQ(encode_all(h, blocks), bytes) << name;
  }
}

TEST(ServeKvWire, TruncatedStreamsNeverComplete) {
  Sample s = sample(2);
  for (size_t n = 0; n < s.bytes.size(); ++n) {
    KvStreamDecoder d;
    EXPECT_EQ(d.feed(std::string_view(s.bytes).substr(0, n)), KvStreamDecoder::Status::kNeedMore) << n;
    EXPECT_NE(decode_error(s.bytes.substr(0, n)).find("truncated"), std::string::npos) << n;
  }
}

TEST(ServeKvWire, RejectsCorruptAndMalformedStreams) {
  const Sample s = sample(2);
  const size_t first_block = kFixedHeaderBytes + 4 * 8;
  const size_t payload = first_block + kBlockRecordHeadBytes;
  auto with = [&](auto edit) {
    std::string b = s.bytes;
    edit(b);
    return decode_error(b);
  };
  EXPECT_NE(with([&](std::string& b) { b[payload + 5] ^= 1; }).find("checksum"), std::string::npos);
  EXPECT_NE(with([&](std::string& b) { b[first_block + 5] ^= 1; }).find("checksum"), std::string::npos);
  EXPECT_NE(with([](std::string& b) { b[0] = 'X'; }).find("magic"), std::string::npos);
  EXPECT_NE(with([](std::string& b) { b[4] = 2; }).find("version"), std::string::npos);
  EXPECT_NE(with([](std::string& b) { b[6] = static_cast<char>(DType::kI32); }).find("dtype"), std::string::npos);
  EXPECT_NE(with([](std::string& b) { b[6] = static_cast<char>(200); }).find("dtype"), std::string::npos);
  EXPECT_NE(with([](std::string& b) { b[7] = 1; }).find("flags"), std::string::npos);
  EXPECT_NE(with([](std::string& b) { put_u32(b, 8, 0); }).find("block size"), std::string::npos);
  EXPECT_NE(with([](std::string& b) { put_u32(b, 12, 1u << 20); }).find("layers"), std::string::npos);
  EXPECT_NE(with([](std::string& b) { put_u32(b, 28, 7); }).find("not 2 blocks"), std::string::npos);
  EXPECT_NE(with([](std::string& b) { put_u32(b, 28, 0xFFFFFFF0u); }).find("limit"), std::string::npos);
  EXPECT_NE(with([](std::string& b) { put_u32(b, 24, 0); }).find("vocabulary"), std::string::npos);
  EXPECT_NE(with([](std::string& b) { put_u32(b, kFixedHeaderBytes + 4, 100); }).find("outside the vocabulary"),
            std::string::npos);
  EXPECT_NE(with([&](std::string& b) { put_u32(b, first_block, 1); }).find("block index"), std::string::npos);
  EXPECT_NE(with([&](std::string& b) { put_u32(b, first_block, kEndMarker); }).find("end record after 0"),
            std::string::npos);
  EXPECT_NE(with([](std::string& b) { put_u32(b, b.size() - 4, 3); }).find("end record counts"), std::string::npos);
  EXPECT_NE(with([](std::string& b) { put_u32(b, b.size() - 8, 0); }).find("missing end record"), std::string::npos);
  EXPECT_NE(with([](std::string& b) { b.push_back(0); }).find("after the end record"), std::string::npos);
  // A header whose blocks would be huge is refused before anything is allocated.
  DecoderLimits small;
  small.max_block_bytes = 64;
  KvStreamDecoder d(small);
  EXPECT_EQ(d.feed(s.bytes), KvStreamDecoder::Status::kError);
  EXPECT_NE(d.error().find("limit"), std::string::npos);
  // Once failed, it stays failed.
  EXPECT_EQ(d.feed("more"), KvStreamDecoder::Status::kError);
}

// Every dimension at its limit of 2^16: a block would be 2 x 2^64 x (head_dim x 8
// bytes), more than 64 bits hold. The size must not wrap around to something small
// (it used to wrap to 0, and such a header passed as blocks of 0 bytes).
TEST(ServeKvWire, RefusesBlocksWhoseSizeOverflows) {
  for (DType dtype : {DType::kF64, DType::kI8}) {
    KvHeader h;
    h.fingerprint = small_fp();
    h.fingerprint.dtype = dtype;
    h.fingerprint.block_size = h.fingerprint.num_layers = h.fingerprint.num_kv_heads = h.fingerprint.head_dim = 1u << 16;
    std::vector<std::string> blocks;
    try {
      decode_all(encode_all(h, {}), blocks);
      ADD_FAILURE() << "decoded a header of " << dtype_short_name(dtype) << " blocks past 2^64 bytes";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("limit"), std::string::npos) << e.what();
    }
  }
}

TEST(ServeKvWire, FingerprintMismatchNamesTheFields) {
  KvFingerprint a = small_fp(), b = small_fp();
  EXPECT_EQ(fingerprint_mismatch(a, b), "");
  b.num_layers = 3;
  b.dtype = DType::kBF16;
  b.block_size = 16;
  std::string m = fingerprint_mismatch(a, b);
  EXPECT_NE(m.find("layers 2 here vs 3 there"), std::string::npos) << m;
  EXPECT_NE(m.find("block size 4 here vs 16 there"), std::string::npos) << m;
  EXPECT_NE(m.find("dtype f32 here vs bf16 there"), std::string::npos) << m;
  EXPECT_EQ(m.find("vocabulary"), std::string::npos) << m;
}

TEST(ServeKvCacheImport, ImportedBlocksAreACachedPrefix) {
  KvCacheManager kv(6, 4, true);
  std::vector<int32_t> tokens;
  for (int i = 0; i < 13; ++i) tokens.push_back(i + 1);
  std::vector<std::pair<int, int32_t>> writes;
  auto writer = [&](int i, int32_t b) { writes.emplace_back(i, b); };
  EXPECT_EQ(kv.import_prefix(tokens, 3, writer), 3);
  EXPECT_EQ(writes.size(), 3u);
  EXPECT_EQ(kv.num_cached_blocks(), 3);
  EXPECT_EQ(kv.num_active_blocks(), 0);  // held by the prefix cache alone
  kv.check_invariants();
  // Already cached: nothing is written again.
  writes.clear();
  EXPECT_EQ(kv.import_prefix(tokens, 3, writer), 3);
  EXPECT_TRUE(writes.empty());
  // A request with this prompt starts past the imported blocks.
  EXPECT_EQ(kv.acquire_cached_prefix(1, tokens), 12);
  kv.check_invariants();
  // Out of room: 3 blocks are pinned by sequence 1, 3 free; a 5-block import of
  // another prompt stops at 3.
  std::vector<int32_t> other(21, 7);
  EXPECT_EQ(kv.import_prefix(other, 5, writer), 3);
  kv.check_invariants();
  kv.free(1);
  kv.check_invariants();
  // More blocks than the tokens hold: only the full blocks count.
  KvCacheManager small(8, 4, true);
  EXPECT_EQ(small.import_prefix(std::vector<int32_t>(6, 3), 4, writer), 1);
  // Prefix cache off: nothing to import into.
  KvCacheManager off(8, 4, false);
  EXPECT_EQ(off.import_prefix(tokens, 3, writer), 0);
  // A writer that throws leaves nothing behind.
  KvCacheManager failing(8, 4, true);
  EXPECT_THROW(failing.import_prefix(tokens, 3, [](int, int32_t) { throw Error("boom"); }), Error);
  EXPECT_EQ(failing.num_free_blocks(), 8);
  failing.check_invariants();
}

TEST(ServeKvRunnerTransfer, ImportedBlocksContinueTheSequenceIdentically) {
  for (DType kv_dtype : {DType::kF32, DType::kBF16, DType::kI8})
  for (ModelFamily family : {ModelFamily::kGpt2, ModelFamily::kLlama}) {
    auto model = testing::tiny_model(family);
    InferenceRunner a(model, DType::kF32, kv_dtype), b(model, DType::kF32, kv_dtype);
    const int bs = 4;
    a.allocate_kv(8, bs);
    b.allocate_kv(8, bs);
    const size_t bytes = a.kv_bytes_per_block(bs);
    EXPECT_EQ(a.kv_geometry().dtype, kv_dtype);
    // int8 slices carry one f32 scale each (kernels/kv_layout.h).
    const size_t slice = a.kv_geometry().head_dim * dtype_size(kv_dtype) + (kv_dtype == DType::kI8 ? 4 : 0);
    EXPECT_EQ(bytes, 2u * bs * a.kv_geometry().num_layers * a.kv_geometry().num_kv_heads * slice);
    std::vector<int32_t> tokens;
    for (int i = 0; i < 12; ++i) tokens.push_back((i * 31 + 7) % 300);
    // Runner a computes positions [0, 10) into blocks {5, 2, 7}.
    SequenceChunk prefill;
    prefill.request_id = 1;
    prefill.tokens.assign(tokens.begin(), tokens.begin() + 10);
    prefill.block_table = {5, 2, 7};
    std::vector<float> logits;
    a.execute({prefill}, logits);
    // Its blocks go to other block ids of runner b.
    const std::vector<int32_t> from = {5, 2, 7}, to = {1, 6, 3};
    for (size_t i = 0; i < from.size(); ++i) {
      std::string data(bytes, '\0'), back(bytes, '\1');
      a.read_kv_block(from[i], data.data());
      b.write_kv_block(to[i], data.data());
      b.read_kv_block(to[i], back.data());
      EXPECT_EQ(back, data) << i;
    }
    // Both continue with positions [10, 12): identical logits.
    SequenceChunk next;
    next.request_id = 1;
    next.tokens.assign(tokens.begin() + 10, tokens.end());
    next.start_pos = 10;
    next.num_logits = 2;
    next.block_table = from;
    std::vector<float> la, lb;
    a.execute({next}, la);
    next.block_table = to;
    b.execute({next}, lb);
    ASSERT_EQ(la.size(), lb.size());
    EXPECT_EQ(la, lb);
    std::string sink(bytes, '\0');
    EXPECT_THROW(a.read_kv_block(8, sink.data()), Error);
    EXPECT_THROW(b.write_kv_block(-1, sink.data()), Error);
  }
}

// Engine level: blocks exported by one engine and imported by another are what the
// second engine's requests start from (a prefix-cache hit), and greedy outputs equal
// an engine that computed everything itself.
TEST(ServeKvEngineTransfer, ImportedPrefixGivesTheSameGreedyOutput) {
  auto model = testing::tiny_model(ModelFamily::kLlama);
  testing::ByteCodec codec;
  EngineConfig cfg;
  cfg.block_size = 4;
  cfg.num_blocks = 64;
  cfg.check_invariants = true;
  InferenceRunner ra(model), rb(model), rc(model);
  ServeMetrics ma("a"), mb("b"), mc("c");
  Engine a(ra, codec, cfg, ma), b(rb, codec, cfg, mb), c(rc, codec, cfg, mc);
  std::vector<int32_t> prompt = codec.encode("a prompt of several blocks, not a multiple of four");
  ASSERT_EQ(prompt.size() % 4, 2u);
  const int usable = static_cast<int>((prompt.size() - 1) / 4);
  std::vector<int32_t> run(prompt.begin(), prompt.begin() + usable * 4);
  // Not running yet: refused.
  EXPECT_THROW(b.import_prefix(run, {}, 1.0), RequestError);
  a.start();
  b.start();
  c.start();
  auto generate = [&](Engine& e, int max_tokens) {
    GenerationRequest r;
    r.prompt = prompt;
    r.max_tokens = max_tokens;
    r.sampling.temperature = 0;
    r.ignore_eos = true;
    auto q = std::make_shared<OutputQueue>();
    e.submit({r}, q);
    return testing::collect(*q, 1)[0];
  };
  generate(a, 1);  // a's prefix cache now holds the prompt's full blocks
  std::vector<std::string> blocks = a.export_cached_prefix(run, usable, 10.0);
  ASSERT_EQ(static_cast<int>(blocks.size()), usable);
  EXPECT_EQ(blocks[0].size(), ra.kv_bytes_per_block(4));
  EXPECT_EQ(b.import_prefix(run, blocks, 10.0), usable);
  EXPECT_EQ(b.import_prefix(run, blocks, 10.0), usable);  // again: already cached
  testing::Choice got = generate(b, 12), want = generate(c, 12);
  EXPECT_EQ(got.tokens, want.tokens);
  EXPECT_EQ(got.cached_tokens, usable * 4);  // started past the imported blocks
  EXPECT_EQ(want.cached_tokens, 0);
  // A block of the wrong size is refused and leaves nothing behind.
  blocks[0].pop_back();
  std::vector<int32_t> other(run.size(), 5);
  EXPECT_THROW(b.import_prefix(other, blocks, 10.0), Error);
  EXPECT_EQ(b.export_cached_prefix(other, usable, 10.0).size(), 0u);
}

}  // namespace
}  // namespace distllm::serve
