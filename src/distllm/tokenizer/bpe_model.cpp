#include "distllm/tokenizer/bpe_model.h"

#include <algorithm>

#include "distllm/base/error.h"
#include "distllm/tokenizer/byte_level.h"
#include "distllm/tokenizer/utf8.h"

namespace distllm {
namespace {

constexpr uint32_t kMeta = 0x2581;  // "▁", SentencePiece's space
constexpr char kMetaUtf8[] = "\xE2\x96\x81";

// The last character of s (ill-formed bytes count as U+FFFD).
uint32_t last_char(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  for (size_t len = 1; len <= 4 && len <= s.size(); ++len) {
    size_t start = s.size() - len;
    if (len < 4 && (p[start] & 0xC0) == 0x80) continue;
    Utf8Step step = utf8_step(p + start, len);
    return step.kind == Utf8Step::kChar && step.length == len ? step.cp : 0xFFFD;
  }
  return 0xFFFD;
}

}  // namespace

BpeModel::BpeModel(std::unordered_map<std::string, int32_t> vocab, const BpeModelSpec& spec, const std::string& origin)
    : origin_(origin),
      vocab_(std::move(vocab)),
      fuse_unk_(spec.fuse_unk),
      ignore_merges_(spec.ignore_merges),
      byte_fallback_(spec.byte_fallback),
      prefix_(spec.continuing_subword_prefix),
      suffix_(spec.end_of_word_suffix) {
  // Merges: both halves and the merged token (the right half without the continuing
  // prefix, as Hugging Face joins them) must be vocab tokens.
  std::vector<std::pair<int32_t, int32_t>> pairs;
  std::vector<int32_t> merged;
  pairs.reserve(spec.merges.size());
  merged.reserve(spec.merges.size());
  for (size_t r = 0; r < spec.merges.size(); ++r) {
    const auto& [a, b] = spec.merges[r];
    auto ia = vocab_.find(a);
    auto ib = vocab_.find(b);
    DL_CHECK(ia != vocab_.end(), "%s: %s is not in the vocab", spec.merge_where(r).c_str(), quote_for_message(a).c_str());
    DL_CHECK(ib != vocab_.end(), "%s: %s is not in the vocab", spec.merge_where(r).c_str(), quote_for_message(b).c_str());
    std::string joined = a;
    if (!prefix_.empty() && b.compare(0, prefix_.size(), prefix_) == 0) {
      joined.append(b, prefix_.size(), std::string::npos);
    } else {
      joined += b;
    }
    auto im = vocab_.find(joined);
    DL_CHECK(im != vocab_.end(), "%s: the merged token %s is not in the vocab", spec.merge_where(r).c_str(),
             quote_for_message(joined).c_str());
    pairs.emplace_back(ia->second, ib->second);
    merged.push_back(im->second);
  }
  // A pair listed twice keeps its last rank (GPT-2's dict(zip(merges, range(...))) and
  // Hugging Face's HashMap). Keep only those entries, in order: ranks keep their order.
  {
    BpeMerges last;
    last.build(pairs, merged);
    for (size_t r = 0; r < pairs.size(); ++r)
      if (last.find(pairs[r].first, pairs[r].second)->rank == r) merges_.push_back(pairs[r]);
    std::vector<int32_t> kept_merged;
    for (const auto& [a, b] : merges_) kept_merged.push_back(last.find(a, b)->merged);
    merge_table_.build(merges_, kept_merged);
  }

  for (int b = 0; b < 256; ++b) {
    std::string ch;
    utf8_append(ch, byte_level_char(static_cast<uint8_t>(b)));
    auto it = vocab_.find(ch);
    byte_token_[b] = it == vocab_.end() ? -1 : it->second;
    auto fb = vocab_.find(strprintf("<0x%02X>", b));
    fallback_token_[b] = fb == vocab_.end() ? -1 : fb->second;
    if (b < 128) {
      auto a = vocab_.find(std::string(1, static_cast<char>(b)));
      ascii_token_[b] = a == vocab_.end() ? -1 : a->second;
    }
  }
  if (spec.unk_token) {
    auto it = vocab_.find(*spec.unk_token);
    DL_CHECK(it != vocab_.end(), "%s: model.unk_token %s is not in the vocab", origin.c_str(),
             quote_for_message(*spec.unk_token).c_str());
    unk_id_ = it->second;
  }
  find_meta_boundaries();
}

void BpeModel::find_meta_boundaries() {
  splits_before_meta_ = false;
  if (ignore_merges_ || !prefix_.empty() || !suffix_.empty() || vocab_.count(kMetaUtf8) == 0) return;
  std::vector<const std::string*> names(vocab_.size() + 1, nullptr);
  for (const auto& [key, id] : vocab_)
    if (static_cast<size_t>(id) < names.size()) names[id] = &key;
  for (const auto& [a, b] : merges_) {
    if (static_cast<size_t>(a) >= names.size() || static_cast<size_t>(b) >= names.size() || !names[a] || !names[b])
      return;
    if (names[b]->compare(0, 3, kMetaUtf8) != 0) continue;
    // The left half of a merge that reaches across "▁": the last character it ends
    // with stops a cut there. A byte-fallback or unknown token there could stand for
    // any character: then no cut is safe.
    if ((unk_id_ && a == *unk_id_) || std::find(std::begin(fallback_token_), std::end(fallback_token_), a) != std::end(fallback_token_))
      return;
    glue_before_meta_.insert(last_char(*names[a]));
  }
  splits_before_meta_ = true;
}

bool BpeModel::glues_before_meta(std::string_view piece, size_t meta) const {
  return glue_before_meta_.count(last_char(piece.substr(0, meta))) != 0;
}

void BpeModel::encode(std::string_view piece, bool bytes, std::vector<int32_t>& out, BpeScratch& scratch) const {
  if (piece.empty()) return;
  std::vector<int32_t>& word = scratch.word;
  word.clear();
  if (ignore_merges_) {  // a piece that is itself a vocab token skips the merges
    auto it = bytes ? vocab_.find(bytes_to_byte_level(piece)) : vocab_.find(std::string(piece));
    if (it != vocab_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  if (bytes) {
    encode_bytes(piece, word);
  } else {
    encode_chars(piece, word);
  }
  bpe_merge(word, merge_table_, scratch);
  out.insert(out.end(), word.begin(), word.end());
}

void BpeModel::encode_bytes(std::string_view piece, std::vector<int32_t>& word) const {
  if (!prefix_.empty() || !suffix_.empty()) {
    encode_chars(bytes_to_byte_level(piece), word);
    return;
  }
  for (size_t i = 0; i < piece.size(); ++i) {
    auto b = static_cast<unsigned char>(piece[i]);
    int32_t id = byte_token_[b];
    if (id < 0) {
      if (byte_fallback_) {  // the character's <0xXX> tokens, as for any other text
        word.clear();
        encode_chars(bytes_to_byte_level(piece), word);
        return;
      }
      DL_CHECK(unk_id_.has_value(), "%s: cannot encode byte 0x%02X: the vocab has no token for it and no unk_token",
               origin_.c_str(), b);
      id = *unk_id_;
      if (fuse_unk_ && !word.empty() && word.back() == id) continue;
    }
    word.push_back(id);
  }
}

void BpeModel::encode_chars(std::string_view piece, std::vector<int32_t>& word) const {
  const auto* p = reinterpret_cast<const unsigned char*>(piece.data());
  const bool plain = prefix_.empty() && suffix_.empty();
  bool pending_unk = false;  // Hugging Face adds an unknown character's unk_token late, to fuse runs
  std::string symbol;
  for (size_t i = 0; i < piece.size();) {
    Utf8Step step = utf8_step(p + i, piece.size() - i);
    size_t len = step.kind == Utf8Step::kChar ? step.length : 1;
    bool first = i == 0, last = i + len == piece.size();
    int32_t id = -1;
    if (plain && p[i] < 0x80) {
      id = ascii_token_[p[i]];
      if (id < 0) symbol.assign(1, static_cast<char>(p[i]));
    } else {
      symbol.clear();
      if (!first) symbol += prefix_;
      symbol.append(piece.substr(i, len));
      if (last) symbol += suffix_;
      auto it = vocab_.find(symbol);
      if (it != vocab_.end()) id = it->second;
    }
    i += len;
    if (id >= 0) {
      if (pending_unk) word.push_back(*unk_id_);
      pending_unk = false;
      word.push_back(id);
      continue;
    }
    if (byte_fallback_) {
      bool all = true;
      for (unsigned char c : symbol) all = all && fallback_token_[c] >= 0;
      if (all) {
        for (unsigned char c : symbol) word.push_back(fallback_token_[c]);
        continue;
      }
    }
    if (!unk_id_) {
      if (step.kind == Utf8Step::kChar)
        throw_error(strprintf("%s: cannot encode U+%04X: the vocab has no token for it, no byte_fallback and no unk_token",
                              origin_.c_str(), step.cp));
      throw_error(strprintf("%s: cannot encode byte 0x%02X: the vocab has no token for it and no unk_token",
                            origin_.c_str(), static_cast<unsigned char>(symbol.back())));
    }
    if (pending_unk && !fuse_unk_) word.push_back(*unk_id_);
    pending_unk = true;
  }
  if (pending_unk) word.push_back(*unk_id_);
}

}  // namespace distllm
