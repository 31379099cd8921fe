#include "distllm/tokenizer/split.h"

#include <algorithm>
#include <cstring>

#include "distllm/base/error.h"
#include "distllm/tokenizer/pretokenizer.h"
#include "distllm/tokenizer/utf8.h"

namespace distllm {

const char kGpt2SplitPattern[] = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

namespace {

class RegexPattern : public SplitPattern {
 public:
  RegexPattern(const std::string& pattern, const std::string& where) : regex_(pattern, where) {}
  void find(std::string_view text, std::vector<MatchSpan>& out) const override { regex_.find_all(text, out); }

 private:
  Regex regex_;
};

// GPT-2's pattern: every piece of its scanner is a match, and they tile the text.
class Gpt2Pattern : public SplitPattern {
 public:
  void find(std::string_view text, std::vector<MatchSpan>& out) const override {
    gpt2_pretokenize(text, [&](std::string_view piece) {
      size_t begin = static_cast<size_t>(piece.data() - text.data());
      out.push_back({begin, begin + piece.size()});
    });
  }
};

class LiteralPattern : public SplitPattern {
 public:
  explicit LiteralPattern(std::string text) : text_(std::move(text)) {}
  void find(std::string_view text, std::vector<MatchSpan>& out) const override {
    for (size_t pos = text.find(text_); pos != std::string_view::npos; pos = text.find(text_, pos + text_.size()))
      out.push_back({pos, pos + text_.size()});
  }

 private:
  std::string text_;
};

class CharacterPattern : public SplitPattern {
 public:
  explicit CharacterPattern(bool (*test)(uint32_t)) : test_(test) {}
  void find(std::string_view text, std::vector<MatchSpan>& out) const override {
    const auto* p = reinterpret_cast<const unsigned char*>(text.data());
    for (size_t i = 0; i < text.size();) {
      Utf8Step step = utf8_step(p + i, text.size() - i);
      size_t len = step.kind == Utf8Step::kChar ? step.length : 1;
      if (test_(step.kind == Utf8Step::kChar ? step.cp : 0xFFFD)) out.push_back({i, i + len});
      i += len;
    }
  }

 private:
  bool (*test_)(uint32_t);
};

}  // namespace

std::unique_ptr<SplitPattern> SplitPattern::regex(const std::string& pattern, const std::string& where) {
  if (pattern == kGpt2SplitPattern) return std::make_unique<Gpt2Pattern>();
  return std::make_unique<RegexPattern>(pattern, where);
}

std::unique_ptr<SplitPattern> SplitPattern::literal(const std::string& text) {
  return std::make_unique<LiteralPattern>(text);
}

std::unique_ptr<SplitPattern> SplitPattern::characters(bool (*test)(uint32_t)) {
  return std::make_unique<CharacterPattern>(test);
}

std::unique_ptr<SplitPattern> SplitPattern::from_json(const JsonReader& r, const nlohmann::json& pattern,
                                                      const std::string& where) {
  r.expect_object(pattern, where);
  if (const auto* re = r.member(pattern, "Regex")) {
    const std::string field = JsonReader::join(where, "Regex");
    return SplitPattern::regex(r.string_of(*re, field), r.origin() + ": " + field);
  }
  if (const auto* s = r.member(pattern, "String")) {
    std::string text = r.string_of(*s, JsonReader::join(where, "String"));
    if (text.empty()) r.fail(JsonReader::join(where, "String"), "an empty pattern is not supported");
    return SplitPattern::literal(text);
  }
  r.fail(where, "expected {\"Regex\": ...} or {\"String\": ...}");
}

SplitBehavior read_split_behavior(const JsonReader& r, const nlohmann::json& obj, const char* key,
                                  const std::string& where) {
  const std::string field = JsonReader::join(where, key);
  std::string name = r.string_of(r.require(obj, key, where), field);
  // tokenizer.json writes the enum's names; older files used lower case.
  std::string lower = name;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  if (lower == "removed") return SplitBehavior::kRemoved;
  if (lower == "isolated") return SplitBehavior::kIsolated;
  if (lower == "mergedwithprevious" || lower == "merged_with_previous") return SplitBehavior::kMergedWithPrevious;
  if (lower == "mergedwithnext" || lower == "merged_with_next") return SplitBehavior::kMergedWithNext;
  if (lower == "contiguous") return SplitBehavior::kContiguous;
  r.fail(field, std::string("unknown behavior ") + quote_for_message(name) + " (expected Removed, Isolated, MergedWithPrevious, MergedWithNext or Contiguous)");
}

void split_by_matches(std::string_view text, const std::vector<MatchSpan>& matches, bool invert,
                      SplitBehavior behavior, std::vector<MatchSpan>& pieces) {
  struct Part {
    MatchSpan span;
    bool flag;  // first "is a match", then "remove"
  };
  // Small and per-thread: this runs once per piece of text.
  thread_local std::vector<Part> parts, merged;
  parts.clear();
  const size_t n = text.size();
  if (n == 0) return;  // the only piece would be empty
  size_t prev = 0;
  for (const MatchSpan& m : matches) {
    if (prev != m.begin) parts.push_back({{prev, m.begin}, false});
    parts.push_back({m, true});
    prev = m.end;
  }
  if (prev != n) parts.push_back({{prev, n}, false});
  if (invert)
    for (Part& p : parts) p.flag = !p.flag;

  merged.clear();
  bool previous_match = false;
  switch (behavior) {
    case SplitBehavior::kIsolated:
      for (const Part& p : parts) merged.push_back({p.span, false});
      break;
    case SplitBehavior::kRemoved:
      merged = parts;
      break;
    case SplitBehavior::kContiguous:
      for (const Part& p : parts) {
        if (p.flag == previous_match && !merged.empty()) {
          merged.back().span.end = p.span.end;
        } else {
          merged.push_back({p.span, false});
        }
        previous_match = p.flag;
      }
      break;
    case SplitBehavior::kMergedWithPrevious:
      for (const Part& p : parts) {
        if (p.flag && !previous_match && !merged.empty()) {
          merged.back().span.end = p.span.end;
        } else {
          merged.push_back({p.span, false});
        }
        previous_match = p.flag;
      }
      break;
    case SplitBehavior::kMergedWithNext:
      for (size_t i = parts.size(); i-- > 0;) {
        const Part& p = parts[i];
        if (p.flag && !previous_match && !merged.empty()) {
          merged.back().span.begin = p.span.begin;
        } else {
          merged.push_back({p.span, false});
        }
        previous_match = p.flag;
      }
      std::reverse(merged.begin(), merged.end());
      break;
  }
  for (const Part& p : merged)
    if (!p.flag && p.span.end > p.span.begin) pieces.push_back(p.span);
}

}  // namespace distllm
