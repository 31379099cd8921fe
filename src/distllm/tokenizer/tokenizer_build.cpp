// build_tokenizer(): validation of a loaded tokenizer and construction of its tables.
#include <algorithm>

#include "distllm/base/error.h"
#include "distllm/tokenizer/byte_level.h"
#include "distllm/tokenizer/tokenizer_impl.h"
#include "distllm/tokenizer/utf8.h"

namespace distllm {
namespace {

// Rust's char::is_whitespace (the Unicode White_Space property), which Hugging Face
// uses for an added token's lstrip/rstrip.
bool is_white_space(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
         cp == 0x3000;
}

// Length of the white-space character that ends at text[pos] (exclusive), or 0.
size_t white_space_before(std::string_view text, size_t lo, size_t pos) {
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  for (size_t len = 1; len <= 4 && len <= pos - lo; ++len) {
    size_t start = pos - len;
    if (len < 4 && (p[start] & 0xC0) == 0x80) continue;  // a continuation byte: look further back
    Utf8Step step = utf8_step(p + start, text.size() - start);
    return step.kind == Utf8Step::kChar && step.length == len && is_white_space(step.cp) ? len : 0;
  }
  return 0;
}

size_t white_space_at(std::string_view text, size_t pos) {
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  Utf8Step step = utf8_step(p + pos, text.size() - pos);
  return step.kind == Utf8Step::kChar && is_white_space(step.cp) ? step.length : 0;
}

// Names a token for messages: quoted, with bytes that are not printable escaped.
std::string quote(std::string_view s) {
  std::string out = "'";
  for (unsigned char c : s.substr(0, 64)) {
    if (c < 0x20 || c == 0x7F) {
      out += strprintf("\\x%02X", c);
    } else {
      out += static_cast<char>(c);
    }
  }
  if (s.size() > 64) out += "...";
  return out + "'";
}

}  // namespace

void AddedTokenMatcher::build(std::vector<const AddedToken*> tokens) {
  for (auto& list : by_first_byte_) list.clear();
  count_ = tokens.size();
  std::stable_sort(tokens.begin(), tokens.end(),
                   [](const AddedToken* a, const AddedToken* b) { return a->content.size() > b->content.size(); });
  for (const AddedToken* t : tokens) by_first_byte_[static_cast<unsigned char>(t->content[0])].push_back(t);
}

bool AddedTokenMatcher::find(std::string_view text, size_t from, Match* match) const {
  if (count_ == 0) return false;
  for (size_t i = from; i < text.size(); ++i) {
    const auto& candidates = by_first_byte_[static_cast<unsigned char>(text[i])];
    for (const AddedToken* t : candidates) {
      if (text.compare(i, t->content.size(), t->content) != 0) continue;
      size_t begin = i, end = i + t->content.size();
      if (t->lstrip) {
        while (size_t len = white_space_before(text, from, begin)) begin -= len;
      }
      if (t->rstrip) {
        while (end < text.size()) {
          size_t len = white_space_at(text, end);
          if (len == 0) break;
          end += len;
        }
      }
      *match = Match{begin, end, t};
      return true;
    }
  }
  return false;
}

uint64_t next_tokenizer_cache_key() {
  static std::atomic<uint64_t> counter{1};
  return counter.fetch_add(1);
}

std::shared_ptr<TokenizerImpl> build_tokenizer(TokenizerSpec spec) {
  auto impl = std::make_shared<TokenizerImpl>();
  TokenizerImpl& t = *impl;
  t.origin = spec.origin;
  constexpr int64_t kMaxId = (int64_t{1} << 31) - 2;

  // Ids: model.vocab first, then added tokens; every id named once, no gaps.
  std::vector<std::string> names;  // by id, from whichever list named it first
  std::vector<uint8_t> named;
  auto claim = [&](int64_t id, const std::string& where, const std::string& token) {
    DL_CHECK(id >= 0 && id <= kMaxId, "%s: token %s has id %lld, outside [0, 2^31-1)", where.c_str(),
             quote(token).c_str(), (long long)id);
    // Ids must end up dense, so an id beyond twice the number of entries is already
    // wrong; refusing it here also bounds memory for hostile input.
    size_t limit = spec.vocab.size() + spec.added.size();
    DL_CHECK(static_cast<size_t>(id) < limit, "%s: token %s has id %lld, but the file defines only %zu tokens",
             where.c_str(), quote(token).c_str(), (long long)id, limit);
    if (static_cast<size_t>(id) >= names.size()) {
      names.resize(id + 1);
      named.resize(id + 1, 0);
    }
  };
  for (const auto& [key, id] : spec.vocab) {
    claim(id, spec.vocab_where, key);
    DL_CHECK(!named[id], "%s: id %lld is used by both %s and %s", spec.vocab_where.c_str(), (long long)id,
             quote(names[id]).c_str(), quote(key).c_str());
    named[id] = 1;
    names[id] = key;
    auto [it, inserted] = t.model_vocab.emplace(key, static_cast<int32_t>(id));
    DL_CHECK(inserted, "%s: token %s is listed twice", spec.vocab_where.c_str(), quote(key).c_str());
  }
  std::vector<uint8_t> added_named(names.size(), 0);
  std::unordered_map<std::string, size_t> added_contents;
  for (size_t i = 0; i < spec.added.size(); ++i) {
    const AddedToken& a = spec.added[i];
    const std::string& where = spec.added_where[i];
    DL_CHECK(!a.content.empty(), "%s: content is empty", where.c_str());
    DL_CHECK(!a.single_word, "%s: single_word=true is not supported", where.c_str());
    claim(a.id, where, a.content);
    added_named.resize(names.size(), 0);
    DL_CHECK(!added_named[a.id], "%s: id %d is already used by added token %s", where.c_str(), a.id,
             quote(names[a.id]).c_str());
    auto in_vocab = t.model_vocab.find(a.content);
    if (named[a.id]) {
      DL_CHECK(names[a.id] == a.content, "%s: id %d is the vocab token %s, not %s", where.c_str(), a.id,
               quote(names[a.id]).c_str(), quote(a.content).c_str());
    } else {
      DL_CHECK(in_vocab == t.model_vocab.end(), "%s: %s has id %d here but id %d in the vocab", where.c_str(),
               quote(a.content).c_str(), a.id, in_vocab->second);
    }
    auto [seen, fresh] = added_contents.emplace(a.content, i);
    DL_CHECK(fresh, "%s: %s is already %s", where.c_str(), quote(a.content).c_str(),
             spec.added_where[seen->second].c_str());
    named[a.id] = 1;
    added_named[a.id] = 1;
    names[a.id] = a.content;
  }
  for (size_t id = 0; id < named.size(); ++id)
    DL_CHECK(named[id], "%s: no token has id %zu (ids must run from 0 to %zu without gaps)", spec.origin.c_str(), id,
             named.size() - 1);
  DL_CHECK(!names.empty(), "%s: the vocabulary is empty", spec.origin.c_str());

  const size_t n = names.size();
  t.token_string = std::move(names);
  t.token_bytes.resize(n);
  t.special.assign(n, 0);
  t.in_model.assign(n, 0);
  for (const auto& [key, id] : t.model_vocab) {
    t.in_model[id] = 1;
    // Vocab keys are byte-level strings; a key that is not (unreachable by BPE, but
    // some files have them) stands for its own UTF-8 bytes, as Hugging Face decodes it.
    if (!byte_level_to_bytes(key, &t.token_bytes[id])) t.token_bytes[id] = key;
  }
  t.added = std::move(spec.added);
  for (const AddedToken& a : t.added) {
    t.token_bytes[a.id] = a.content;  // added tokens decode to their text
    t.special[a.id] = a.special ? 1 : 0;
    t.added_token_has_newline |= a.content.find('\n') != std::string::npos || a.rstrip;
  }
  for (size_t id = 0; id < n; ++id) t.by_string.emplace(t.token_string[id], static_cast<int32_t>(id));

  // Merges: both halves and their concatenation must be vocab tokens.
  std::vector<std::pair<int32_t, int32_t>> pairs;
  std::vector<int32_t> merged;
  pairs.reserve(spec.merges.size());
  merged.reserve(spec.merges.size());
  for (size_t r = 0; r < spec.merges.size(); ++r) {
    const auto& [a, b] = spec.merges[r];
    auto ia = t.model_vocab.find(a);
    auto ib = t.model_vocab.find(b);
    DL_CHECK(ia != t.model_vocab.end(), "%s: %s is not in the vocab", spec.merge_where(r).c_str(), quote(a).c_str());
    DL_CHECK(ib != t.model_vocab.end(), "%s: %s is not in the vocab", spec.merge_where(r).c_str(), quote(b).c_str());
    auto im = t.model_vocab.find(a + b);
    DL_CHECK(im != t.model_vocab.end(), "%s: the merged token %s is not in the vocab", spec.merge_where(r).c_str(),
             quote(a + b).c_str());
    pairs.emplace_back(ia->second, ib->second);
    merged.push_back(im->second);
  }
  // A pair listed twice keeps its last rank (GPT-2's dict(zip(merges, range(...)))).
  // Keep only those entries, in order: ranks stay in the same relative order.
  {
    BpeMerges last;
    last.build(pairs, merged);
    for (size_t r = 0; r < pairs.size(); ++r)
      if (last.find(pairs[r].first, pairs[r].second)->rank == r) t.merges.push_back(pairs[r]);
    std::vector<int32_t> kept_merged;
    for (const auto& [a, b] : t.merges) kept_merged.push_back(last.find(a, b)->merged);
    t.merge_table.build(t.merges, kept_merged);
  }

  for (int b = 0; b < 256; ++b) {
    std::string ch;
    utf8_append(ch, byte_level_char(static_cast<uint8_t>(b)));
    auto it = t.model_vocab.find(ch);
    t.byte_token[b] = it == t.model_vocab.end() ? -1 : it->second;
  }

  if (spec.unk_token) {
    auto it = t.model_vocab.find(*spec.unk_token);
    DL_CHECK(it != t.model_vocab.end(), "%s: model.unk_token %s is not in the vocab", spec.origin.c_str(),
             quote(*spec.unk_token).c_str());
    t.unk_id = it->second;
  }
  t.fuse_unk = spec.fuse_unk;
  t.ignore_merges = spec.ignore_merges;
  t.pre_form = spec.pre_form;
  t.add_prefix_space = spec.add_prefix_space;
  t.trim_offsets = spec.trim_offsets;
  t.use_regex = spec.use_regex;
  t.post_processor = std::move(spec.post_processor);

  for (int allow = 0; allow < 2; ++allow) {
    std::vector<const AddedToken*> first, second;
    for (const AddedToken& a : t.added) {
      if (a.special && !allow) continue;
      (a.normalized ? second : first).push_back(&a);
    }
    t.first_pass[allow].build(first);
    t.second_pass[allow].build(second);
  }

  // EOS/BOS: tokenizer.json does not say; take well-known special tokens.
  auto special_named = [&](std::initializer_list<const char*> candidates) -> std::optional<int32_t> {
    for (const char* c : candidates) {
      auto it = t.by_string.find(c);
      if (it != t.by_string.end() && t.special[it->second]) return it->second;
    }
    return std::nullopt;
  };
  t.default_eos = special_named({"<|endoftext|>", "</s>", "<|end_of_text|>", "<eos>", "<|im_end|>", "<|eot_id|>"});
  if (spec.template_bos_token) {
    auto it = t.by_string.find(*spec.template_bos_token);
    if (it != t.by_string.end() && t.special[it->second]) t.default_bos = it->second;
  }
  if (!t.default_bos) t.default_bos = special_named({"<|begin_of_text|>", "<s>", "<bos>", "<|startoftext|>"});
  size_t num_special = std::count(t.special.begin(), t.special.end(), 1);
  if (!t.default_bos && num_special == 1 && t.default_eos && t.token_string[*t.default_eos] == "<|endoftext|>")
    t.default_bos = t.default_eos;  // GPT-2: <|endoftext|> is both (its config.json says so)

  t.cache_key = next_tokenizer_cache_key();
  return impl;
}

}  // namespace distllm
