#include "distllm/tokenizer/bpe_trainer.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "distllm/base/error.h"
#include "distllm/base/parallel.h"
#include "distllm/tokenizer/byte_level.h"
#include "distllm/tokenizer/pretokenizer.h"
#include "distllm/tokenizer/utf8.h"

namespace distllm {

// ---------------------------------------------------------------------------------
// Counting words

namespace {

using PieceCounts = std::unordered_map<std::string_view, uint64_t>;

// The pieces of each line of `text` (a line keeps its '\n'), counted into `out`.
void count_pieces(std::string_view text, PieceCounts& out) {
  size_t pos = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    size_t end = nl == std::string_view::npos ? text.size() : nl + 1;
    gpt2_pretokenize(text.substr(pos, end - pos), [&](std::string_view piece) { ++out[piece]; });
    pos = end;
  }
}

}  // namespace

void WordCounts::add(std::string_view word, uint64_t count) {
  if (word.empty() || count == 0) return;
  counts_[std::string(word)] += count;
  total_ += count;
}

void WordCounts::add_text(std::string_view text) {
  // One share per thread, each ending at a line break, so no line is split.
  const int shares = std::max(1, std::min<int>(num_threads(), static_cast<int>(text.size() / 65536) + 1));
  std::vector<size_t> cut(shares + 1, text.size());
  cut[0] = 0;
  for (int s = 1; s < shares; ++s) {
    size_t at = std::max(cut[s - 1], text.size() * s / shares);
    size_t nl = text.find('\n', at);
    cut[s] = nl == std::string_view::npos ? text.size() : nl + 1;
  }
  std::vector<PieceCounts> partial(shares);
  parallel_for(0, shares, [&](int64_t s) { count_pieces(text.substr(cut[s], cut[s + 1] - cut[s]), partial[s]); });
  for (const PieceCounts& part : partial)
    for (const auto& [word, count] : part) add(word, count);
}

// ---------------------------------------------------------------------------------
// Training

namespace {

using Pair = uint64_t;  // (left id << 32) | right id: ordering keys orders (left, right)

Pair make_pair_key(int32_t a, int32_t b) { return (static_cast<uint64_t>(a) << 32) | static_cast<uint32_t>(b); }
int32_t left_of(Pair p) { return static_cast<int32_t>(p >> 32); }
int32_t right_of(Pair p) { return static_cast<int32_t>(p & 0xffffffffu); }

// A candidate merge in the queue: its pair, its count when queued, and the words that
// (may) contain it. Several entries for one pair can coexist; a popped entry whose
// count is out of date is re-queued with the current count (lazy update).
struct Candidate {
  int64_t count;
  Pair pair;
  std::vector<uint32_t> words;
};

// Heap order: the larger count first; on equal counts the smaller pair.
bool ranks_below(const Candidate& x, const Candidate& y) {
  return x.count != y.count ? x.count < y.count : x.pair > y.pair;
}

// Every word as symbol ids, back to back.
struct Words {
  std::vector<int32_t> symbols;
  std::vector<size_t> start;
  std::vector<uint32_t> length;
  std::vector<uint64_t> count;
};

struct PairChange {
  Pair pair;
  int32_t delta;
};

// Replaces the occurrences of (a, b) in s[0, n), left to right, by c and returns the
// new length. Reports each neighbouring pair that disappears (-1) or appears (+1);
// the pair (a, b) itself is not reported (it is never counted again).
uint32_t merge_in_word(int32_t* s, uint32_t n, int32_t a, int32_t b, int32_t c, std::vector<PairChange>& changes) {
  uint32_t out = 0, in = 0;
  while (in < n) {
    if (in + 1 < n && s[in] == a && s[in + 1] == b) {
      if (out > 0) {
        changes.push_back({make_pair_key(s[out - 1], a), -1});
        changes.push_back({make_pair_key(s[out - 1], c), +1});
      }
      s[out++] = c;
      in += 2;
      if (in < n) {
        changes.push_back({make_pair_key(b, s[in]), -1});
        changes.push_back({make_pair_key(c, s[in]), +1});
      }
    } else {
      s[out++] = s[in++];
    }
  }
  return out;
}

class Trainer {
 public:
  // Starts the vocabulary with the special tokens and the byte symbols.
  explicit Trainer(const BpeTrainerOptions& options) : options_(options) {
    add_initial_vocabulary();
    DL_CHECK(options_.vocab_size >= static_cast<int64_t>(result_.tokens.size()),
             "vocab size %lld is smaller than the initial vocabulary: %zu special token%s + 256 byte symbols = %zu",
             static_cast<long long>(options_.vocab_size), result_.num_special, result_.num_special == 1 ? "" : "s",
             result_.tokens.size());
  }

