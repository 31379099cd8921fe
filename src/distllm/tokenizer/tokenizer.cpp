// Encoding and decoding.
#include "distllm/tokenizer/tokenizer.h"

#include <algorithm>
#include <cstring>

#include "distllm/base/error.h"
#include "distllm/base/parallel.h"
#include "distllm/tokenizer/byte_level.h"
#include "distllm/tokenizer/pretokenizer.h"
#include "distllm/tokenizer/tokenizer_impl.h"

namespace distllm {
namespace {

// Per-thread memo of piece -> ids. Natural text repeats its words, so most pieces are
// found here and BPE runs once per distinct word. Keyed by the tokenizer's cache key;
// a few slots so that alternating between tokenizers does not thrash.
struct PieceCache {
  // Pieces are short: hash 8 bytes at a time (faster here than std::hash's Murmur).
  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const {
      uint64_t h = 0x9E3779B97F4A7C15ull ^ (s.size() * 0xC2B2AE3D27D4EB4Full);
      size_t i = 0;
      for (; i + 8 <= s.size(); i += 8) {
        uint64_t w;
        std::memcpy(&w, s.data() + i, 8);
        h = (h ^ w) * 0xFF51AFD7ED558CCDull;
        h ^= h >> 32;
      }
      uint64_t tail = 0;
      std::memcpy(&tail, s.data() + i, s.size() - i);
      h = (h ^ tail) * 0xC4CEB9FE1A85EC53ull;
      return static_cast<size_t>(h ^ (h >> 29));
    }
  };
  uint64_t key = 0;
  std::unordered_map<std::string, std::pair<uint32_t, uint32_t>, Hash, std::equal_to<>> map;  // -> (offset, count)
  std::vector<int32_t> ids;

  void reset(uint64_t new_key) {
    key = new_key;
    map.clear();
    ids.clear();
  }
};

constexpr size_t kMaxCachedPieceBytes = 64;
constexpr size_t kMaxCacheEntries = size_t{1} << 17;

struct ThreadState {
  PieceCache caches[4];
  unsigned victim = 0;
  BpeScratch scratch;
  std::vector<int32_t> word;
  std::string prefixed;  // a segment with the prefix space added

  PieceCache& cache_for(uint64_t key) {
    for (PieceCache& c : caches)
      if (c.key == key) return c;
    PieceCache& c = caches[victim++ % 4];
    c.reset(key);
    return c;
  }
};

ThreadState& thread_state() {
  thread_local ThreadState state;
  return state;
}

// Encodes one piece of a segment (the output of the pre-tokenizer).
void encode_piece(const TokenizerImpl& t, std::string_view piece, PieceCache& cache, ThreadState& ts,
                  std::vector<int32_t>& out) {
  bool cacheable = piece.size() <= kMaxCachedPieceBytes;
  if (cacheable) {
    auto it = cache.map.find(piece);
    if (it != cache.map.end()) {
      const int32_t* ids = cache.ids.data() + it->second.first;
      out.insert(out.end(), ids, ids + it->second.second);
      return;
    }
  }
  std::vector<int32_t>& word = ts.word;
  word.clear();
  bool whole = false;
  if (t.ignore_merges) {  // a piece that is itself a vocab token skips the merges
    auto it = t.model_vocab.find(bytes_to_byte_level(piece));
    if (it != t.model_vocab.end()) {
      word.push_back(it->second);
      whole = true;
    }
  }
  if (!whole) {
    for (char c : piece) {
      int32_t id = t.byte_token[static_cast<unsigned char>(c)];
      if (id < 0) {
        DL_CHECK(t.unk_id.has_value(), "%s: cannot encode byte 0x%02X: the vocab has no token for it and no unk_token",
                 t.origin.c_str(), static_cast<unsigned char>(c));
        id = *t.unk_id;
        if (t.fuse_unk && !word.empty() && word.back() == id) continue;
      }
      word.push_back(id);
    }
    bpe_merge(word, t.merge_table, ts.scratch);
  }
  out.insert(out.end(), word.begin(), word.end());
  if (cacheable) {
    if (cache.map.size() >= kMaxCacheEntries) cache.reset(cache.key);
    cache.map.emplace(std::string(piece),
                      std::make_pair(static_cast<uint32_t>(cache.ids.size()), static_cast<uint32_t>(word.size())));
    cache.ids.insert(cache.ids.end(), word.begin(), word.end());
  }
}

// Encodes text that holds no added token: the pre-tokenizer, then BPE on each piece.
void encode_segment(const TokenizerImpl& t, std::string_view segment, bool prefix_allowed, std::vector<int32_t>& out,
                    PieceCache& cache, ThreadState& ts) {
  if (segment.empty()) return;
  if (t.add_prefix_space && prefix_allowed && segment[0] != ' ') {
    ts.prefixed.assign(1, ' ');
    ts.prefixed.append(segment);
    segment = ts.prefixed;
  }
  if (t.use_regex || t.pre_form == PreTokenizerForm::kSplitThenByteLevel) {
    gpt2_pretokenize(segment, [&](std::string_view piece) { encode_piece(t, piece, cache, ts, out); });
  } else {
    encode_piece(t, segment, cache, ts, out);
  }
}

}  // namespace

Tokenizer::Tokenizer(std::shared_ptr<const TokenizerImpl> impl)
    : impl_(std::move(impl)), eos_(impl_->default_eos), bos_(impl_->default_bos) {}

