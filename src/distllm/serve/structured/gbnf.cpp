#include "distllm/serve/structured/gbnf.h"

#include <cstring>

#include "distllm/tokenizer/utf8.h"

namespace distllm::structured {
namespace {

constexpr int kMaxNesting = 200;

class Parser {
 public:
  explicit Parser(std::string_view text) : s_(text) {}

  Grammar run() {
    GrammarBuilder builder;
    skip_space(true);
    while (!at_end()) {
      size_t name_pos = pos_;
      std::string name = parse_name();
      if (name.empty()) fail(name_pos, "expected a rule name");
      skip_space(false);
      if (s_.substr(pos_, 3) != "::=") fail(pos_, "expected '::=' after rule name '" + name + "'");
      pos_ += 3;
      skip_space(true);
      Expr body = parse_alternatives(0);
      if (!at_end() && s_[pos_] != '\n' && s_[pos_] != '\r')
        fail(pos_, std::string("unexpected character '") + printable(s_[pos_]) + "'");
      if (builder.defined(name)) fail(name_pos, "rule '" + name + "' is defined more than once");
      builder.define(name, std::move(body));
      skip_space(true);
    }
    if (!builder.defined("root")) throw GrammarError("grammar has no 'root' rule");
    return builder.build("root");
  }

 private:
  bool at_end() const { return pos_ >= s_.size(); }

  static std::string printable(char c) {
    unsigned char u = static_cast<unsigned char>(c);
    if (u >= 0x20 && u < 0x7F) return std::string(1, c);
    return strprintf("\\x%02X", u);
  }