  TrainedBpe run(const WordCounts& counts) {
    split_words(counts);
    count_pairs();
    merge_until_full();
    return std::move(result_);
  }

 private:
  BpeTrainerOptions options_;
  TrainedBpe result_;
  std::unordered_map<std::string, int32_t> token_id_;
  int32_t byte_id_[256] = {};
  Words words_;
  std::unordered_map<Pair, int64_t> pair_count_;
  std::vector<Candidate> queue_;  // a max-heap under ranks_below

  int32_t add_token(const std::string& token) {
    auto [it, added] = token_id_.emplace(token, static_cast<int32_t>(result_.tokens.size()));
    if (added) result_.tokens.push_back(token);
    return it->second;
  }

  void add_initial_vocabulary() {
    for (const std::string& special : options_.special_tokens) {
      DL_CHECK(!special.empty(), "special tokens must not be empty");
      DL_CHECK(utf8_is_valid(special), "special token '%s' is not valid UTF-8", special.c_str());
      add_token(special);
    }
    result_.num_special = result_.tokens.size();
    std::vector<int> bytes(256);
    for (int b = 0; b < 256; ++b) bytes[b] = b;
    std::sort(bytes.begin(), bytes.end(), [](int x, int y) {
      return byte_level_char(static_cast<uint8_t>(x)) < byte_level_char(static_cast<uint8_t>(y));
    });
    for (int b : bytes) byte_id_[b] = add_token(bytes_to_byte_level(std::string(1, static_cast<char>(b))));
  }

  // Words in byte order, so that the result never depends on hash-table order.
  void split_words(const WordCounts& counts) {
    std::vector<const std::pair<const std::string, uint64_t>*> sorted;
    sorted.reserve(counts.counts().size());
    size_t total_bytes = 0;
    for (const auto& entry : counts.counts()) {
      sorted.push_back(&entry);
      total_bytes += entry.first.size();
    }
    std::sort(sorted.begin(), sorted.end(), [](const auto* x, const auto* y) { return x->first < y->first; });
    words_.symbols.reserve(total_bytes);
    for (const auto* entry : sorted) {
      words_.start.push_back(words_.symbols.size());
      words_.length.push_back(static_cast<uint32_t>(entry->first.size()));
      words_.count.push_back(entry->second);
      for (unsigned char b : entry->first) words_.symbols.push_back(byte_id_[b]);
    }
  }

  void push(Candidate c) {
    queue_.push_back(std::move(c));
    std::push_heap(queue_.begin(), queue_.end(), ranks_below);
  }

  Candidate pop() {
    std::pop_heap(queue_.begin(), queue_.end(), ranks_below);
    Candidate c = std::move(queue_.back());
    queue_.pop_back();
    return c;
  }

  void count_pairs() {
    std::unordered_map<Pair, std::vector<uint32_t>> where;
    for (uint32_t w = 0; w < words_.start.size(); ++w) {
      const int32_t* s = words_.symbols.data() + words_.start[w];
      for (uint32_t i = 0; i + 1 < words_.length[w]; ++i) {
        Pair p = make_pair_key(s[i], s[i + 1]);
        pair_count_[p] += static_cast<int64_t>(words_.count[w]);
        std::vector<uint32_t>& list = where[p];
        if (list.empty() || list.back() != w) list.push_back(w);
      }
    }
    queue_.reserve(where.size());
    for (auto& [pair, list] : where) queue_.push_back({pair_count_[pair], pair, std::move(list)});
    std::make_heap(queue_.begin(), queue_.end(), ranks_below);
  }