void Tokenizer::encode_into(std::string_view text, bool allow_special, bool at_text_start,
                            std::vector<int32_t>& out) const {
  const TokenizerImpl& t = *impl_;
  ThreadState& ts = thread_state();
  PieceCache& cache = ts.cache_for(t.cache_key.load(std::memory_order_acquire));
  const AddedTokenMatcher& first = t.first_pass[allow_special ? 1 : 0];
  const AddedTokenMatcher& second = t.second_pass[allow_special ? 1 : 0];
  if (first.empty() && second.empty()) {
    encode_segment(t, text, at_text_start, out, cache, ts);
    return;
  }
  // Hugging Face gives every stretch of text between added tokens its own prefix
  // space; a chunk of a longer text (encode_parallel) starts mid-stretch.
  auto plain = [&](size_t begin, size_t end) {
    encode_segment(t, text.substr(begin, end - begin), begin != 0 || at_text_start, out, cache, ts);
  };
  auto second_pass = [&](size_t begin, size_t end) {
    std::string_view gap = text.substr(0, end);
    AddedTokenMatcher::Match m;
    while (begin < end && second.find(gap, begin, &m)) {
      plain(begin, m.begin);
      out.push_back(m.token->id);
      begin = m.end;
    }
    plain(begin, end);
  };
  size_t pos = 0;
  AddedTokenMatcher::Match m;
  while (pos < text.size() && first.find(text, pos, &m)) {
    second_pass(pos, m.begin);
    out.push_back(m.token->id);
    pos = m.end;
  }
  second_pass(pos, text.size());
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool allow_special) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 8);
  encode_into(text, allow_special, /*at_text_start=*/true, out);
  return out;
}

std::vector<int32_t> Tokenizer::encode_parallel(std::string_view text, bool allow_special) const {
  constexpr size_t kMinChunk = 64 << 10;
  int threads = num_threads();
  if (threads <= 1 || text.size() < 2 * kMinChunk || impl_->added_token_has_newline) return encode(text, allow_special);
  // Cut just before a '\n' that follows a printable ASCII character: every piece of
  // the pre-tokenizer (and every added token) ends there anyway, and the text after
  // it is split the same whether or not the text before it is present.
  size_t target = std::max(kMinChunk, text.size() / (static_cast<size_t>(threads) * 4));
  std::vector<size_t> cuts{0};
  for (size_t pos = target; pos < text.size();) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string_view::npos) break;
    unsigned char before = static_cast<unsigned char>(text[nl - 1]);
    if (before > 0x20 && before < 0x7F) {
      cuts.push_back(nl);
      pos = nl + target;
    } else {
      pos = nl + 1;
    }
  }
  cuts.push_back(text.size());
  const int64_t chunks = static_cast<int64_t>(cuts.size()) - 1;
  std::vector<std::vector<int32_t>> parts(chunks);
  std::vector<std::string> errors(chunks);
  parallel_for(0, chunks, [&](int64_t c) {
    try {
      encode_into(text.substr(cuts[c], cuts[c + 1] - cuts[c]), allow_special, c == 0, parts[c]);
    } catch (const Error& e) {  // exceptions must not cross the OpenMP region
      errors[c] = e.what();
    }
  });
  for (const std::string& e : errors) DL_CHECK(e.empty(), "%s", e.c_str());
  std::vector<int32_t> out;
  size_t total = 0;
  for (const auto& p : parts) total += p.size();
  out.reserve(total);
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  const TokenizerImpl& t = *impl_;
  std::string out;
  for (int32_t id : ids) {
    DL_CHECK(id >= 0 && id < vocab_size(), "decode: token id %d is out of range [0, %d)", id, vocab_size());
    if (skip_special && t.special[id]) continue;
    out += t.token_bytes[id];
  }
  return out;
}

std::string Tokenizer::token_bytes(int32_t id) const {
  DL_CHECK(id >= 0 && id < vocab_size(), "token id %d is out of range [0, %d)", id, vocab_size());
  return impl_->token_bytes[id];
}

int32_t Tokenizer::vocab_size() const { return static_cast<int32_t>(impl_->token_string.size()); }

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  auto it = impl_->by_string.find(std::string(token));
  if (it == impl_->by_string.end()) return std::nullopt;
  return it->second;
}

std::string Tokenizer::id_to_token(int32_t id) const {
  DL_CHECK(id >= 0 && id < vocab_size(), "token id %d is out of range [0, %d)", id, vocab_size());
  return impl_->token_string[id];
}

std::optional<int32_t> Tokenizer::eos_token_id() const { return eos_; }
std::optional<int32_t> Tokenizer::bos_token_id() const { return bos_; }

void Tokenizer::set_eos_token_id(std::optional<int32_t> id) {
  DL_CHECK(!id || (*id >= 0 && *id < vocab_size()), "EOS token id %d is out of range [0, %d)", *id, vocab_size());
  eos_ = id;
}

void Tokenizer::set_bos_token_id(std::optional<int32_t> id) {
  DL_CHECK(!id || (*id >= 0 && *id < vocab_size()), "BOS token id %d is out of range [0, %d)", *id, vocab_size());
  bos_ = id;
}

bool Tokenizer::is_special(int32_t id) const {
  return id >= 0 && id < vocab_size() && impl_->special[id] != 0;
}

void Tokenizer::clear_encode_cache() const {
  impl_->cache_key.store(next_tokenizer_cache_key(), std::memory_order_release);
}

}  // namespace distllm
