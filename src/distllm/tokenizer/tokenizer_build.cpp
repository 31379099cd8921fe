// build_tokenizer(): validation of a loaded tokenizer and construction of its tables.
#include <algorithm>

#include "distllm/base/error.h"
#include "distllm/tokenizer/json_reader.h"
#include "distllm/tokenizer/tokenizer_impl.h"
#include "distllm/tokenizer/utf8.h"

namespace distllm {
namespace {

// Ids: model.vocab first, then added tokens; every id named once, no gaps. Fills
// t.token_string and returns the model's vocab.
std::unordered_map<std::string, int32_t> assign_ids(const TokenizerSpec& spec, TokenizerImpl& t) {
  constexpr int64_t kMaxId = (int64_t{1} << 31) - 2;
  std::unordered_map<std::string, int32_t> model_vocab;
  std::vector<std::string> names;  // by id, from whichever list named it first
  std::vector<uint8_t> named;
  auto claim = [&](int64_t id, const std::string& where, const std::string& token) {
    DL_CHECK(id >= 0 && id <= kMaxId, "%s: token %s has id %lld, outside [0, 2^31-1)", where.c_str(),
             quote_for_message(token).c_str(), (long long)id);
    // Ids must end up dense, so an id beyond the number of entries is already wrong;
    // refusing it here also bounds memory for hostile input.
    size_t limit = spec.vocab.size() + spec.added.size();
    DL_CHECK(static_cast<size_t>(id) < limit, "%s: token %s has id %lld, but the file defines only %zu tokens",
             where.c_str(), quote_for_message(token).c_str(), (long long)id, limit);
    if (static_cast<size_t>(id) >= names.size()) {
      names.resize(id + 1);
      named.resize(id + 1, 0);
    }
  };
  model_vocab.reserve(spec.vocab.size());
  for (const auto& [key, id] : spec.vocab) {
    claim(id, spec.vocab_where, key);
    DL_CHECK(!named[id], "%s: id %lld is used by both %s and %s", spec.vocab_where.c_str(), (long long)id,
             quote_for_message(names[id]).c_str(), quote_for_message(key).c_str());
    named[id] = 1;
    names[id] = key;
    auto [it, inserted] = model_vocab.emplace(key, static_cast<int32_t>(id));
    DL_CHECK(inserted, "%s: token %s is listed twice", spec.vocab_where.c_str(), quote_for_message(key).c_str());
  }
  std::vector<uint8_t> added_named(names.size(), 0);
  std::unordered_map<std::string, size_t> added_contents;
  for (size_t i = 0; i < spec.added.size(); ++i) {
    const AddedToken& a = spec.added[i];
    const std::string& where = spec.added_where[i];
    DL_CHECK(!a.content.empty(), "%s: content is empty", where.c_str());
    claim(a.id, where, a.content);
    added_named.resize(names.size(), 0);
    DL_CHECK(!added_named[a.id], "%s: id %d is already used by added token %s", where.c_str(), a.id,
             quote_for_message(names[a.id]).c_str());
    auto in_vocab = model_vocab.find(a.content);
    if (named[a.id]) {
      DL_CHECK(names[a.id] == a.content, "%s: id %d is the vocab token %s, not %s", where.c_str(), a.id,
               quote_for_message(names[a.id]).c_str(), quote_for_message(a.content).c_str());
    } else {
      DL_CHECK(in_vocab == model_vocab.end(), "%s: %s has id %d here but id %d in the vocab", where.c_str(),
               quote_for_message(a.content).c_str(), a.id, in_vocab->second);
    }
    auto [seen, fresh] = added_contents.emplace(a.content, i);
    DL_CHECK(fresh, "%s: %s is already %s", where.c_str(), quote_for_message(a.content).c_str(),
             spec.added_where[seen->second].c_str());
    named[a.id] = 1;
    added_named[a.id] = 1;
    names[a.id] = a.content;
  }
  for (size_t id = 0; id < named.size(); ++id)
    DL_CHECK(named[id], "%s: no token has id %zu (ids must run from 0 to %zu without gaps)", spec.origin.c_str(), id,
             named.size() - 1);
  DL_CHECK(!names.empty(), "%s: the vocabulary is empty", spec.origin.c_str());
  t.token_string = std::move(names);
  return model_vocab;
}

void build_added_token_passes(TokenizerImpl& t) {
  std::vector<std::pair<std::string, const AddedToken*>> raw, normalized;
  std::string pattern;
  for (const AddedToken& a : t.added) {
    if (!a.normalized) {
      raw.emplace_back(a.content, &a);
    } else {
      // Matched in normalized text, so by its normalized form.
      if (t.normalizer) {
        t.normalizer->normalize(a.content, pattern);
      } else {
        pattern = a.content;
      }
      normalized.emplace_back(pattern, &a);
    }
    t.added_token_has_newline |= a.content.find('\n') != std::string::npos || a.rstrip || a.lstrip;
  }
  t.raw_pass.build(raw);
  t.normalized_pass.build(normalized);
}

// tokenizer.json has no field for EOS/BOS: take the post-processor's first special
// token as BOS, else well-known special tokens (tokenizer_config.json may say better).
void guess_eos_and_bos(TokenizerImpl& t) {
  auto special_named = [&](std::initializer_list<const char*> candidates) -> std::optional<int32_t> {
    for (const char* c : candidates) {
      auto it = t.by_string.find(c);
      if (it != t.by_string.end() && t.special[it->second]) return it->second;
    }
    return std::nullopt;
  };
  t.default_eos = special_named({"<|endoftext|>", "</s>", "<|end_of_text|>", "<eos>", "<|im_end|>", "<|eot_id|>"});
  if (!t.special_tokens.before.empty() && t.special[t.special_tokens.before.front()])
    t.default_bos = t.special_tokens.before.front();
  if (!t.default_bos) t.default_bos = special_named({"<|begin_of_text|>", "<s>", "<bos>", "<|startoftext|>"});
  size_t num_special = std::count(t.special.begin(), t.special.end(), 1);
  if (!t.default_bos && num_special == 1 && t.default_eos && t.token_string[*t.default_eos] == "<|endoftext|>")
    t.default_bos = t.default_eos;  // GPT-2: <|endoftext|> is both (its config.json says so)
}

}  // namespace

uint64_t next_tokenizer_cache_key() {
  static std::atomic<uint64_t> counter{1};
  return counter.fetch_add(1);
}

std::shared_ptr<TokenizerImpl> build_tokenizer(TokenizerSpec spec) {
  auto impl = std::make_shared<TokenizerImpl>();
  TokenizerImpl& t = *impl;
  t.origin = spec.origin;
  std::unordered_map<std::string, int32_t> model_vocab = assign_ids(spec, t);
  const size_t n = t.token_string.size();
  t.special.assign(n, 0);
  t.in_model.assign(n, 0);
  for (const auto& [key, id] : model_vocab) t.in_model[id] = 1;
  t.model = std::make_unique<BpeModel>(std::move(model_vocab), spec.model, spec.origin);
  t.added = std::move(spec.added);
  for (const AddedToken& a : t.added) t.special[a.id] = a.special ? 1 : 0;
  for (size_t id = 0; id < n; ++id) t.by_string.emplace(t.token_string[id], static_cast<int32_t>(id));

  JsonReader r(spec.origin);
  t.normalizer = Normalizer::parse(r, spec.normalizer, "normalizer");
  t.pre_tokenizer = PreTokenizer::parse(r, spec.pre_tokenizer, "pre_tokenizer");
  t.decoder = Decoder::parse(r, spec.decoder, "decoder");
  auto token_id = [&t](const std::string& s) -> std::optional<int32_t> {
    auto it = t.by_string.find(s);
    return it == t.by_string.end() ? std::nullopt : std::optional<int32_t>(it->second);
  };
  t.special_tokens = parse_post_processor(r, spec.post_processor, "post_processor", token_id, static_cast<int32_t>(n));
  t.normalizer_json = std::move(spec.normalizer);
  t.pre_tokenizer_json = std::move(spec.pre_tokenizer);
  t.post_processor_json = std::move(spec.post_processor);
  t.decoder_json = std::move(spec.decoder);

  // What each token adds to a text, through the decoder (a vocab key that is not in
  // the decoder's alphabet stands for its own text, as Hugging Face decodes it).
  t.token_bytes.resize(n);
  for (size_t id = 0; id < n; ++id) t.token_bytes[id] = t.decoder->token_text(t.token_string[id], /*first=*/false);

  build_added_token_passes(t);
  guess_eos_and_bos(t);
  t.cache_key = next_tokenizer_cache_key();
  return impl;
}

}  // namespace distllm
