// Context-free grammar IR for constrained decoding, and the expression tree that
// the front ends (GBNF, regex, JSON Schema, choice lists) build it from.
//
// The IR is byte-level: a rule is a list of alternatives, an alternative a sequence
// of elements, and an element either a set of bytes or a reference to a rule.
// Characters outside ASCII are lowered to their UTF-8 byte sequences when a class
// is lowered, so the matcher never needs to know about UTF-8 and a token that ends
// in the middle of a character is handled like any other byte prefix.
// Repetition (* + ? {m,n}) is expanded into helper rules that recurse on the right,
// which the matcher runs as tail calls (no stack growth per repetition).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "distllm/base/error.h"

namespace distllm::structured {

// Bad grammar, regex or schema text. The message names the position or keyword and
// is meant to be returned to an API client as an HTTP 400.
class GrammarError : public Error {
 public:
  explicit GrammarError(const std::string& message) : Error(message) {}
};

struct ByteSet {
  std::array<uint64_t, 4> words{};
  bool test(uint8_t b) const { return (words[b >> 6] >> (b & 63)) & 1; }
  void set(uint8_t b) { words[b >> 6] |= uint64_t{1} << (b & 63); }
  void set_range(uint8_t lo, uint8_t hi) {
    for (int b = lo; b <= hi; ++b) set(static_cast<uint8_t>(b));
  }
  bool empty() const { return (words[0] | words[1] | words[2] | words[3]) == 0; }
  ByteSet& operator|=(const ByteSet& o) {
    for (int i = 0; i < 4; ++i) words[i] |= o.words[i];
    return *this;
  }
  bool operator==(const ByteSet&) const = default;
};

struct Element {
  enum class Kind : uint8_t { kBytes, kRule };
  Kind kind = Kind::kBytes;
  uint32_t rule = 0;  // kRule
  ByteSet bytes;      // kBytes
};
using Sequence = std::vector<Element>;

struct Rule {
  std::string name;
  std::vector<Sequence> alternatives;
};

struct Grammar {
  std::vector<Rule> rules;
  uint32_t root = 0;
  size_t num_elements() const;
  // GBNF-like text, for debugging and error messages.
  std::string to_string() const;
};

// An inclusive range of Unicode code points.
using CodeRange = std::pair<uint32_t, uint32_t>;

// Expression tree: what front ends produce before lowering to the IR.
struct Expr {
  enum class Kind { kLiteral, kClass, kRef, kSeq, kAlt, kRepeat };
  Kind kind = Kind::kSeq;
  std::string text;               // kLiteral: UTF-8 bytes; kRef: rule name
  std::vector<CodeRange> ranges;  // kClass
  bool negated = false;           // kClass
  std::vector<Expr> children;     // kSeq, kAlt, kRepeat (one child)
  int min = 0, max = -1;          // kRepeat; max -1 = unbounded

  static Expr literal(std::string bytes);
  static Expr char_class(std::vector<CodeRange> ranges, bool negated = false);
  static Expr ref(std::string rule_name);
  static Expr seq(std::vector<Expr> items);
  static Expr alt(std::vector<Expr> items);
  static Expr repeat(Expr item, int min, int max);
  static Expr optional(Expr item) { return repeat(std::move(item), 0, 1); }
  static Expr star(Expr item) { return repeat(std::move(item), 0, -1); }
  static Expr empty() { return seq({}); }
};

// The positive code-point ranges a class matches: sorted, merged, negation applied,
// surrogates (U+D800..U+DFFF, not encodable in UTF-8) removed.
std::vector<CodeRange> normalize_class(const std::vector<CodeRange>& ranges, bool negated);

// Collects named rules, then lowers them into a checked Grammar.
class GrammarBuilder {
 public:
  // Throws GrammarError when `name` is already defined.
  void define(const std::string& name, Expr body);
  bool defined(const std::string& name) const;

  // Lowers every rule; throws GrammarError for an undefined rule reference, a
  // missing root, left recursion (a rule reaching itself without consuming input),
  // a grammar that matches nothing, or one over the size limits.
  Grammar build(const std::string& root) const;

 private:
  std::vector<std::pair<std::string, Expr>> rules_;
  std::unordered_set<std::string> names_;  // rules_'s names: define() stays O(1)
};

// Limits that keep a hostile grammar from exhausting memory.
inline constexpr size_t kMaxGrammarElements = 1 << 20;
inline constexpr int kMaxRepeat = 10000;

}  // namespace distllm::structured
