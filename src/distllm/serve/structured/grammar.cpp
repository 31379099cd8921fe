#include "distllm/serve/structured/grammar.h"

#include <algorithm>
#include <map>
#include <unordered_map>

namespace distllm::structured {

Expr Expr::literal(std::string bytes) {
  Expr e;
  e.kind = Kind::kLiteral;
  e.text = std::move(bytes);
  return e;
}
Expr Expr::char_class(std::vector<CodeRange> ranges, bool negated) {
  Expr e;
  e.kind = Kind::kClass;
  e.ranges = std::move(ranges);
  e.negated = negated;
  return e;
}
Expr Expr::ref(std::string rule_name) {
  Expr e;
  e.kind = Kind::kRef;
  e.text = std::move(rule_name);
  return e;
}
Expr Expr::seq(std::vector<Expr> items) {
  if (items.size() == 1) return std::move(items[0]);
  Expr e;
  e.kind = Kind::kSeq;
  e.children = std::move(items);
  return e;
}
Expr Expr::alt(std::vector<Expr> items) {
  if (items.size() == 1) return std::move(items[0]);
  Expr e;
  e.kind = Kind::kAlt;
  e.children = std::move(items);
  return e;
}
Expr Expr::repeat(Expr item, int min, int max) {
  if (min < 0 || (max >= 0 && max < min))
    throw GrammarError(strprintf("invalid repetition {%d,%d}", min, max));
  if (min > kMaxRepeat || max > kMaxRepeat)
    throw GrammarError(strprintf("repetition count over the limit of %d", kMaxRepeat));
  Expr e;
  e.kind = Kind::kRepeat;
  e.children.push_back(std::move(item));
  e.min = min;
  e.max = max;
  return e;
}

std::vector<CodeRange> normalize_class(const std::vector<CodeRange>& ranges, bool negated) {
  std::vector<CodeRange> r;
  for (auto [lo, hi] : ranges) {
    if (lo > hi) std::swap(lo, hi);
    hi = std::min<uint32_t>(hi, 0x10FFFF);
    if (lo <= hi) r.push_back({lo, hi});
  }
  std::sort(r.begin(), r.end());
  std::vector<CodeRange> merged;
  for (auto& x : r) {
    if (!merged.empty() && x.first <= merged.back().second + 1)
      merged.back().second = std::max(merged.back().second, x.second);
    else
      merged.push_back(x);
  }
  if (negated) {
    std::vector<CodeRange> inv;
    uint32_t next = 0;
    for (auto& x : merged) {
      if (x.first > next) inv.push_back({next, x.first - 1});
      next = x.second + 1;
    }
    if (next <= 0x10FFFF) inv.push_back({next, 0x10FFFF});
    merged = std::move(inv);
  }
  // Remove surrogates.
  std::vector<CodeRange> out;
  for (auto& x : merged) {
    if (x.second < 0xD800 || x.first > 0xDFFF) {
      out.push_back(x);
      continue;
    }
    if (x.first < 0xD800) out.push_back({x.first, 0xD7FF});
    if (x.second > 0xDFFF) out.push_back({0xE000, x.second});
  }
  return out;
}

namespace {

int utf8_len(uint32_t c) { return c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4; }

void utf8_encode(uint32_t c, uint8_t* out) {
  int n = utf8_len(c);
  if (n == 1) {
    out[0] = static_cast<uint8_t>(c);
    return;
  }
  for (int i = n - 1; i > 0; --i) {
    out[i] = static_cast<uint8_t>(0x80 | (c & 0x3F));
    c >>= 6;
  }
  static const uint8_t lead[5] = {0, 0, 0xC0, 0xE0, 0xF0};
  out[0] = static_cast<uint8_t>(lead[n] | c);
}

using ByteRanges = std::vector<std::pair<uint8_t, uint8_t>>;

// Splits [lo, hi] (same UTF-8 length) into byte-range sequences whose cartesian
// products are exactly the encodings of the range (the utf8-ranges construction).
void utf8_split(uint32_t lo, uint32_t hi, std::vector<ByteRanges>& out) {
  int n = utf8_len(lo);
  for (int i = 1; i < n; ++i) {
    uint32_t m = (1u << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        utf8_split(lo, lo | m, out);
        utf8_split((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        utf8_split(lo, (hi & ~m) - 1, out);
        utf8_split(hi & ~m, hi, out);
        return;
      }
    }
  }
  uint8_t a[4], b[4];
  utf8_encode(lo, a);
  utf8_encode(hi, b);
  ByteRanges seq;
  for (int i = 0; i < n; ++i) seq.push_back({a[i], b[i]});
  out.push_back(seq);
}

std::vector<ByteRanges> utf8_sequences(uint32_t lo, uint32_t hi) {
  std::vector<ByteRanges> out;
  static const uint32_t bounds[] = {0x7F, 0x7FF, 0xFFFF, 0x10FFFF};
  for (uint32_t b : bounds) {
    if (lo > hi) break;
    if (lo <= b) {
      uint32_t top = std::min(hi, b);
      utf8_split(lo, top, out);
      lo = top + 1;
    }
  }
  return out;
}

Element bytes_element(ByteSet s) {
  Element e;
  e.kind = Element::Kind::kBytes;
  e.bytes = s;
  return e;
}
Element rule_element(uint32_t id) {
  Element e;
  e.kind = Element::Kind::kRule;
  e.rule = id;
  return e;
}

class Lowering {
 public:
  explicit Lowering(const std::vector<std::pair<std::string, Expr>>& defs) : defs_(defs) {
    for (size_t i = 0; i < defs.size(); ++i) {
      ids_[defs[i].first] = static_cast<uint32_t>(i);
      g_.rules.push_back(Rule{defs[i].first, {}});
    }
  }

  Grammar run(const std::string& root) {
    auto it = ids_.find(root);
    if (it == ids_.end()) throw GrammarError("grammar has no rule named '" + root + "'");
    for (size_t i = 0; i < defs_.size(); ++i) {
      current_ = defs_[i].first;
      auto alts = alternatives(defs_[i].second);
      g_.rules[i].alternatives = std::move(alts);
    }
    g_.root = it->second;
    return std::move(g_);
  }

 private:
  void count(size_t n) {
    elements_ += n;
    if (elements_ > kMaxGrammarElements)
      throw GrammarError(strprintf("grammar too large: over %zu elements after expanding "
                                   "repetitions and character classes",
                                   kMaxGrammarElements));
  }

  uint32_t new_rule(std::vector<Sequence> alts) {
    uint32_t id = static_cast<uint32_t>(g_.rules.size());
    g_.rules.push_back(Rule{strprintf("%s_%u", current_.c_str(), id), std::move(alts)});
    return id;
  }

  std::vector<Sequence> alternatives(const Expr& e) {
    std::vector<Sequence> alts;
    if (e.kind == Expr::Kind::kAlt) {
      for (auto& c : e.children) {
        Sequence s;
        append(c, s);
        alts.push_back(std::move(s));
      }
    } else if (e.kind == Expr::Kind::kClass) {
      return class_alternatives(e);
    } else {
      Sequence s;
      append(e, s);
      alts.push_back(std::move(s));
    }
    return alts;
  }

  std::vector<Sequence> class_alternatives(const Expr& e) {
    auto ranges = normalize_class(e.ranges, e.negated);
    std::vector<Sequence> alts;
    ByteSet ascii;
    std::vector<ByteRanges> multi;
    for (auto [lo, hi] : ranges) {
      if (lo < 0x80) ascii.set_range(static_cast<uint8_t>(lo), static_cast<uint8_t>(std::min<uint32_t>(hi, 0x7F)));
      if (hi >= 0x80) {
        auto seqs = utf8_sequences(std::max<uint32_t>(lo, 0x80), hi);
        multi.insert(multi.end(), seqs.begin(), seqs.end());
      }
    }
    if (!ascii.empty()) alts.push_back({bytes_element(ascii)});
    for (auto& br : multi) {
      Sequence s;
      for (auto [a, b] : br) {
        ByteSet bs;
        bs.set_range(a, b);
        s.push_back(bytes_element(bs));
      }
      count(s.size());
      alts.push_back(std::move(s));
    }
    // An empty class matches nothing: one alternative with an empty byte set, which
    // the productivity pass removes.
    if (alts.empty()) alts.push_back({bytes_element(ByteSet{})});
    count(1);
    return alts;
  }

  void append(const Expr& e, Sequence& out) {
    switch (e.kind) {
      case Expr::Kind::kLiteral:
        count(e.text.size());
        for (unsigned char c : e.text) {
          ByteSet s;
          s.set(c);
          out.push_back(bytes_element(s));
        }
        return;
      case Expr::Kind::kClass: {
        auto alts = class_alternatives(e);
        if (alts.size() == 1 && alts[0].size() == 1)
          out.push_back(alts[0][0]);
        else
          out.push_back(rule_element(new_rule(std::move(alts))));
        return;
      }
      case Expr::Kind::kRef: {
        auto it = ids_.find(e.text);
        if (it == ids_.end())
          throw GrammarError("rule '" + current_ + "' refers to undefined rule '" + e.text + "'");
        count(1);
        out.push_back(rule_element(it->second));
        return;
      }
      case Expr::Kind::kSeq:
        for (auto& c : e.children) append(c, out);
        return;
      case Expr::Kind::kAlt: {
        auto alts = alternatives(e);
        if (alts.size() == 1) {
          out.insert(out.end(), alts[0].begin(), alts[0].end());
        } else {
          count(1);
          out.push_back(rule_element(new_rule(std::move(alts))));
        }
        return;
      }
      case Expr::Kind::kRepeat: {
        auto alts = alternatives(e.children[0]);
        Sequence unit;
        if (alts.size() == 1)
          unit = std::move(alts[0]);
        else
          unit = {rule_element(new_rule(std::move(alts)))};
        if (unit.empty()) return;  // repeating the empty string is the empty string
        for (int i = 0; i < e.min; ++i) {
          count(unit.size());
          out.insert(out.end(), unit.begin(), unit.end());
        }
        if (e.max < 0) {
          // S ::= unit S | <empty>; the self reference is last, so it is a tail call.
          uint32_t id = new_rule({});
          Sequence loop = unit;
          loop.push_back(rule_element(id));
          count(loop.size());
          g_.rules[id].alternatives = {loop, Sequence{}};
          out.push_back(rule_element(id));
        } else if (e.max > e.min) {
          // O_k ::= unit O_{k-1} | <empty>, O_1 ::= unit | <empty>.
          uint32_t prev = new_rule({unit, Sequence{}});
          count(unit.size());
          for (int k = 2; k <= e.max - e.min; ++k) {
            Sequence s = unit;
            s.push_back(rule_element(prev));
            count(s.size());
            prev = new_rule({s, Sequence{}});
          }
          out.push_back(rule_element(prev));
        }
        return;
      }
    }
  }

  const std::vector<std::pair<std::string, Expr>>& defs_;
  std::unordered_map<std::string, uint32_t> ids_;
  Grammar g_;
  std::string current_;
  size_t elements_ = 0;
};

// For each rule, the alternatives (rule, index) whose sequences mention it: the
// fixpoints below revisit only what a change can affect, in linear time (a
// schema with 30,000 optional properties has 90,000 rules in a chain).
std::vector<std::vector<std::pair<uint32_t, uint32_t>>> rule_users(const Grammar& g) {
  std::vector<std::vector<std::pair<uint32_t, uint32_t>>> users(g.rules.size());
  for (uint32_t r = 0; r < g.rules.size(); ++r) {
    const auto& alts = g.rules[r].alternatives;
    for (uint32_t a = 0; a < alts.size(); ++a)
      for (const Element& e : alts[a])
        if (e.kind == Element::Kind::kRule) users[e.rule].push_back({r, a});
  }
  return users;
}

// The least set of rules with an alternative whose every element is `ok` (a byte
// element by `byte_ok`, a rule element when the rule is in the set): a worklist
// over the alternatives, each waiting for its count of rule elements not yet in.
std::vector<char> rule_fixpoint(const Grammar& g, bool (*byte_ok)(const Element&)) {
  const size_t n = g.rules.size();
  std::vector<char> in(n, 0);
  std::vector<std::vector<uint32_t>> missing(n);  // per alternative: rule elements not yet in
  std::vector<uint32_t> work;
  for (uint32_t r = 0; r < n; ++r) {
    const auto& alts = g.rules[r].alternatives;
    missing[r].assign(alts.size(), 0);
    for (uint32_t a = 0; a < alts.size(); ++a) {
      bool possible = true;
      for (const Element& e : alts[a]) {
        if (e.kind == Element::Kind::kRule) ++missing[r][a];
        else possible = possible && byte_ok(e);
      }
      if (!possible) missing[r][a] = UINT32_MAX;  // never
      if (missing[r][a] == 0 && !in[r]) {
        in[r] = 1;
        work.push_back(r);
      }
    }
  }
  const auto users = rule_users(g);
  while (!work.empty()) {
    uint32_t t = work.back();
    work.pop_back();
    for (auto [r, a] : users[t]) {
      if (missing[r][a] == UINT32_MAX) continue;
      // One decrement per occurrence of t in the alternative (users lists each).
      if (--missing[r][a] == 0 && !in[r]) {
        in[r] = 1;
        work.push_back(r);
      }
    }
  }
  return in;
}

// Drops alternatives that can never match (they contain an empty byte set or a rule
// that matches nothing), so every parse state the matcher reaches can complete.
void remove_unproductive(Grammar& g) {
  std::vector<char> productive = rule_fixpoint(g, [](const Element& e) { return !e.bytes.empty(); });
  auto seq_ok = [&](const Sequence& s) {
    for (auto& e : s) {
      if (e.kind == Element::Kind::kBytes ? e.bytes.empty() : !productive[e.rule]) return false;
    }
    return true;
  };
  if (!productive[g.root])
    throw GrammarError("grammar matches nothing: rule '" + g.rules[g.root].name +
                       "' can never complete");
  for (auto& rule : g.rules) {
    auto& alts = rule.alternatives;
    alts.erase(std::remove_if(alts.begin(), alts.end(), [&](const Sequence& s) { return !seq_ok(s); }),
               alts.end());
  }
}

// A rule that can reach itself without consuming a byte would make the matcher's
// expansion loop forever; refuse it (the classic fix is rewriting A ::= A x | y as
// A ::= y x*).
void check_left_recursion(const Grammar& g) {
  size_t n = g.rules.size();
  // Nullable: some alternative is all rules that are nullable (no byte element).
  std::vector<char> nullable = rule_fixpoint(g, [](const Element&) { return false; });
  std::vector<std::vector<uint32_t>> edges(n);
  for (size_t r = 0; r < n; ++r) {
    for (auto& s : g.rules[r].alternatives) {
      for (auto& e : s) {
        if (e.kind == Element::Kind::kBytes) break;
        edges[r].push_back(e.rule);
        if (!nullable[e.rule]) break;
      }
    }
  }
  // Iterative DFS (grammars from hostile input can be deep).
  std::vector<uint8_t> color(n, 0);
  std::vector<std::pair<uint32_t, size_t>> stack;
  for (uint32_t s = 0; s < n; ++s) {
    if (color[s]) continue;
    stack.push_back({s, 0});
    color[s] = 1;
    while (!stack.empty()) {
      auto& [r, i] = stack.back();
      if (i < edges[r].size()) {
        uint32_t t = edges[r][i++];
        if (color[t] == 1)
          throw GrammarError("rule '" + g.rules[t].name +
                             "' is left-recursive: it can reach itself without consuming "
                             "input (directly, through rules that can match empty, or by "
                             "repeating something that can match empty)");
        if (color[t] == 0) {
          color[t] = 1;
          stack.push_back({t, 0});
        }
      } else {
        color[r] = 2;
        stack.pop_back();
      }
    }
  }
}

std::string byteset_to_string(const ByteSet& s) {
  std::string out = "[";
  for (int b = 0; b < 256; ++b) {
    if (!s.test(static_cast<uint8_t>(b))) continue;
    int e = b;
    while (e + 1 < 256 && s.test(static_cast<uint8_t>(e + 1))) ++e;
    auto one = [&](int c) {
      if (c >= 0x21 && c < 0x7F && c != ']' && c != '\\' && c != '-' && c != '^')
        out += static_cast<char>(c);
      else
        out += strprintf("\\x%02X", c);
    };
    one(b);
    if (e > b) {
      out += '-';
      one(e);
    }
    b = e;
  }
  return out + "]";
}

}  // namespace

size_t Grammar::num_elements() const {
  size_t n = 0;
  for (auto& r : rules)
    for (auto& s : r.alternatives) n += s.size() + 1;
  return n;
}

std::string Grammar::to_string() const {
  std::string out;
  for (size_t r = 0; r < rules.size(); ++r) {
    out += rules[r].name + (r == root ? " (root)" : "") + " ::=";
    for (size_t a = 0; a < rules[r].alternatives.size(); ++a) {
      if (a) out += " |";
      if (rules[r].alternatives[a].empty()) out += " \"\"";
      for (auto& e : rules[r].alternatives[a])
        out += " " + (e.kind == Element::Kind::kRule ? rules[e.rule].name : byteset_to_string(e.bytes));
    }
    out += "\n";
  }
  return out;
}

void GrammarBuilder::define(const std::string& name, Expr body) {
  if (!names_.insert(name).second) throw GrammarError("rule '" + name + "' is defined more than once");
  rules_.emplace_back(name, std::move(body));
}

bool GrammarBuilder::defined(const std::string& name) const { return names_.count(name) > 0; }

Grammar GrammarBuilder::build(const std::string& root) const {
  Grammar g = Lowering(rules_).run(root);
  check_left_recursion(g);
  remove_unproductive(g);
  return g;
}

}  // namespace distllm::structured
