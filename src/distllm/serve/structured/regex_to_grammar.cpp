#include "distllm/serve/structured/regex_to_grammar.h"

namespace distllm::structured {
namespace {

constexpr int kMaxNesting = 200;

const std::vector<CodeRange> kDigit = {{'0', '9'}};
const std::vector<CodeRange> kWord = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
// ECMAScript WhiteSpace + LineTerminator.
const std::vector<CodeRange> kSpace = {{'\t', '\r'}, {' ', ' '},       {0xA0, 0xA0},     {0x1680, 0x1680},
                                       {0x2000, 0x200A}, {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F},
                                       {0x3000, 0x3000}, {0xFEFF, 0xFEFF}};

std::vector<CodeRange> complement(const std::vector<CodeRange>& r) { return normalize_class(r, true); }

class RegexParser {
 public:
  explicit RegexParser(std::string_view s) : s_(s) {}

  RegexExpr run() {
    RegexExpr out;
    if (!at_end() && s_[0] == '^') {
      out.anchored_start = true;
      ++pos_;
    }
    out.expr = parse_alt(0);
    if (!at_end() && s_[pos_] == '$' && pos_ + 1 == s_.size()) {
      out.anchored_end = true;
      ++pos_;
    }
    if (!at_end()) {
      if (s_[pos_] == ')') fail(pos_, "unmatched ')'");
      if (s_[pos_] == '$') fail(pos_, "anchor '$' is only supported at the end of the pattern");
      fail(pos_, "unexpected character");
    }
    return out;
  }

 private:
  bool at_end() const { return pos_ >= s_.size(); }

  [[noreturn]] void fail(size_t at, const std::string& what) const {
    throw GrammarError(strprintf("regex error at offset %zu: %s", at, what.c_str()));
  }

  uint32_t decode_utf8() {
    unsigned char c = static_cast<unsigned char>(s_[pos_]);
    int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || pos_ + n > s_.size()) fail(pos_, "invalid UTF-8");
    uint32_t cp = n == 1 ? c : c & (0x7F >> n);
    for (int i = 1; i < n; ++i) {
      unsigned char d = static_cast<unsigned char>(s_[pos_ + i]);
      if ((d & 0xC0) != 0x80) fail(pos_, "invalid UTF-8");
      cp = (cp << 6) | (d & 0x3F);
    }
    pos_ += n;
    return cp;
  }

  uint32_t hex(int digits) {
    uint32_t v = 0;
    for (int i = 0; i < digits; ++i) {
      if (at_end()) fail(pos_, "expected a hex digit");
      char c = s_[pos_];
      int d = (c >= '0' && c <= '9') ? c - '0' : (c >= 'a' && c <= 'f') ? c - 'a' + 10 : (c >= 'A' && c <= 'F') ? c - 'A' + 10 : -1;
      if (d < 0) fail(pos_, "expected a hex digit");
      v = v * 16 + static_cast<uint32_t>(d);
      ++pos_;
    }
    return v;
  }