  [[noreturn]] void fail(size_t at, const std::string& what) const {
    size_t line = 1, col = 1;
    for (size_t i = 0; i < at && i < s_.size(); ++i) {
      if (s_[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    throw GrammarError(strprintf("grammar error at line %zu, column %zu: %s", line, col, what.c_str()));
  }

  // Skips blanks and comments; newlines only when `newlines` (inside a group, or
  // where a rule cannot end yet).
  void skip_space(bool newlines) {
    while (!at_end()) {
      char c = s_[pos_];
      if (c == ' ' || c == '\t') {
        ++pos_;
      } else if (c == '#') {
        while (!at_end() && s_[pos_] != '\n') ++pos_;
      } else if (newlines && (c == '\n' || c == '\r')) {
        ++pos_;
      } else {
        break;
      }
    }
  }

  static bool name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
  }

  std::string parse_name() {
    size_t start = pos_;
    while (!at_end() && name_char(s_[pos_])) ++pos_;
    return std::string(s_.substr(start, pos_ - start));
  }

  // One UTF-8 code point from the source text.
  uint32_t decode_utf8() {
    unsigned char c = static_cast<unsigned char>(s_[pos_]);
    int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0) fail(pos_, "invalid UTF-8 in grammar text");
    if (pos_ + n > s_.size()) fail(pos_, "truncated UTF-8 in grammar text");
    uint32_t cp = n == 1 ? c : c & (0x7F >> n);
    for (int i = 1; i < n; ++i) {
      unsigned char d = static_cast<unsigned char>(s_[pos_ + i]);
      if ((d & 0xC0) != 0x80) fail(pos_, "invalid UTF-8 in grammar text");
      cp = (cp << 6) | (d & 0x3F);
    }
    pos_ += n;
    return cp;
  }

  uint32_t parse_hex(int digits) {
    uint32_t v = 0;
    for (int i = 0; i < digits; ++i) {
      if (at_end()) fail(pos_, "expected a hex digit");
      char c = s_[pos_];
      int d = (c >= '0' && c <= '9') ? c - '0' : (c >= 'a' && c <= 'f') ? c - 'a' + 10 : (c >= 'A' && c <= 'F') ? c - 'A' + 10 : -1;
      if (d < 0) fail(pos_, std::string("expected a hex digit, got '") + printable(c) + "'");
      v = v * 16 + static_cast<uint32_t>(d);
      ++pos_;
    }
    if (v > 0x10FFFF) fail(pos_, "code point above U+10FFFF");
    return v;
  }

  // A character inside a literal or class (after the opening quote/bracket).
  uint32_t parse_char() {
    if (at_end()) fail(pos_, "unterminated literal or character class");
    if (s_[pos_] != '\\') return decode_utf8();
    size_t at = pos_++;
    if (at_end()) fail(at, "unterminated escape");
    char c = s_[pos_++];
    switch (c) {
      case 'n': return '\n';
      case 'r': return '\r';
      case 't': return '\t';
      case '0': return 0;
      case '\\': case '"': case '\'': case '[': case ']': case '-': case '^': case '/': return static_cast<uint32_t>(c);
      case 'x': return parse_hex(2);
      case 'u': return parse_hex(4);
      case 'U': return parse_hex(8);
      default: fail(at, std::string("unknown escape '\\") + printable(c) + "'");
    }
  }

  Expr parse_alternatives(int depth) {
    if (depth > kMaxNesting) fail(pos_, "groups nested too deeply");
    std::vector<Expr> alts;
    alts.push_back(parse_sequence(depth));
    while (!at_end() && s_[pos_] == '|') {
      ++pos_;
      skip_space(true);
      alts.push_back(parse_sequence(depth));
    }
    return Expr::alt(std::move(alts));
  }

  Expr parse_sequence(int depth) {
    bool nested = depth > 0;
    std::vector<Expr> items;
    while (!at_end()) {
      char c = s_[pos_];
      size_t at = pos_;
      if (c == '"') {
        ++pos_;
        std::string bytes;
        while (true) {
          if (at_end()) fail(at, "unterminated literal");
          if (s_[pos_] == '"') break;
          utf8_append(bytes, parse_char());
        }
        ++pos_;
        items.push_back(Expr::literal(std::move(bytes)));
      } else if (c == '[') {
        ++pos_;
        bool neg = false;
        if (!at_end() && s_[pos_] == '^') {
          neg = true;
          ++pos_;
        }
        std::vector<CodeRange> ranges;
        while (true) {
          if (at_end()) fail(at, "unterminated character class");
          if (s_[pos_] == ']') break;
          uint32_t lo = parse_char();
          uint32_t hi = lo;
          if (pos_ + 1 < s_.size() && s_[pos_] == '-' && s_[pos_ + 1] != ']') {
            ++pos_;
            hi = parse_char();
            if (hi < lo) fail(at, "character range is out of order");
          }
          ranges.push_back({lo, hi});
        }
        ++pos_;
        items.push_back(Expr::char_class(std::move(ranges), neg));
      } else if (c == '.') {
        ++pos_;
        items.push_back(Expr::char_class({{'\n', '\n'}}, true));
      } else if (c == '(') {
        ++pos_;
        skip_space(true);
        Expr inner = parse_alternatives(depth + 1);
        if (at_end() || s_[pos_] != ')') fail(at, "unclosed '('");
        ++pos_;
        items.push_back(std::move(inner));
      } else if (name_char(c)) {
        items.push_back(Expr::ref(parse_name()));
      } else if (c == '*' || c == '+' || c == '?' || c == '{') {
        if (items.empty()) fail(at, std::string("'") + c + "' has nothing to repeat");
        Expr last = std::move(items.back());
        items.pop_back();
        int min = 0, max = -1;
        ++pos_;
        if (c == '+') min = 1;
        if (c == '?') max = 1;
        if (c == '{') {
          skip_space(false);
          min = parse_int(at);
          skip_space(false);
          max = min;
          if (!at_end() && s_[pos_] == ',') {
            ++pos_;
            skip_space(false);
            max = (!at_end() && s_[pos_] >= '0' && s_[pos_] <= '9') ? parse_int(at) : -1;
            skip_space(false);
          }
          if (at_end() || s_[pos_] != '}') fail(at, "expected '}' to close the repetition");
          ++pos_;
          if (max >= 0 && max < min) fail(at, "repetition maximum is below its minimum");
        }
        try {
          items.push_back(Expr::repeat(std::move(last), min, max));
        } catch (const GrammarError& e) {
          fail(at, e.what());
        }
      } else {
        break;
      }
      skip_space(nested);
    }
    return Expr::seq(std::move(items));
  }

  int parse_int(size_t at) {
    if (at_end() || s_[pos_] < '0' || s_[pos_] > '9') fail(pos_, "expected a number in the repetition");
    long v = 0;
    while (!at_end() && s_[pos_] >= '0' && s_[pos_] <= '9') {
      v = v * 10 + (s_[pos_++] - '0');
      if (v > kMaxRepeat) fail(at, strprintf("repetition count over the limit of %d", kMaxRepeat));
    }
    return static_cast<int>(v);
  }

  std::string_view s_;
  size_t pos_ = 0;
};

}  // namespace

Grammar parse_gbnf(std::string_view text) { return Parser(text).run(); }

}  // namespace distllm::structured
