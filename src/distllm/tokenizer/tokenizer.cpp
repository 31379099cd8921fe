// Encoding and decoding.
#include "distllm/tokenizer/tokenizer.h"

#include <algorithm>
#include <cstring>

#include "distllm/base/error.h"
#include "distllm/base/parallel.h"
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
  std::string normalized;  // a stretch of text after the normalizer
  std::vector<AddedTokenMatcher::Match> raw_matches, normalized_matches;

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

// Receives the pre-tokenizer's pieces and appends their ids.
class PieceEncoder : public PieceSink {
 public:
  PieceEncoder(const TokenizerImpl& t, ThreadState& ts, std::vector<int32_t>& out)
      : t_(t),
        ts_(ts),
        cache_(ts.cache_for(t.cache_key.load(std::memory_order_acquire))),
        out_(out),
        bytes_(t.pre_tokenizer->byte_level_output()) {}

  void piece(std::string_view piece) override {
    if (bytes_) {
      encode_cached(piece);
    } else {
      t_.model->split_parts(piece, [this](std::string_view part) { encode_cached(part); });
    }
  }

 private:
  void encode_cached(std::string_view piece) {
    bool cacheable = piece.size() <= kMaxCachedPieceBytes;
    if (cacheable) {
      auto it = cache_.map.find(piece);
      if (it != cache_.map.end()) {
        const int32_t* ids = cache_.ids.data() + it->second.first;
        out_.insert(out_.end(), ids, ids + it->second.second);
        return;
      }
    }
    size_t start = out_.size();
    t_.model->encode(piece, bytes_, out_, ts_.scratch);
    if (cacheable) {
      if (cache_.map.size() >= kMaxCacheEntries) cache_.reset(cache_.key);
      size_t count = out_.size() - start;
      cache_.map.emplace(std::string(piece),
                         std::make_pair(static_cast<uint32_t>(cache_.ids.size()), static_cast<uint32_t>(count)));
      cache_.ids.insert(cache_.ids.end(), out_.begin() + static_cast<std::ptrdiff_t>(start), out_.end());
    }
  }

  const TokenizerImpl& t_;
  ThreadState& ts_;
  PieceCache& cache_;
  std::vector<int32_t>& out_;
  const bool bytes_;
};

}  // namespace

Tokenizer::Tokenizer(std::shared_ptr<const TokenizerImpl> impl)
    : impl_(std::move(impl)),
      eos_(impl_->default_eos),
      bos_(impl_->default_bos),
      special_before_(impl_->special_tokens.before),
      special_after_(impl_->special_tokens.after) {}

void Tokenizer::encode_into(std::string_view text, bool allow_special, bool at_text_start,
                            std::vector<int32_t>& out) const {
  const TokenizerImpl& t = *impl_;
  ThreadState& ts = thread_state();
  PieceEncoder encoder(t, ts, out);
  // A stretch of text between added tokens: normalized, searched for normalized added
  // tokens, split, encoded. Hugging Face treats each stretch as a text of its own (a
  // prefix space for each); a chunk of a longer text (encode_parallel) starts mid-stretch.
  auto stretch = [&](size_t begin, size_t end) {
    if (begin == end) return;
    std::string_view raw = text.substr(begin, end - begin);
    PieceFlags flags{at_text_start && begin == 0, begin != 0 || at_text_start};
    std::string_view normalized = raw;
    if (t.normalizer) {
      t.normalizer->normalize(raw, ts.normalized);
      normalized = ts.normalized;
    }
    if (t.normalized_pass.empty()) {
      t.pre_tokenizer->run(normalized, flags, encoder);
      return;
    }
    std::vector<AddedTokenMatcher::Match>& matches = ts.normalized_matches;
    matches.clear();
    t.normalized_pass.find_all(normalized, allow_special, matches);
    size_t pos = 0;
    for (const auto& m : matches) {
      if (m.begin > pos) t.pre_tokenizer->run(normalized.substr(pos, m.begin - pos), pos == 0 ? flags : PieceFlags{false, true}, encoder);
      out.push_back(m.token->id);
      pos = m.end;
    }
    if (pos < normalized.size()) t.pre_tokenizer->run(normalized.substr(pos), pos == 0 ? flags : PieceFlags{false, true}, encoder);
  };
  if (t.raw_pass.empty()) {
    stretch(0, text.size());
    return;
  }
  std::vector<AddedTokenMatcher::Match>& matches = ts.raw_matches;
  matches.clear();
  t.raw_pass.find_all(text, allow_special, matches);
  size_t pos = 0;
  for (const auto& m : matches) {
    stretch(pos, m.begin);
    out.push_back(m.token->id);
    pos = m.end;
  }
  stretch(pos, text.size());
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool allow_special) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 8);
  encode_into(text, allow_special, /*at_text_start=*/true, out);
  return out;
}

std::vector<int32_t> Tokenizer::add_special_tokens(std::span<const int32_t> ids) const {
  std::vector<int32_t> out;
  out.reserve(special_before_.size() + ids.size() + special_after_.size());
  out.insert(out.end(), special_before_.begin(), special_before_.end());
  out.insert(out.end(), ids.begin(), ids.end());
  out.insert(out.end(), special_after_.begin(), special_after_.end());
  return out;
}

std::vector<int32_t> Tokenizer::encode_with_special_tokens(std::string_view text) const {
  return add_special_tokens(encode(text));
}

std::vector<int32_t> Tokenizer::encode_parallel(std::string_view text, bool allow_special) const {
  constexpr size_t kMinChunk = 64 << 10;
  const TokenizerImpl& t = *impl_;
  int threads = num_threads();
  PreTokenizer::NewlineCut cut = t.pre_tokenizer->newline_cut();
  bool cuttable = cut != PreTokenizer::NewlineCut::kNone && !t.added_token_has_newline &&
                  (!t.normalizer || t.normalizer->local_at_newlines());
  if (threads <= 1 || text.size() < 2 * kMinChunk || !cuttable) return encode(text, allow_special);
  // Cut just before a '\n' where the pre-tokenizer always ends a piece and starts the
  // next one the same way whether or not the text before it is present: after a
  // printable ASCII character for GPT-2's pattern, after an ASCII letter for Llama 3's.
  auto cut_after = [cut](unsigned char before) {
    if (cut == PreTokenizer::NewlineCut::kAfterPrintable) return before > 0x20 && before < 0x7F;
    return (before >= 'a' && before <= 'z') || (before >= 'A' && before <= 'Z');
  };
  size_t target = std::max(kMinChunk, text.size() / (static_cast<size_t>(threads) * 4));
  std::vector<size_t> cuts{0};
  for (size_t pos = target; pos < text.size();) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string_view::npos) break;
    if (cut_after(static_cast<unsigned char>(text[nl - 1]))) {
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
  std::vector<std::string_view> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    DL_CHECK(id >= 0 && id < vocab_size(), "decode: token id %d is out of range [0, %d)", id, vocab_size());
    if (skip_special && t.special[id]) continue;
    tokens.push_back(t.token_string[id]);
  }
  return t.decoder->decode(tokens);
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