  // After a backslash: a class escape fills `cls` and returns true; a character
  // escape sets `ch`.
  bool parse_escape(std::vector<CodeRange>& cls, uint32_t& ch, bool in_class) {
    size_t at = pos_ - 1;
    if (at_end()) fail(at, "pattern ends with a lone backslash");
    char c = s_[pos_++];
    switch (c) {
      case 'd': cls = kDigit; return true;
      case 'D': cls = complement(kDigit); return true;
      case 'w': cls = kWord; return true;
      case 'W': cls = complement(kWord); return true;
      case 's': cls = kSpace; return true;
      case 'S': cls = complement(kSpace); return true;
      case 'n': ch = '\n'; return false;
      case 'r': ch = '\r'; return false;
      case 't': ch = '\t'; return false;
      case 'f': ch = '\f'; return false;
      case 'v': ch = '\v'; return false;
      case '0': ch = 0; return false;
      case 'x': ch = hex(2); return false;
      case 'u': ch = hex(4); return false;
      case 'b':
        if (in_class) {
          ch = '\b';
          return false;
        }
        fail(at, "word boundary '\\b' is not supported");
      case 'B': fail(at, "word boundary '\\B' is not supported");
      case 'k': fail(at, "backreference '\\k' is not supported");
      case 'p': case 'P': fail(at, "Unicode property escape '\\p' is not supported");
      case 'c': fail(at, "control escape '\\c' is not supported");
      default:
        if (c >= '1' && c <= '9') fail(at, strprintf("backreference '\\%c' is not supported", c));
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))
          fail(at, strprintf("unknown escape '\\%c'", c));
        --pos_;
        ch = decode_utf8();
        return false;
    }
  }

  Expr parse_alt(int depth) {
    if (depth > kMaxNesting) fail(pos_, "groups nested too deeply");
    std::vector<Expr> alts;
    alts.push_back(parse_seq(depth));
    while (!at_end() && s_[pos_] == '|') {
      ++pos_;
      alts.push_back(parse_seq(depth));
    }
    return Expr::alt(std::move(alts));
  }

  Expr parse_seq(int depth) {
    std::vector<Expr> items;
    while (!at_end()) {
      char c = s_[pos_];
      size_t at = pos_;
      if (c == '|' || c == ')') break;
      if (c == '$') {
        if (depth == 0 && pos_ + 1 == s_.size()) break;
        fail(at, "anchor '$' is only supported at the end of the pattern");
      }
      if (c == '^') fail(at, "anchor '^' is only supported at the start of the pattern");
      if (c == '*' || c == '+' || c == '?' || c == '{') {
        if (c == '{' && !looks_like_quantifier()) {
          ++pos_;
          items.push_back(Expr::literal("{"));
          continue;
        }
        if (items.empty()) fail(at, "quantifier has nothing to repeat");
        int min = 0, max = -1;
        ++pos_;
        if (c == '+') min = 1;
        if (c == '?') max = 1;
        if (c == '{') {
          min = number();
          max = min;
          if (s_[pos_] == ',') {
            ++pos_;
            max = s_[pos_] == '}' ? -1 : number();
          }
          ++pos_;  // '}' (checked by looks_like_quantifier)
          if (max >= 0 && max < min) fail(at, "quantifier maximum is below its minimum");
        }
        if (!at_end() && s_[pos_] == '?') ++pos_;  // lazy: same language
        if (!at_end() && (s_[pos_] == '*' || s_[pos_] == '+' || s_[pos_] == '?' ||
                          (s_[pos_] == '{' && looks_like_quantifier())))
          fail(pos_, "nothing to repeat (a quantifier follows a quantifier)");
        Expr last = std::move(items.back());
        items.pop_back();
        try {
          items.push_back(Expr::repeat(std::move(last), min, max));
        } catch (const GrammarError& e) {
          fail(at, e.what());
        }
        continue;
      }
      items.push_back(parse_atom(depth));
    }
    return Expr::seq(std::move(items));
  }

  bool looks_like_quantifier() const {
    size_t i = pos_ + 1;
    size_t digits = 0;
    while (i < s_.size() && s_[i] >= '0' && s_[i] <= '9') ++i, ++digits;
    if (digits == 0) return false;
    if (i < s_.size() && s_[i] == ',') {
      ++i;
      while (i < s_.size() && s_[i] >= '0' && s_[i] <= '9') ++i;
    }
    return i < s_.size() && s_[i] == '}';
  }

  int number() {
    long v = 0;
    size_t at = pos_;
    while (!at_end() && s_[pos_] >= '0' && s_[pos_] <= '9') {
      v = v * 10 + (s_[pos_++] - '0');
      if (v > kMaxRepeat) fail(at, strprintf("repetition count over the limit of %d", kMaxRepeat));
    }
    return static_cast<int>(v);
  }

  Expr parse_atom(int depth) {
    size_t at = pos_;
    char c = s_[pos_];
    if (c == '(') {
      ++pos_;
      if (!at_end() && s_[pos_] == '?') {
        ++pos_;
        if (at_end()) fail(at, "unterminated group");
        char k = s_[pos_];
        if (k == ':') {
          ++pos_;
        } else if (k == '=' || k == '!') {
          fail(at, k == '=' ? "lookahead '(?=' is not supported" : "negative lookahead '(?!' is not supported");
        } else if (k == '<' && pos_ + 1 < s_.size() && (s_[pos_ + 1] == '=' || s_[pos_ + 1] == '!')) {
          fail(at, s_[pos_ + 1] == '=' ? "lookbehind '(?<=' is not supported"
                                       : "negative lookbehind '(?<!' is not supported");
        } else if (k == '<' || k == 'P') {
          if (k == 'P') ++pos_;
          if (at_end() || s_[pos_] != '<') fail(at, "unsupported group syntax");
          while (!at_end() && s_[pos_] != '>') ++pos_;
          if (at_end()) fail(at, "unterminated group name");
          ++pos_;
        } else {
          fail(at, "unsupported group syntax '(?" + std::string(1, k) + "'");
        }
      }
      Expr inner = parse_alt(depth + 1);
      if (at_end() || s_[pos_] != ')') fail(at, "unclosed '('");
      ++pos_;
      return inner;
    }
    if (c == '[') return parse_class();
    if (c == '.') {
      ++pos_;
      return Expr::char_class({{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}}, true);
    }
    if (c == '\\') {
      ++pos_;
      std::vector<CodeRange> cls;
      uint32_t ch = 0;
      if (parse_escape(cls, ch, false)) return Expr::char_class(cls);
      return Expr::char_class({{ch, ch}});
    }
    if (c == ']' || c == '}') {
      ++pos_;
      return Expr::char_class({{static_cast<uint32_t>(c), static_cast<uint32_t>(c)}});
    }
    uint32_t ch = decode_utf8();
    return Expr::char_class({{ch, ch}});
  }

  Expr parse_class() {
    size_t at = pos_++;
    bool neg = false;
    if (!at_end() && s_[pos_] == '^') {
      neg = true;
      ++pos_;
    }
    std::vector<CodeRange> ranges;
    bool first = true;
    while (true) {
      if (at_end()) fail(at, "unterminated character class");
      if (s_[pos_] == ']' && !first) break;
      first = false;
      std::vector<CodeRange> cls;
      uint32_t lo = 0;
      bool is_class = false;
      if (s_[pos_] == '\\') {
        ++pos_;
        is_class = parse_escape(cls, lo, true);
      } else {
        lo = decode_utf8();
      }
      if (is_class) {
        ranges.insert(ranges.end(), cls.begin(), cls.end());
        continue;
      }
      uint32_t hi = lo;
      if (pos_ + 1 < s_.size() && s_[pos_] == '-' && s_[pos_ + 1] != ']') {
        ++pos_;
        if (s_[pos_] == '\\') {
          ++pos_;
          if (parse_escape(cls, hi, true)) fail(at, "a class escape cannot end a range");
        } else {
          hi = decode_utf8();
        }
        if (hi < lo) fail(at, "character range is out of order");
      }
      ranges.push_back({lo, hi});
    }
    ++pos_;
    return Expr::char_class(std::move(ranges), neg);
  }

  std::string_view s_;
  size_t pos_ = 0;
};