  void merge_until_full() {
    const int64_t min_count = std::max<int64_t>(1, static_cast<int64_t>(options_.min_frequency));
    std::vector<PairChange> changes;
    std::unordered_map<Pair, std::vector<uint32_t>> gained;  // new pairs -> words
    while (static_cast<int64_t>(result_.tokens.size()) < options_.vocab_size && !queue_.empty()) {
      Candidate top = pop();
      const int64_t current = pair_count_[top.pair];
      if (top.count != current) {
        top.count = current;
        if (current > 0) push(std::move(top));
        continue;
      }
      if (top.count < min_count) break;
      const int32_t a = left_of(top.pair), b = right_of(top.pair);
      result_.merges.emplace_back(result_.tokens[a], result_.tokens[b]);
      const int32_t c = add_token(result_.tokens[a] + result_.tokens[b]);

      gained.clear();
      for (uint32_t w : top.words) {
        changes.clear();
        words_.length[w] = merge_in_word(words_.symbols.data() + words_.start[w], words_.length[w], a, b, c, changes);
        const int64_t n = static_cast<int64_t>(words_.count[w]);
        for (const PairChange& ch : changes) {
          pair_count_[ch.pair] += ch.delta * n;
          if (ch.delta > 0) {
            std::vector<uint32_t>& list = gained[ch.pair];
            if (list.empty() || list.back() != w) list.push_back(w);
          }
        }
      }
      for (auto& [pair, list] : gained) {
        const int64_t count = pair_count_[pair];
        if (count > 0) push({count, pair, std::move(list)});
      }
    }
  }
};

}  // namespace

void check_bpe_trainer_options(const BpeTrainerOptions& options) { Trainer check(options); }

TrainedBpe train_bpe(const WordCounts& words, const BpeTrainerOptions& options) {
  return Trainer(options).run(words);
}

// ---------------------------------------------------------------------------------
// tokenizer.json

std::string trained_bpe_json(const TrainedBpe& bpe) {
  using ordered_json = nlohmann::ordered_json;
  ordered_json doc;
  doc["version"] = "1.0";
  doc["truncation"] = nullptr;
  doc["padding"] = nullptr;
  ordered_json added = ordered_json::array();
  for (size_t id = 0; id < bpe.num_special; ++id)
    added.push_back(ordered_json{{"id", id},
                                 {"content", bpe.tokens[id]},
                                 {"single_word", false},
                                 {"lstrip", false},
                                 {"rstrip", false},
                                 {"normalized", false},
                                 {"special", true}});
  doc["added_tokens"] = std::move(added);
  doc["normalizer"] = nullptr;
  doc["pre_tokenizer"] =
      ordered_json{{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}};
  doc["post_processor"] =
      ordered_json{{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", false}, {"use_regex", true}};
  doc["decoder"] =
      ordered_json{{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}};
  ordered_json model;
  model["type"] = "BPE";
  model["dropout"] = nullptr;
  model["unk_token"] = nullptr;
  model["continuing_subword_prefix"] = nullptr;
  model["end_of_word_suffix"] = nullptr;
  model["fuse_unk"] = false;
  model["byte_fallback"] = false;
  model["ignore_merges"] = false;
  ordered_json vocab = ordered_json::object();
  {
    // Keys are unique: append to the underlying vector, skipping ordered_map's linear
    // search for an existing key (quadratic for a large vocabulary).
    auto& entries = static_cast<ordered_json::object_t::Container&>(vocab.get_ref<ordered_json::object_t&>());
    entries.reserve(bpe.tokens.size());
    for (size_t id = 0; id < bpe.tokens.size(); ++id) entries.emplace_back(bpe.tokens[id], id);
  }
  model["vocab"] = std::move(vocab);
  ordered_json merges = ordered_json::array();
  for (const auto& [a, b] : bpe.merges) merges.push_back(ordered_json::array({a, b}));
  model["merges"] = std::move(merges);
  doc["model"] = std::move(model);
  return doc.dump(2) + "\n";
}

}  // namespace distllm
