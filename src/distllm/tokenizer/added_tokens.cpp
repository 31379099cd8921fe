#include "distllm/tokenizer/added_tokens.h"

#include <algorithm>
#include <iterator>

#include "distllm/tokenizer/unicode.h"
#include "distllm/tokenizer/utf8.h"

namespace distllm {
namespace {

// The character that ends at text[pos] (exclusive): its code point and length; ill-formed
// bytes count as U+FFFD of length 1.
Utf8Step char_before(std::string_view text, size_t lo, size_t pos) {
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  for (size_t len = 1; len <= 4 && len <= pos - lo; ++len) {
    size_t start = pos - len;
    if (len < 4 && (p[start] & 0xC0) == 0x80) continue;  // a continuation byte: look further back
    Utf8Step step = utf8_step(p + start, text.size() - start);
    if (step.kind == Utf8Step::kChar && step.length == len) return step;
    break;
  }
  return {Utf8Step::kInvalid, 1, 0xFFFD};
}

Utf8Step char_at(std::string_view text, size_t pos) {
  Utf8Step step = utf8_step(reinterpret_cast<const unsigned char*>(text.data()) + pos, text.size() - pos);
  if (step.kind != Utf8Step::kChar) return {Utf8Step::kInvalid, 1, 0xFFFD};
  return step;
}

}  // namespace

AddedTokenMatcher::AddedTokenMatcher() { std::fill(std::begin(root_next_), std::end(root_next_), -1); }

void AddedTokenMatcher::build(const std::vector<std::pair<std::string, const AddedToken*>>& patterns) {
  nodes_.assign(1, Node{});
  for (auto& r : root_next_) r = -1;
  for (const auto& [pattern, token] : patterns) {
    if (pattern.empty()) continue;
    int32_t node = 0;
    for (size_t i = 0; i < pattern.size(); ++i) {
      auto b = static_cast<uint8_t>(pattern[i]);
      int32_t child = -1;
      if (node == 0) {
        child = root_next_[b];
      } else {
        auto& next = nodes_[node].next;
        auto it = std::lower_bound(next.begin(), next.end(), std::make_pair(b, int32_t{-1}));
        if (it != next.end() && it->first == b) child = it->second;
      }
      if (child < 0) {
        child = static_cast<int32_t>(nodes_.size());
        nodes_.emplace_back();
        if (node == 0) {
          root_next_[b] = child;
        } else {
          auto& next = nodes_[node].next;
          next.insert(std::lower_bound(next.begin(), next.end(), std::make_pair(b, int32_t{-1})), {b, child});
        }
      }
      node = child;
    }
    // Two tokens with the same pattern: the first listed wins.
    if (nodes_[node].token == nullptr) nodes_[node].token = token;
  }
}

bool AddedTokenMatcher::longest_at(std::string_view text, size_t i, size_t* end, const AddedToken** token) const {
  int32_t node = root_next_[static_cast<uint8_t>(text[i])];
  bool found = false;
  for (size_t j = i + 1; node >= 0; ++j) {
    if (nodes_[node].token != nullptr) {
      *end = j;
      *token = nodes_[node].token;
      found = true;
    }
    if (j == text.size()) break;
    const auto& next = nodes_[node].next;
    auto b = static_cast<uint8_t>(text[j]);
    auto it = std::lower_bound(next.begin(), next.end(), std::make_pair(b, int32_t{-1}));
    node = (it != next.end() && it->first == b) ? it->second : -1;
  }
  return found;
}

void AddedTokenMatcher::find_all(std::string_view text, bool allow_special, std::vector<Match>& out) const {
  if (empty()) return;
  size_t accepted_end = 0;  // where the last match taken ended
  size_t i = 0;
  while (i < text.size()) {
    if (root_next_[static_cast<uint8_t>(text[i])] < 0) {
      ++i;
      continue;
    }
    size_t end;
    const AddedToken* t;
    if (!longest_at(text, i, &end, &t)) {
      ++i;
      continue;
    }
    size_t begin = i;
    i = end;  // matches never overlap: the search goes on after this one, taken or not
    if (t->special && !allow_special) continue;
    if (t->single_word) {
      bool word_before = begin > 0 && unicode_is_word(char_before(text, 0, begin).cp);
      bool word_after = end < text.size() && unicode_is_word(char_at(text, end).cp);
      if (word_before || word_after) continue;
    }
    if (t->lstrip) {
      while (begin > accepted_end) {
        Utf8Step c = char_before(text, accepted_end, begin);
        if (c.kind != Utf8Step::kChar || !unicode_is_white_space(c.cp)) break;
        begin -= c.length;
      }
    }
    if (t->rstrip) {
      while (end < text.size()) {
        Utf8Step c = char_at(text, end);
        if (c.kind != Utf8Step::kChar || !unicode_is_white_space(c.cp)) break;
        end += c.length;
      }
      i = end;
    }
    out.push_back({begin, end, t});
    accepted_end = end;
  }
}

}  // namespace distllm