std::string json_escape_char(uint32_t c) {
  switch (c) {
    case '"': return "\\\"";
    case '\\': return "\\\\";
    case '\n': return "\\n";
    case '\r': return "\\r";
    case '\t': return "\\t";
    case '\b': return "\\b";
    case '\f': return "\\f";
    default: return strprintf("\\u%04x", c);
  }
}

bool json_special(uint32_t c) { return c < 0x20 || c == '"' || c == '\\'; }

// Rewrites classes (the parser emits every character as a class) into what they
// look like inside a JSON string.
Expr json_escape(const Expr& e) {
  switch (e.kind) {
    case Expr::Kind::kClass: {
      auto ranges = normalize_class(e.ranges, e.negated);
      std::vector<CodeRange> plain;
      std::vector<Expr> alts;
      for (auto [lo, hi] : ranges) {
        uint32_t c = lo;
        while (c <= hi) {
          if (json_special(c)) {
            alts.push_back(Expr::literal(json_escape_char(c)));
            ++c;
            continue;
          }
          uint32_t end = c;
          while (end < hi && !json_special(end + 1)) ++end;
          plain.push_back({c, end});
          c = end + 1;
        }
      }
      if (!plain.empty()) alts.insert(alts.begin(), Expr::char_class(plain));
      if (alts.empty()) return Expr::char_class({});
      return Expr::alt(std::move(alts));
    }
    case Expr::Kind::kLiteral:
    case Expr::Kind::kRef:
      return e;
    default: {
      Expr out = e;
      for (auto& c : out.children) c = json_escape(c);
      return out;
    }
  }
}

}  // namespace

RegexExpr regex_to_expr(std::string_view pattern, const RegexOptions& options) {
  RegexExpr r = RegexParser(pattern).run();
  if (options.json_string) r.expr = json_escape(r.expr);
  return r;
}

Grammar regex_to_grammar(std::string_view pattern) {
  GrammarBuilder b;
  b.define("root", regex_to_expr(pattern).expr);
  return b.build("root");
}

}  // namespace distllm::structured
