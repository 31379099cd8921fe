#include "distllm/serve/chat_template.h"

#include <algorithm>
#include <cmath>
#include <ctime>
#include <functional>
#include <set>
#include <unordered_map>

#include "distllm/tokenizer/utf8.h"

namespace distllm::serve {

using V = TemplateValue;
using VK = TemplateValue::Kind;

// ============================================================================
// Lexing: the template becomes text segments and tag segments (token lists).
// ============================================================================
namespace jinja {

enum class TokKind { kName, kString, kInt, kFloat, kOp };
struct Tok {
  TokKind kind;
  std::string text;
  int64_t i = 0;
  double f = 0.0;
  int line = 0;
};

enum class SegKind { kText, kExpr, kStmt };
struct Segment {
  SegKind kind;
  std::string text;
  std::vector<Tok> toks;
  int line = 0;
};

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

class TemplateLexer {
 public:
  TemplateLexer(const std::string& src, const std::string& origin) : src_(src), origin_(origin) {}

  std::vector<Segment> run() {
    std::vector<Segment> segs;
    size_t pos = 0;
    bool strip_next = false;  // previous tag ended with '-'
    bool trim_next = false;   // previous tag was a block or comment (trim_blocks)
    while (pos <= src_.size()) {
      size_t tag = find_tag(pos);
      std::string text = src_.substr(pos, (tag == std::string::npos ? src_.size() : tag) - pos);
      if (strip_next) {
        size_t k = 0;
        while (k < text.size() && is_space(text[k])) ++k;
        text.erase(0, k);
      } else if (trim_next) {
        if (text.compare(0, 1, "\n") == 0) text.erase(0, 1);
        else if (text.compare(0, 2, "\r\n") == 0) text.erase(0, 2);
      }
      const int text_line = line_;
      count_lines(pos, tag == std::string::npos ? src_.size() : tag);
      if (tag == std::string::npos) {
        if (!text.empty()) segs.push_back({SegKind::kText, text, {}, text_line});
        break;
      }
      const char kind = src_[tag + 1];
      const char mod = tag + 2 < src_.size() ? src_[tag + 2] : '\0';
      if (mod == '-') {
        while (!text.empty() && is_space(text.back())) text.pop_back();
      } else if (kind != '{' && mod != '+') {
        // lstrip_blocks: spaces and tabs between the line start and a block tag go.
        // Judged on the source, since trim_blocks may have eaten the newline.
        size_t k = tag;
        while (k > pos && (src_[k - 1] == ' ' || src_[k - 1] == '\t')) --k;
        bool line_start = k == 0 || src_[k - 1] == '\n';
        if (line_start) text.erase(text.size() - std::min(text.size(), tag - k));
      }
      if (!text.empty()) segs.push_back({SegKind::kText, text, {}, text_line});
      size_t body = tag + 2 + ((mod == '-' || mod == '+') ? 1 : 0);
      if (kind == '#') {
        size_t end = src_.find("#}", body);
        if (end == std::string::npos) fail(line_, "unterminated comment {# ... #}");
        strip_next = src_[end - 1] == '-' && end - 1 >= body;
        trim_next = true;
        count_lines(tag, end + 2);
        pos = end + 2;
        continue;
      }
      Segment seg{kind == '{' ? SegKind::kExpr : SegKind::kStmt, "", {}, line_};
      pos = body;
      strip_next = lex_code(pos, kind == '{' ? "}}" : "%}", seg.toks);
      trim_next = kind == '%';
      if (seg.toks.empty()) fail(seg.line, kind == '{' ? "empty expression {{ }}" : "empty statement {% %}");
      segs.push_back(std::move(seg));
    }
    return segs;
  }

 private:
  [[noreturn]] void fail(int line, const std::string& msg) const {
    throw_error(strprintf("%s: line %d: %s", origin_.c_str(), line, msg.c_str()));
  }

  size_t find_tag(size_t from) const {
    size_t p = from;
    while ((p = src_.find('{', p)) != std::string::npos) {
      if (p + 1 < src_.size() && (src_[p + 1] == '{' || src_[p + 1] == '%' || src_[p + 1] == '#')) return p;
      ++p;
    }
    return std::string::npos;
  }

  void count_lines(size_t from, size_t to) {
    for (size_t i = from; i < to && i < src_.size(); ++i) line_ += src_[i] == '\n' ? 1 : 0;
  }

  // Lexes tokens up to `closer` ("}}" or "%}"); returns whether it was "-}}"/"-%}".
  bool lex_code(size_t& p, const char* closer, std::vector<Tok>& out) {
    const size_t n = src_.size();
    while (true) {
      while (p < n && is_space(src_[p])) line_ += src_[p++] == '\n' ? 1 : 0;
      if (p >= n) fail(line_, strprintf("unterminated tag: missing '%s'", closer));
      if (src_[p] == '-' && src_.compare(p + 1, 2, closer) == 0) {
        p += 3;
        return true;
      }
      if (src_.compare(p, 2, closer) == 0) {
        p += 2;
        return false;
      }
      char c = src_[p];
      Tok t;
      t.line = line_;
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t s = p;
        while (p < n && (std::isalnum(static_cast<unsigned char>(src_[p])) || src_[p] == '_')) ++p;
        t.kind = TokKind::kName;
        t.text = src_.substr(s, p - s);
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        size_t s = p;
        while (p < n && (std::isdigit(static_cast<unsigned char>(src_[p])) || src_[p] == '_')) ++p;
        bool is_float = false;
        if (p + 1 < n && src_[p] == '.' && std::isdigit(static_cast<unsigned char>(src_[p + 1]))) {
          is_float = true;
          ++p;
          while (p < n && std::isdigit(static_cast<unsigned char>(src_[p]))) ++p;
        }
        if (p < n && (src_[p] == 'e' || src_[p] == 'E')) {
          size_t q = p + 1;
          if (q < n && (src_[q] == '+' || src_[q] == '-')) ++q;
          if (q < n && std::isdigit(static_cast<unsigned char>(src_[q]))) {
            is_float = true;
            p = q;
            while (p < n && std::isdigit(static_cast<unsigned char>(src_[p]))) ++p;
          }
        }
        std::string digits;
        for (size_t k = s; k < p; ++k)
          if (src_[k] != '_') digits += src_[k];
        t.text = digits;
        if (is_float) {
          t.kind = TokKind::kFloat;
          t.f = std::strtod(digits.c_str(), nullptr);
        } else {
          t.kind = TokKind::kInt;
          errno = 0;
          t.i = std::strtoll(digits.c_str(), nullptr, 10);
          if (errno == ERANGE) fail(line_, "integer literal out of range: " + digits);
        }
      } else if (c == '\'' || c == '"') {
        t.kind = TokKind::kString;
        ++p;
        while (true) {
          if (p >= n) fail(t.line, "unterminated string literal");
          char d = src_[p++];
          if (d == c) break;
          if (d == '\n') ++line_;
          if (d != '\\') {
            t.text += d;
            continue;
          }
          if (p >= n) fail(t.line, "unterminated string literal");
          char e = src_[p++];
          switch (e) {
            case 'n': t.text += '\n'; break;
            case 't': t.text += '\t'; break;
            case 'r': t.text += '\r'; break;
            case '\\': t.text += '\\'; break;
            case '\'': t.text += '\''; break;
            case '"': t.text += '"'; break;
            case '0': t.text += '\0'; break;
            case '\n': ++line_; break;  // line continuation
            case 'u':
            case 'x': {
              size_t len = e == 'u' ? 4 : 2;
              if (p + len > n) fail(t.line, "bad escape in string literal");
              std::string hex = src_.substr(p, len);
              if (hex.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos)
                fail(t.line, "bad escape in string literal");
              utf8_append(t.text, static_cast<uint32_t>(std::strtoul(hex.c_str(), nullptr, 16)));
              p += len;
              break;
            }
            default:  // Python keeps unknown escapes as written
              t.text += '\\';
              t.text += e;
          }
        }
      } else {
        static const char* kOps2[] = {"//", "**", "==", "!=", "<=", ">="};
        t.kind = TokKind::kOp;
        for (const char* op : kOps2) {
          if (src_.compare(p, 2, op) == 0) {
            t.text = op;
            break;
          }
        }
        if (t.text.empty()) {
          if (std::string("+-*/%~<>()[]{}.,:|=").find(c) == std::string::npos)
            fail(line_, strprintf("unexpected character '%c'", c));
          t.text = std::string(1, c);
        }
        p += t.text.size();
      }
      out.push_back(std::move(t));
    }
  }

  const std::string& src_;
  const std::string& origin_;
  int line_ = 1;
};

}  // namespace jinja

// ============================================================================
// Syntax tree
// ============================================================================
namespace jinja {
struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum Kind {
    kLiteral, kVar, kAttr, kItem, kSlice, kCall, kFilter, kTest, kNot, kNeg, kPos,
    kBinary, kAnd, kOr, kCond, kList, kDict, kTuple
  };
  Kind kind;
  int line = 0;
  V literal;
  std::string name;              // variable, attribute, filter, test or operator
  std::vector<ExprPtr> args;     // operands / positional arguments (may hold nullptr)
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  bool negated = false;          // `is not`
};

struct Ctx;
struct Node {
  int line = 0;
  virtual ~Node() = default;
  virtual void render(Ctx& ctx, std::string& out) const = 0;
};
using Body = std::vector<std::unique_ptr<Node>>;

}  // namespace jinja
}  // namespace distllm::serve

// Defined at namespace scope because template_value.h forward-declares it.
struct distllm::serve::TemplateMacro {
  std::string name;
  std::vector<std::string> params;
  std::vector<const jinja::Expr*> defaults;  // nullptr: required
  const jinja::Body* body = nullptr;
};

namespace distllm::serve {
namespace jinja {

const std::set<std::string> kFilters = {
    "trim", "upper", "lower", "capitalize", "title", "length", "count", "first", "last", "join", "default", "d",
    "tojson", "string", "int", "float", "list", "items", "replace", "safe", "abs", "map", "select", "reject",
    "selectattr", "rejectattr", "unique", "sort"};
const std::set<std::string> kTests = {
    "defined", "undefined", "none", "string", "number", "integer", "float", "boolean", "mapping", "iterable",
    "sequence", "callable", "equalto", "eq", "==", "ne", "!=", "odd", "even", "true", "false", "in", "sameas",
    "divisibleby", "lt", "gt", "le", "ge"};

class ExprParser {
 public:
  ExprParser(const std::vector<Tok>& toks, size_t start, const std::string& origin, int line)
      : t_(toks), i_(start), origin_(origin), line_(line) {}

  [[noreturn]] void fail(const std::string& msg) const {
    int line = i_ < t_.size() ? t_[i_].line : line_;
    throw_error(strprintf("%s: line %d: %s", origin_.c_str(), line, msg.c_str()));
  }
  bool at_end() const { return i_ >= t_.size(); }
  void expect_end() const {
    if (!at_end()) fail("unexpected '" + t_[i_].text + "'");
  }
  bool is_op(const char* op) const { return !at_end() && t_[i_].kind == TokKind::kOp && t_[i_].text == op; }
  bool is_name(const char* n) const { return !at_end() && t_[i_].kind == TokKind::kName && t_[i_].text == n; }
  bool accept_op(const char* op) {
    if (!is_op(op)) return false;
    ++i_;
    return true;
  }
  bool accept_name(const char* n) {
    if (!is_name(n)) return false;
    ++i_;
    return true;
  }
  void expect_op(const char* op) {
    if (!accept_op(op)) fail(strprintf("expected '%s'%s", op, at_end() ? " at end of tag" : (" before '" + t_[i_].text + "'").c_str()));
  }
  std::string expect_identifier(const char* what) {
    if (at_end() || t_[i_].kind != TokKind::kName) fail(strprintf("expected %s", what));
    return t_[i_++].text;
  }
  size_t pos() const { return i_; }

  ExprPtr expression() { return conditional(); }

  // An expression without the `x if c else y` form (for-loop iterables).
  ExprPtr or_expression() { return or_expr(); }

 private:
  ExprPtr make(Expr::Kind k) {
    auto e = std::make_unique<Expr>();
    e->kind = k;
    e->line = i_ < t_.size() ? t_[i_].line : line_;
    return e;
  }
  ExprPtr binary(const std::string& op, ExprPtr l, ExprPtr r, Expr::Kind k = Expr::kBinary) {
    auto e = make(k);
    e->name = op;
    e->args.push_back(std::move(l));
    e->args.push_back(std::move(r));
    return e;
  }

  ExprPtr conditional() {
    ExprPtr e = or_expr();
    while (accept_name("if")) {
      auto c = make(Expr::kCond);
      ExprPtr cond = or_expr();
      ExprPtr otherwise = accept_name("else") ? conditional() : nullptr;
      c->args.push_back(std::move(e));
      c->args.push_back(std::move(cond));
      c->args.push_back(std::move(otherwise));
      e = std::move(c);
    }
    return e;
  }
  ExprPtr or_expr() {
    ExprPtr l = and_expr();
    while (accept_name("or")) l = binary("or", std::move(l), and_expr(), Expr::kOr);
    return l;
  }
  ExprPtr and_expr() {
    ExprPtr l = not_expr();
    while (accept_name("and")) l = binary("and", std::move(l), not_expr(), Expr::kAnd);
    return l;
  }
  ExprPtr not_expr() {
    if (accept_name("not")) {
      auto e = make(Expr::kNot);
      e->args.push_back(not_expr());
      return e;
    }
    return compare();
  }
  ExprPtr compare() {
    ExprPtr l = math1();
    while (true) {
      static const char* kCmp[] = {"==", "!=", "<=", ">=", "<", ">"};
      bool matched = false;
      for (const char* op : kCmp) {
        if (accept_op(op)) {
          l = binary(op, std::move(l), math1());
          matched = true;
          break;
        }
      }
      if (matched) continue;
      if (accept_name("in")) {
        l = binary("in", std::move(l), math1());
      } else if (is_name("not") && i_ + 1 < t_.size() && t_[i_ + 1].kind == TokKind::kName && t_[i_ + 1].text == "in") {
        i_ += 2;
        l = binary("not in", std::move(l), math1());
      } else {
        return l;
      }
    }
  }
  ExprPtr math1() {
    ExprPtr l = concat();
    while (true) {
      if (accept_op("+")) l = binary("+", std::move(l), concat());
      else if (accept_op("-")) l = binary("-", std::move(l), concat());
      else return l;
    }
  }
  ExprPtr concat() {
    ExprPtr l = math2();
    while (accept_op("~")) l = binary("~", std::move(l), math2());
    return l;
  }
  ExprPtr math2() {
    ExprPtr l = power();
    while (true) {
      if (accept_op("*")) l = binary("*", std::move(l), power());
      else if (accept_op("//")) l = binary("//", std::move(l), power());
      else if (accept_op("/")) l = binary("/", std::move(l), power());
      else if (accept_op("%")) l = binary("%", std::move(l), power());
      else return l;
    }
  }
  ExprPtr power() {
    ExprPtr l = unary(true);
    while (accept_op("**")) l = binary("**", std::move(l), unary(true));
    return l;
  }
  ExprPtr unary(bool with_filter) {
    ExprPtr e;
    if (accept_op("-")) {
      e = make(Expr::kNeg);
      e->args.push_back(unary(false));
    } else if (accept_op("+")) {
      e = make(Expr::kPos);
      e->args.push_back(unary(false));
    } else {
      e = primary();
    }
    e = postfix(std::move(e));
    if (with_filter) e = filters(std::move(e));
    return e;
  }
  ExprPtr primary() {
    if (at_end()) fail("expected an expression");
    const Tok& t = t_[i_];
    if (t.kind == TokKind::kName) {
      ++i_;
      auto e = make(Expr::kLiteral);
      if (t.text == "true" || t.text == "True") e->literal = V::boolean(true);
      else if (t.text == "false" || t.text == "False") e->literal = V::boolean(false);
      else if (t.text == "none" || t.text == "None") e->literal = V::none();
      else {
        e->kind = Expr::kVar;
        e->name = t.text;
      }
      return e;
    }
    if (t.kind == TokKind::kString) {
      auto e = make(Expr::kLiteral);
      std::string s;
      while (!at_end() && t_[i_].kind == TokKind::kString) s += t_[i_++].text;  // "a" "b" concatenate
      e->literal = V::string(s);
      return e;
    }
    if (t.kind == TokKind::kInt || t.kind == TokKind::kFloat) {
      ++i_;
      auto e = make(Expr::kLiteral);
      e->literal = t.kind == TokKind::kInt ? V::integer(t.i) : V::number(t.f);
      return e;
    }
    if (accept_op("(")) {
      if (accept_op(")")) return make(Expr::kTuple);
      ExprPtr first = expression();
      if (!is_op(",")) {
        expect_op(")");
        return first;
      }
      auto tup = make(Expr::kTuple);
      tup->args.push_back(std::move(first));
      while (accept_op(",")) {
        if (is_op(")")) break;
        tup->args.push_back(expression());
      }
      expect_op(")");
      return tup;
    }
    if (accept_op("[")) {
      auto list = make(Expr::kList);
      while (!is_op("]")) {
        list->args.push_back(expression());
        if (!accept_op(",")) break;
      }
      expect_op("]");
      return list;
    }
    if (accept_op("{")) {
      auto dict = make(Expr::kDict);
      while (!is_op("}")) {
        dict->args.push_back(expression());
        expect_op(":");
        dict->args.push_back(expression());
        if (!accept_op(",")) break;
      }
      expect_op("}");
      return dict;
    }
    fail("unexpected '" + t.text + "'");
  }
  void call_args(Expr& e) {
    // after '('
    while (!is_op(")")) {
      if (!at_end() && t_[i_].kind == TokKind::kName && i_ + 1 < t_.size() && t_[i_ + 1].kind == TokKind::kOp &&
          t_[i_ + 1].text == "=") {
        std::string key = t_[i_].text;
        i_ += 2;
        e.kwargs.emplace_back(key, expression());
      } else {
        if (!e.kwargs.empty()) fail("positional argument after keyword argument");
        e.args.push_back(expression());
      }
      if (!accept_op(",")) break;
    }
    expect_op(")");
  }
  ExprPtr postfix(ExprPtr e) {
    while (true) {
      if (accept_op(".")) {
        if (!at_end() && t_[i_].kind == TokKind::kInt) {
          auto item = make(Expr::kItem);
          auto idx = make(Expr::kLiteral);
          idx->literal = V::integer(t_[i_++].i);
          item->args.push_back(std::move(e));
          item->args.push_back(std::move(idx));
          e = std::move(item);
          continue;
        }
        auto attr = make(Expr::kAttr);
        attr->name = expect_identifier("an attribute name after '.'");
        attr->args.push_back(std::move(e));
        e = std::move(attr);
      } else if (accept_op("[")) {
        ExprPtr start, stop, step;
        bool slice = false;
        if (!is_op(":")) start = expression();
        if (accept_op(":")) {
          slice = true;
          if (!is_op(":") && !is_op("]")) stop = expression();
          if (accept_op(":") && !is_op("]")) step = expression();
        }
        expect_op("]");
        auto n = make(slice ? Expr::kSlice : Expr::kItem);
        n->args.push_back(std::move(e));
        n->args.push_back(std::move(start));
        if (slice) {
          n->args.push_back(std::move(stop));
          n->args.push_back(std::move(step));
        } else if (!n->args[1]) {
          fail("empty subscript []");
        }
        e = std::move(n);
      } else if (accept_op("(")) {
        auto call = make(Expr::kCall);
        call->args.push_back(std::move(e));
        call_args(*call);
        e = std::move(call);
      } else {
        return e;
      }
    }
  }
  ExprPtr filters(ExprPtr e) {
    while (true) {
      if (accept_op("|")) {
        auto f = make(Expr::kFilter);
        f->name = expect_identifier("a filter name after '|'");
        if (!kFilters.count(f->name)) fail("unsupported filter '" + f->name + "'");
        f->args.push_back(std::move(e));
        if (accept_op("(")) call_args(*f);
        e = std::move(f);
      } else if (accept_name("is")) {
        auto t = make(Expr::kTest);
        t->negated = accept_name("not");
        if (at_end()) fail("expected a test name after 'is'");
        if (t_[i_].kind == TokKind::kName || (t_[i_].kind == TokKind::kOp && (t_[i_].text == "==" || t_[i_].text == "!="))) {
          t->name = t_[i_++].text;
        } else {
          fail("expected a test name after 'is'");
        }
        if (!kTests.count(t->name)) fail("unsupported test '" + t->name + "'");
        t->args.push_back(std::move(e));
        if (accept_op("(")) {
          call_args(*t);
        } else if (!at_end() && !is_name("else") && !is_name("or") && !is_name("and") && !is_name("if") &&
                   (t_[i_].kind == TokKind::kString || t_[i_].kind == TokKind::kInt || t_[i_].kind == TokKind::kFloat ||
                    (t_[i_].kind == TokKind::kName && !is_name("not") && !is_name("in") && !is_name("is")) ||
                    is_op("[") || is_op("{"))) {
          t->args.push_back(postfix(primary()));
        }
        e = std::move(t);
      } else {
        return e;
      }
    }
  }

  const std::vector<Tok>& t_;
  size_t i_;
  const std::string& origin_;
  int line_;
};

// ============================================================================
// Evaluation
// ============================================================================
constexpr size_t kMaxOutput = 64u << 20;
constexpr int64_t kMaxRange = 100000;
constexpr int kMaxMacroDepth = 64;
constexpr int64_t kMaxSteps = 5'000'000;  // statements and loop iterations per render

struct Ctx {
  std::vector<std::unordered_map<std::string, V>> scopes;
  enum class Flow { kNormal, kBreak, kContinue } flow = Flow::kNormal;
  int macro_depth = 0;
  int64_t steps = 0;

  void step(int line) {
    if (++steps > kMaxSteps) fail_at_line(line);
  }
  [[noreturn]] static void fail_at_line(int line);

  V lookup(const std::string& name) const {
    for (auto it = scopes.rbegin(); it != scopes.rend(); ++it) {
      auto f = it->find(name);
      if (f != it->end()) return f->second;
    }
    return {};
  }
  void set(const std::string& name, V v) { scopes.back()[name] = std::move(v); }
};

[[noreturn]] void fail_at(int line, const std::string& msg) {
  throw TemplateError(strprintf("chat template line %d: %s", line, msg.c_str()));
}

void render_body(const Body& body, Ctx& ctx, std::string& out);
V eval(const Expr& e, Ctx& ctx);

// Strings are sequences of code points for indexing, slicing, length and iteration.
std::vector<std::string> code_points(const std::string& s) {
  std::vector<std::string> out;
  for (size_t i = 0; i < s.size();) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
    len = std::min(len, s.size() - i);
    out.push_back(s.substr(i, len));
    i += len;
  }
  return out;
}

std::vector<V> iterate(const V& v, int line) {
  std::vector<V> out;
  switch (v.kind()) {
    case VK::kUndefined: return out;  // Jinja's Undefined iterates as empty
    case VK::kArray: return v.items();
    case VK::kObject:
      for (const auto& [k, x] : v.fields()) out.push_back(V::string(k));
      return out;
    case VK::kString:
      for (auto& cp : code_points(v.as_string())) out.push_back(V::string(cp));
      return out;
    default: fail_at(line, strprintf("cannot iterate over a %s", v.type_name()));
  }
}

int64_t to_index(const V& v, int line) {
  if (v.kind() == VK::kInt) return v.as_int();
  if (v.kind() == VK::kBool) return v.as_bool() ? 1 : 0;
  fail_at(line, strprintf("index must be an integer, not %s", v.type_name()));
}

V get_item(const V& obj, const V& key, int line) {
  if (obj.is_object()) {
    if (!key.is_string()) return {};
    return obj.get(key.as_string());
  }
  if (obj.is_array() || obj.is_string()) {
    if (obj.is_array() && !key.is_number() && key.kind() != VK::kBool) return {};
    int64_t i = to_index(key, line);
    if (obj.is_array()) {
      int64_t n = static_cast<int64_t>(obj.items().size());
      if (i < 0) i += n;
      if (i < 0 || i >= n) return {};
      return obj.items()[static_cast<size_t>(i)];
    }
    auto cps = code_points(obj.as_string());
    int64_t n = static_cast<int64_t>(cps.size());
    if (i < 0) i += n;
    if (i < 0 || i >= n) return {};
    return V::string(cps[static_cast<size_t>(i)]);
  }
  if (obj.is_undefined()) return {};
  fail_at(line, strprintf("cannot subscript a %s", obj.type_name()));
}

V slice(const V& obj, const V* start_v, const V* stop_v, const V* step_v, int line) {
  int64_t step = step_v && !step_v->is_none() ? to_index(*step_v, line) : 1;
  if (step == 0) fail_at(line, "slice step cannot be zero");
  std::vector<V> items;
  bool is_str = obj.is_string();
  if (is_str) {
    for (auto& cp : code_points(obj.as_string())) items.push_back(V::string(cp));
  } else if (obj.is_array()) {
    items = obj.items();
  } else if (obj.is_undefined()) {
    return {};
  } else {
    fail_at(line, strprintf("cannot slice a %s", obj.type_name()));
  }
  int64_t n = static_cast<int64_t>(items.size());
  auto norm = [&](const V* v, int64_t dflt, int64_t lo, int64_t hi) {
    if (!v || v->is_none()) return dflt;
    int64_t x = to_index(*v, line);
    if (x < 0) x += n;
    return std::clamp(x, lo, hi);
  };
  std::vector<V> out;
  if (step > 0) {
    int64_t a = norm(start_v, 0, 0, n), b = norm(stop_v, n, 0, n);
    for (int64_t i = a; i < b; i += step) out.push_back(items[static_cast<size_t>(i)]);
  } else {
    int64_t a = norm(start_v, n - 1, -1, n - 1), b = norm(stop_v, -1, -1, n - 1);
    for (int64_t i = a; i > b; i += step) out.push_back(items[static_cast<size_t>(i)]);
  }
  if (!is_str) return V::array(std::move(out));
  std::string s;
  for (auto& x : out) s += x.as_string();
  return V::string(s);
}

bool contains(const V& container, const V& item, int line) {
  if (container.is_string()) {
    if (!item.is_string()) fail_at(line, "'in <string>' requires a string on the left");
    return container.as_string().find(item.as_string()) != std::string::npos;
  }
  if (container.is_array()) {
    for (const V& x : container.items())
      if (template_equal(x, item)) return true;
    return false;
  }
  if (container.is_object()) return item.is_string() && !container.get(item.as_string()).is_undefined();
  if (container.is_undefined()) return false;
  fail_at(line, strprintf("cannot test membership in a %s", container.type_name()));
}

int compare_values(const V& a, const V& b, int line) {
  if ((a.is_number() || a.kind() == VK::kBool) && (b.is_number() || b.kind() == VK::kBool)) {
    double x = a.kind() == VK::kBool ? a.as_bool() : a.as_double();
    double y = b.kind() == VK::kBool ? b.as_bool() : b.as_double();
    return x < y ? -1 : x > y ? 1 : 0;
  }
  if (a.is_string() && b.is_string()) return a.as_string().compare(b.as_string()) < 0 ? -1 : a.as_string() == b.as_string() ? 0 : 1;
  fail_at(line, strprintf("cannot compare %s with %s", a.type_name(), b.type_name()));
}

std::string strip_chars(const std::string& s, const std::string* chars, bool left, bool right) {
  auto strip = [&](char c) { return chars ? chars->find(c) != std::string::npos : is_space(c); };
  size_t a = 0, b = s.size();
  if (left)
    while (a < b && strip(s[a])) ++a;
  if (right)
    while (b > a && strip(s[b - 1])) --b;
  return s.substr(a, b - a);
}

std::string ascii_upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}
std::string ascii_lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}
std::string capitalize(const std::string& s) {
  std::string out = ascii_lower(s);
  if (!out.empty()) out[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(out[0])));
  return out;
}
std::string title(const std::string& s) {
  std::string out = s;
  bool start = true;
  for (char& c : out) {
    unsigned char u = static_cast<unsigned char>(c);
    if (std::isalpha(u)) {
      c = static_cast<char>(start ? std::toupper(u) : std::tolower(u));
      start = false;
    } else {
      start = true;
    }
  }
  return out;
}
std::string replace_all(const std::string& s, const std::string& from, const std::string& to, int64_t count) {
  if (from.empty()) return s;
  std::string out;
  size_t pos = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    size_t hit = s.find(from, pos);
    if (hit == std::string::npos) break;
    out.append(s, pos, hit - pos);
    out += to;
    pos = hit + from.size();
    ++done;
  }
  out.append(s, pos, std::string::npos);
  return out;
}

struct Args {
  std::vector<V> pos;
  std::vector<std::pair<std::string, V>> kw;
  const V* get(size_t i, const char* name) const {
    if (i < pos.size()) return &pos[i];
    for (const auto& [k, v] : kw)
      if (k == name) return &v;
    return nullptr;
  }
};

Args eval_args(const Expr& e, size_t first, Ctx& ctx) {
  Args a;
  for (size_t i = first; i < e.args.size(); ++i) a.pos.push_back(eval(*e.args[i], ctx));
  for (const auto& [k, x] : e.kwargs) a.kw.emplace_back(k, eval(*x, ctx));
  return a;
}

bool apply_test(const std::string& name, const V& v, const Args& a, int line);
V apply_filter(const std::string& name, const V& v, const Args& a, int line);

const V& need(const Args& a, size_t i, const char* name, const char* what, int line) {
  const V* v = a.get(i, name);
  if (!v) fail_at(line, strprintf("%s needs an argument '%s'", what, name));
  return *v;
}

const std::string& need_string(const V& v, const char* what, int line) {
  if (!v.is_string()) fail_at(line, strprintf("%s expects a string, got %s", what, v.type_name()));
  return v.as_string();
}

bool apply_test(const std::string& name, const V& v, const Args& a, int line) {
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "string") return v.is_string();
  if (name == "number") return v.is_number();
  if (name == "integer") return v.kind() == VK::kInt;
  if (name == "float") return v.kind() == VK::kFloat;
  if (name == "boolean") return v.kind() == VK::kBool;
  if (name == "mapping") return v.is_object();
  if (name == "iterable") return v.is_array() || v.is_object() || v.is_string();
  if (name == "sequence") return v.is_array() || v.is_object() || v.is_string();
  if (name == "callable") return v.kind() == VK::kFunction || v.kind() == VK::kMacro;
  if (name == "true") return v.kind() == VK::kBool && v.as_bool();
  if (name == "false") return v.kind() == VK::kBool && !v.as_bool();
  if (name == "equalto" || name == "eq" || name == "==") return template_equal(v, need(a, 0, "value", "test 'equalto'", line));
  if (name == "ne" || name == "!=") return !template_equal(v, need(a, 0, "value", "test 'ne'", line));
  if (name == "sameas") {
    const V& o = need(a, 0, "value", "test 'sameas'", line);
    return v.kind() == o.kind() && template_equal(v, o);
  }
  if (name == "lt") return compare_values(v, need(a, 0, "value", "test 'lt'", line), line) < 0;
  if (name == "gt") return compare_values(v, need(a, 0, "value", "test 'gt'", line), line) > 0;
  if (name == "le") return compare_values(v, need(a, 0, "value", "test 'le'", line), line) <= 0;
  if (name == "ge") return compare_values(v, need(a, 0, "value", "test 'ge'", line), line) >= 0;
  if (name == "in") return contains(need(a, 0, "seq", "test 'in'", line), v, line);
  if (name == "odd" || name == "even" || name == "divisibleby") {
    if (v.kind() != VK::kInt) fail_at(line, strprintf("test '%s' needs an integer, got %s", name.c_str(), v.type_name()));
    if (name == "odd") return v.as_int() % 2 != 0;
    if (name == "even") return v.as_int() % 2 == 0;
    int64_t d = to_index(need(a, 0, "num", "test 'divisibleby'", line), line);
    if (d == 0) fail_at(line, "divisibleby 0");
    return v.as_int() % d == 0;
  }
  fail_at(line, "unsupported test '" + name + "'");
}

V attribute_of(const V& v, const std::string& path) {
  V cur = v;
  for (const auto& part : split(path, '.')) cur = cur.get(part);
  return cur;
}

// The items a select/reject/map filter passes on: `args` starting at `first`
// name a test (select/reject) and its arguments.
std::vector<V> select_items(const V& seq, const Args& a, size_t first, bool by_attr, bool keep, int line) {
  std::vector<V> out;
  std::string attr;
  if (by_attr) attr = need_string(need(a, 0, "attribute", "selectattr", line), "selectattr", line);
  size_t ti = by_attr ? 1 : 0;
  (void)first;
  std::string test = a.pos.size() > ti ? need_string(a.pos[ti], "select test name", line) : "";
  if (!test.empty() && !kTests.count(test)) fail_at(line, "unsupported test '" + test + "'");
  Args targs;
  for (size_t i = ti + 1; i < a.pos.size(); ++i) targs.pos.push_back(a.pos[i]);
  for (const V& item : iterate(seq, line)) {
    V subject = by_attr ? attribute_of(item, attr) : item;
    bool ok = test.empty() ? subject.truthy() : apply_test(test, subject, targs, line);
    if (ok == keep) out.push_back(item);
  }
  return out;
}

V apply_filter(const std::string& name, const V& v, const Args& a, int line) {
  if (name == "safe") return v;
  if (name == "trim") {
    const V* chars = a.get(0, "chars");
    std::string cs = chars && chars->is_string() ? chars->as_string() : "";
    return V::string(strip_chars(v.to_output(), chars && chars->is_string() ? &cs : nullptr, true, true));
  }
  if (name == "upper") return V::string(ascii_upper(v.to_output()));
  if (name == "lower") return V::string(ascii_lower(v.to_output()));
  if (name == "capitalize") return V::string(capitalize(v.to_output()));
  if (name == "title") return V::string(title(v.to_output()));
  if (name == "string") return v.is_string() ? v : V::string(v.to_output());
  if (name == "length" || name == "count") {
    if (v.is_string()) return V::integer(static_cast<int64_t>(code_points(v.as_string()).size()));
    if (v.is_array()) return V::integer(static_cast<int64_t>(v.items().size()));
    if (v.is_object()) return V::integer(static_cast<int64_t>(v.fields().size()));
    if (v.is_undefined()) return V::integer(0);
    fail_at(line, strprintf("a %s has no length", v.type_name()));
  }
  if (name == "first" || name == "last") {
    std::vector<V> items = iterate(v, line);
    if (items.empty()) return {};
    return name == "first" ? items.front() : items.back();
  }
  if (name == "join") {
    const V* sep = a.get(0, "d");
    const V* attr = a.get(1, "attribute");
    std::string out, s = sep ? sep->to_output() : "";
    bool first = true;
    for (const V& item : iterate(v, line)) {
      out += (first ? "" : s) + (attr ? attribute_of(item, attr->to_output()) : item).to_output();
      first = false;
    }
    return V::string(out);
  }
  if (name == "default" || name == "d") {
    const V* dflt = a.get(0, "default_value");
    const V* boolean = a.get(1, "boolean");
    bool use = v.is_undefined() || (boolean && boolean->truthy() && !v.truthy());
    return use ? (dflt ? *dflt : V::string("")) : v;
  }
  if (name == "tojson") {
    const V* indent = a.get(0, "indent");
    int ind = indent && indent->kind() == VK::kInt ? static_cast<int>(indent->as_int()) : -1;
    return V::string(v.to_json(ind));
  }
  if (name == "int") {
    if (v.kind() == VK::kInt) return v;
    if (v.kind() == VK::kFloat) return V::integer(static_cast<int64_t>(v.as_double()));
    if (v.kind() == VK::kBool) return V::integer(v.as_bool());
    if (v.is_string()) {
      char* end = nullptr;
      long long x = std::strtoll(v.as_string().c_str(), &end, 10);
      return V::integer(end && *end == '\0' && !v.as_string().empty() ? x : 0);
    }
    return V::integer(0);
  }
  if (name == "float") {
    if (v.is_number()) return V::number(v.as_double());
    if (v.is_string()) return V::number(std::strtod(v.as_string().c_str(), nullptr));
    return V::number(0.0);
  }
  if (name == "abs") {
    if (v.kind() == VK::kInt) return V::integer(v.as_int() < 0 ? -v.as_int() : v.as_int());
    if (v.kind() == VK::kFloat) return V::number(std::fabs(v.as_double()));
    fail_at(line, strprintf("abs of a %s", v.type_name()));
  }
  if (name == "list") return V::array(iterate(v, line));
  if (name == "items") {
    if (!v.is_object()) {
      if (v.is_undefined()) return V::array();
      fail_at(line, strprintf("items of a %s", v.type_name()));
    }
    std::vector<V> out;
    for (const auto& [k, x] : v.fields()) out.push_back(V::array({V::string(k), x}));
    return V::array(std::move(out));
  }
  if (name == "replace") {
    const std::string& from = need_string(need(a, 0, "old", "replace", line), "replace", line);
    const std::string& to = need_string(need(a, 1, "new", "replace", line), "replace", line);
    const V* count = a.get(2, "count");
    return V::string(replace_all(v.to_output(), from, to, count && count->kind() == VK::kInt ? count->as_int() : -1));
  }
  if (name == "map") {
    std::vector<V> out;
    const V* attr = nullptr;
    for (const auto& [k, x] : a.kw)
      if (k == "attribute") attr = &x;
    for (const V& item : iterate(v, line)) {
      if (attr) {
        out.push_back(attribute_of(item, attr->to_output()));
      } else {
        const std::string& f = need_string(need(a, 0, "filter", "map", line), "map", line);
        if (!kFilters.count(f)) fail_at(line, "unsupported filter '" + f + "'");
        Args rest;
        for (size_t i = 1; i < a.pos.size(); ++i) rest.pos.push_back(a.pos[i]);
        out.push_back(apply_filter(f, item, rest, line));
      }
    }
    return V::array(std::move(out));
  }
  if (name == "select") return V::array(select_items(v, a, 0, false, true, line));
  if (name == "reject") return V::array(select_items(v, a, 0, false, false, line));
  if (name == "selectattr") return V::array(select_items(v, a, 0, true, true, line));
  if (name == "rejectattr") return V::array(select_items(v, a, 0, true, false, line));
  if (name == "unique") {
    std::vector<V> out;
    for (const V& item : iterate(v, line)) {
      bool seen = false;
      for (const V& o : out) seen = seen || template_equal(o, item);
      if (!seen) out.push_back(item);
    }
    return V::array(std::move(out));
  }
  if (name == "sort") {
    std::vector<V> items = iterate(v, line);
    const V* reverse = a.get(0, "reverse");
    const V* attr = nullptr;
    for (const auto& [k, x] : a.kw)
      if (k == "attribute") attr = &x;
    std::stable_sort(items.begin(), items.end(), [&](const V& x, const V& y) {
      V kx = attr ? attribute_of(x, attr->to_output()) : x, ky = attr ? attribute_of(y, attr->to_output()) : y;
      return compare_values(kx, ky, line) < 0;
    });
    if (reverse && reverse->truthy()) std::reverse(items.begin(), items.end());
    return V::array(std::move(items));
  }
  fail_at(line, "unsupported filter '" + name + "'");
}

V call_macro(const TemplateMacro& m, const Args& a, Ctx& ctx, int line) {
  if (ctx.macro_depth >= kMaxMacroDepth) fail_at(line, "macro recursion too deep");
  if (a.pos.size() > m.params.size()) fail_at(line, strprintf("macro '%s' takes %zu arguments", m.name.c_str(), m.params.size()));
  std::unordered_map<std::string, V> frame;
  for (size_t i = 0; i < m.params.size(); ++i) {
    const V* given = a.get(i, m.params[i].c_str());
    if (given) frame[m.params[i]] = *given;
    else if (m.defaults[i]) frame[m.params[i]] = eval(*m.defaults[i], ctx);
    else frame[m.params[i]] = V();
  }
  // A macro sees the template's globals and its arguments, not the caller's locals.
  Ctx inner;
  inner.scopes.push_back(ctx.scopes.front());
  if (ctx.scopes.size() > 1) inner.scopes.push_back(ctx.scopes[1]);  // top-level `set`s and macros
  inner.scopes.push_back(std::move(frame));
  inner.macro_depth = ctx.macro_depth + 1;
  inner.steps = ctx.steps;
  std::string out;
  render_body(*m.body, inner, out);
  ctx.steps = inner.steps;
  return V::string(out);
}

V call_function(const std::string& name, const Args& a, Ctx& ctx, int line) {
  (void)ctx;
  if (name == "raise_exception") {
    const V* msg = a.get(0, "message");
    throw TemplateError(msg ? msg->to_output() : "raise_exception() called by the chat template");
  }
  if (name == "range") {
    int64_t start = 0, stop = 0, step = 1;
    if (a.pos.size() == 1) {
      stop = to_index(a.pos[0], line);
    } else if (a.pos.size() >= 2) {
      start = to_index(a.pos[0], line);
      stop = to_index(a.pos[1], line);
      if (a.pos.size() >= 3) step = to_index(a.pos[2], line);
    } else {
      fail_at(line, "range() needs arguments");
    }
    if (step == 0) fail_at(line, "range() step cannot be zero");
    std::vector<V> out;
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
      if (static_cast<int64_t>(out.size()) >= kMaxRange) fail_at(line, "range() too long");
      out.push_back(V::integer(i));
    }
    return V::array(std::move(out));
  }
  if (name == "namespace" || name == "dict") {
    V obj = V::object();
    for (const V& p : a.pos) {
      if (p.is_object())
        for (const auto& [k, x] : p.fields()) obj.set(k, x);
    }
    for (const auto& [k, x] : a.kw) obj.set(k, x);
    return obj;
  }
  if (name == "strftime_now") {
    const std::string& fmt = need_string(need(a, 0, "format", "strftime_now", line), "strftime_now", line);
    std::time_t now = std::time(nullptr);
    std::tm tm{};
    localtime_r(&now, &tm);
    char buf[256];
    size_t n = std::strftime(buf, sizeof buf, fmt.c_str(), &tm);
    return V::string(std::string(buf, n));
  }
  fail_at(line, "unknown function '" + name + "'");
}

V call_method(const V& obj, const std::string& name, const Args& a, int line) {
  if (obj.is_string()) {
    const std::string& s = obj.as_string();
    auto chars = [&](size_t i) -> const std::string* {
      const V* c = a.get(i, "chars");
      return c && c->is_string() ? &c->as_string() : nullptr;
    };
    if (name == "strip") return V::string(strip_chars(s, chars(0), true, true));
    if (name == "lstrip") return V::string(strip_chars(s, chars(0), true, false));
    if (name == "rstrip") return V::string(strip_chars(s, chars(0), false, true));
    if (name == "upper") return V::string(ascii_upper(s));
    if (name == "lower") return V::string(ascii_lower(s));
    if (name == "title") return V::string(title(s));
    if (name == "capitalize") return V::string(capitalize(s));
    if (name == "startswith" || name == "endswith") {
      const V& p = need(a, 0, "prefix", name.c_str(), line);
      std::vector<V> options = p.is_array() ? p.items() : std::vector<V>{p};
      for (const V& o : options) {
        const std::string& x = need_string(o, name.c_str(), line);
        if (name == "startswith" ? starts_with(s, x) : ends_with(s, x)) return V::boolean(true);
      }
      return V::boolean(false);
    }
    if (name == "split") {
      const V* sep = a.get(0, "sep");
      const V* maxsplit = a.get(1, "maxsplit");
      int64_t limit = maxsplit && maxsplit->kind() == VK::kInt ? maxsplit->as_int() : -1;
      std::vector<V> out;
      if (!sep || sep->is_none()) {  // runs of whitespace, no empty strings
        size_t i = 0;
        while (i < s.size()) {
          while (i < s.size() && is_space(s[i])) ++i;
          if (i >= s.size()) break;
          if (limit >= 0 && static_cast<int64_t>(out.size()) == limit) {
            out.push_back(V::string(s.substr(i)));
            break;
          }
          size_t j = i;
          while (j < s.size() && !is_space(s[j])) ++j;
          out.push_back(V::string(s.substr(i, j - i)));
          i = j;
        }
      } else {
        const std::string& d = need_string(*sep, "split", line);
        if (d.empty()) fail_at(line, "split() separator is empty");
        size_t pos = 0;
        while (true) {
          size_t hit = s.find(d, pos);
          if (hit == std::string::npos || (limit >= 0 && static_cast<int64_t>(out.size()) == limit)) {
            out.push_back(V::string(s.substr(pos)));
            break;
          }
          out.push_back(V::string(s.substr(pos, hit - pos)));
          pos = hit + d.size();
        }
      }
      return V::array(std::move(out));
    }
    if (name == "replace") {
      const V* count = a.get(2, "count");
      return V::string(replace_all(s, need_string(need(a, 0, "old", "replace", line), "replace", line),
                                   need_string(need(a, 1, "new", "replace", line), "replace", line),
                                   count && count->kind() == VK::kInt ? count->as_int() : -1));
    }
    if (name == "join") {
      std::string out;
      bool first = true;
      for (const V& x : iterate(need(a, 0, "iterable", "join", line), line)) {
        out += (first ? "" : s) + x.to_output();
        first = false;
      }
      return V::string(out);
    }
    if (name == "find") return V::integer(static_cast<int64_t>(s.find(need_string(need(a, 0, "sub", "find", line), "find", line))));
  } else if (obj.is_object()) {
    if (name == "items") return apply_filter("items", obj, Args{}, line);
    if (name == "keys") {
      std::vector<V> out;
      for (const auto& [k, x] : obj.fields()) out.push_back(V::string(k));
      return V::array(std::move(out));
    }
    if (name == "values") {
      std::vector<V> out;
      for (const auto& [k, x] : obj.fields()) out.push_back(x);
      return V::array(std::move(out));
    }
    if (name == "get") {
      V found = obj.get(need_string(need(a, 0, "key", "get", line), "get", line));
      if (!found.is_undefined()) return found;
      const V* dflt = a.get(1, "default");
      return dflt ? *dflt : V::none();
    }
  } else if (obj.is_array()) {
    if (name == "append") {
      obj.push(need(a, 0, "item", "append", line));
      return V::none();
    }
    if (name == "index") {
      const V& x = need(a, 0, "item", "index", line);
      for (size_t i = 0; i < obj.items().size(); ++i)
        if (template_equal(obj.items()[i], x)) return V::integer(static_cast<int64_t>(i));
      fail_at(line, "index(): item not in list");
    }
  }
  fail_at(line, strprintf("a %s has no method '%s'", obj.type_name(), name.c_str()));
}

V arithmetic(const std::string& op, const V& l, const V& r, int line) {
  if (op == "+") {
    if (l.is_string() && r.is_string()) return V::string(l.as_string() + r.as_string());
    if (l.is_array() && r.is_array()) {
      std::vector<V> out = l.items();
      out.insert(out.end(), r.items().begin(), r.items().end());
      return V::array(std::move(out));
    }
  }
  if (op == "*" && l.is_string() && r.kind() == VK::kInt) {
    std::string out;
    for (int64_t i = 0; i < r.as_int() && out.size() < kMaxOutput; ++i) out += l.as_string();
    return V::string(out);
  }
  auto numeric = [](const V& v) { return v.is_number() || v.kind() == VK::kBool; };
  if (!numeric(l) || !numeric(r)) {
    if (l.is_undefined() || r.is_undefined())
      fail_at(line, strprintf("'%s' on an undefined value", op.c_str()));
    fail_at(line, strprintf("unsupported operand types for %s: %s and %s", op.c_str(), l.type_name(), r.type_name()));
  }
  auto as_int = [](const V& v) { return v.kind() == VK::kBool ? static_cast<int64_t>(v.as_bool()) : v.as_int(); };
  auto as_dbl = [](const V& v) { return v.kind() == VK::kBool ? static_cast<double>(v.as_bool()) : v.as_double(); };
  bool ints = l.kind() != VK::kFloat && r.kind() != VK::kFloat;
  if (op == "/") {
    if (as_dbl(r) == 0.0) fail_at(line, "division by zero");
    return V::number(as_dbl(l) / as_dbl(r));
  }
  if (op == "//" || op == "%") {
    if (as_dbl(r) == 0.0) fail_at(line, "division by zero");
    if (ints) {
      int64_t a = as_int(l), b = as_int(r);
      int64_t q = a / b, m = a % b;
      if (m != 0 && ((m < 0) != (b < 0))) {  // Python floors
        q -= 1;
        m += b;
      }
      return V::integer(op == "//" ? q : m);
    }
    double a = as_dbl(l), b = as_dbl(r);
    double q = std::floor(a / b);
    return op == "//" ? V::number(q) : V::number(a - q * b);
  }
  if (op == "**") {
    if (ints && as_int(r) >= 0) {
      int64_t out = 1;
      for (int64_t i = 0; i < as_int(r) && i < 64; ++i) out *= as_int(l);
      return V::integer(out);
    }
    return V::number(std::pow(as_dbl(l), as_dbl(r)));
  }
  if (ints) {
    if (op == "+") return V::integer(as_int(l) + as_int(r));
    if (op == "-") return V::integer(as_int(l) - as_int(r));
    if (op == "*") return V::integer(as_int(l) * as_int(r));
  } else {
    if (op == "+") return V::number(as_dbl(l) + as_dbl(r));
    if (op == "-") return V::number(as_dbl(l) - as_dbl(r));
    if (op == "*") return V::number(as_dbl(l) * as_dbl(r));
  }
  fail_at(line, "unsupported operator " + op);
}

V eval(const Expr& e, Ctx& ctx) {
  switch (e.kind) {
    case Expr::kLiteral: return e.literal;
    case Expr::kVar: return ctx.lookup(e.name);
    case Expr::kAttr: {
      V obj = eval(*e.args[0], ctx);
      if (obj.is_object()) return obj.get(e.name);
      return {};
    }
    case Expr::kItem: return get_item(eval(*e.args[0], ctx), eval(*e.args[1], ctx), e.line);
    case Expr::kSlice: {
      V obj = eval(*e.args[0], ctx);
      V parts[3];
      const V* p[3] = {nullptr, nullptr, nullptr};
      for (int i = 0; i < 3; ++i) {
        if (e.args[static_cast<size_t>(i) + 1]) {
          parts[i] = eval(*e.args[static_cast<size_t>(i) + 1], ctx);
          p[i] = &parts[i];
        }
      }
      return slice(obj, p[0], p[1], p[2], e.line);
    }
    case Expr::kCall: {
      const Expr& callee = *e.args[0];
      Args a = eval_args(e, 1, ctx);
      if (callee.kind == Expr::kAttr) {
        V obj = eval(*callee.args[0], ctx);
        V member = obj.is_object() ? obj.get(callee.name) : V();
        if (member.kind() == VK::kMacro) return call_macro(*member.macro_def(), a, ctx, e.line);
        if (member.kind() == VK::kFunction) return call_function(member.as_string(), a, ctx, e.line);
        return call_method(obj, callee.name, a, e.line);
      }
      V f = eval(callee, ctx);
      if (f.kind() == VK::kMacro) return call_macro(*f.macro_def(), a, ctx, e.line);
      if (f.kind() == VK::kFunction) return call_function(f.as_string(), a, ctx, e.line);
      if (callee.kind == Expr::kVar) fail_at(e.line, "unknown function '" + callee.name + "'");
      fail_at(e.line, strprintf("a %s is not callable", f.type_name()));
    }
    case Expr::kFilter: return apply_filter(e.name, eval(*e.args[0], ctx), eval_args(e, 1, ctx), e.line);
    case Expr::kTest: {
      bool r = apply_test(e.name, eval(*e.args[0], ctx), eval_args(e, 1, ctx), e.line);
      return V::boolean(e.negated ? !r : r);
    }
    case Expr::kNot: return V::boolean(!eval(*e.args[0], ctx).truthy());
    case Expr::kNeg:
    case Expr::kPos: {
      V v = eval(*e.args[0], ctx);
      if (e.kind == Expr::kPos) return v;
      if (v.kind() == VK::kInt) return V::integer(-v.as_int());
      if (v.kind() == VK::kFloat) return V::number(-v.as_double());
      fail_at(e.line, strprintf("cannot negate a %s", v.type_name()));
    }
    case Expr::kAnd: {
      V l = eval(*e.args[0], ctx);
      return l.truthy() ? eval(*e.args[1], ctx) : l;
    }
    case Expr::kOr: {
      V l = eval(*e.args[0], ctx);
      return l.truthy() ? l : eval(*e.args[1], ctx);
    }
    case Expr::kCond: {
      if (eval(*e.args[1], ctx).truthy()) return eval(*e.args[0], ctx);
      return e.args[2] ? eval(*e.args[2], ctx) : V();
    }
    case Expr::kBinary: {
      V l = eval(*e.args[0], ctx);
      V r = eval(*e.args[1], ctx);
      const std::string& op = e.name;
      if (op == "==") return V::boolean(template_equal(l, r));
      if (op == "!=") return V::boolean(!template_equal(l, r));
      if (op == "<") return V::boolean(compare_values(l, r, e.line) < 0);
      if (op == "<=") return V::boolean(compare_values(l, r, e.line) <= 0);
      if (op == ">") return V::boolean(compare_values(l, r, e.line) > 0);
      if (op == ">=") return V::boolean(compare_values(l, r, e.line) >= 0);
      if (op == "in") return V::boolean(contains(r, l, e.line));
      if (op == "not in") return V::boolean(!contains(r, l, e.line));
      if (op == "~") return V::string(l.to_output() + r.to_output());
      return arithmetic(op, l, r, e.line);
    }
    case Expr::kList:
    case Expr::kTuple: {
      std::vector<V> items;
      for (const auto& x : e.args) items.push_back(eval(*x, ctx));
      return V::array(std::move(items));
    }
    case Expr::kDict: {
      V obj = V::object();
      for (size_t i = 0; i + 1 < e.args.size(); i += 2) obj.set(eval(*e.args[i], ctx).to_output(), eval(*e.args[i + 1], ctx));
      return obj;
    }
  }
  fail_at(e.line, "bad expression");
}

// ============================================================================
// Statements
// ============================================================================
struct TextNode : Node {
  std::string text;
  void render(Ctx&, std::string& out) const override { out += text; }
};

struct OutputNode : Node {
  ExprPtr expr;
  void render(Ctx& ctx, std::string& out) const override {
    out += eval(*expr, ctx).to_output();
    if (out.size() > kMaxOutput) fail_at(line, "chat template output too large");
  }
};

struct IfNode : Node {
  std::vector<std::pair<ExprPtr, Body>> branches;  // else: nullptr condition
  void render(Ctx& ctx, std::string& out) const override {
    for (const auto& [cond, body] : branches) {
      if (!cond || eval(*cond, ctx).truthy()) {
        render_body(body, ctx, out);
        return;
      }
    }
  }
};

void bind_targets(Ctx& ctx, const std::vector<std::string>& targets, const V& item, int line) {
  if (targets.size() == 1) {
    ctx.set(targets[0], item);
    return;
  }
  if (!item.is_array() || item.items().size() != targets.size())
    fail_at(line, strprintf("cannot unpack a %s into %zu names", item.type_name(), targets.size()));
  for (size_t i = 0; i < targets.size(); ++i) ctx.set(targets[i], item.items()[i]);
}

struct ForNode : Node {
  std::vector<std::string> targets;
  ExprPtr iterable;
  ExprPtr filter;  // optional `if` clause
  Body body, else_body;
  void render(Ctx& ctx, std::string& out) const override {
    std::vector<V> items = iterate(eval(*iterable, ctx), line);
    if (filter) {
      std::vector<V> kept;
      for (const V& item : items) {
        ctx.scopes.emplace_back();
        bind_targets(ctx, targets, item, line);
        bool ok = eval(*filter, ctx).truthy();
        ctx.scopes.pop_back();
        if (ok) kept.push_back(item);
      }
      items.swap(kept);
    }
    if (items.empty()) {
      render_body(else_body, ctx, out);
      return;
    }
    const int64_t n = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < n; ++i) {
      ctx.step(line);
      ctx.scopes.emplace_back();
      bind_targets(ctx, targets, items[static_cast<size_t>(i)], line);
      V loop = V::object();
      loop.set("index", V::integer(i + 1));
      loop.set("index0", V::integer(i));
      loop.set("revindex", V::integer(n - i));
      loop.set("revindex0", V::integer(n - i - 1));
      loop.set("first", V::boolean(i == 0));
      loop.set("last", V::boolean(i == n - 1));
      loop.set("length", V::integer(n));
      loop.set("previtem", i > 0 ? items[static_cast<size_t>(i - 1)] : V());
      loop.set("nextitem", i + 1 < n ? items[static_cast<size_t>(i + 1)] : V());
      ctx.set("loop", loop);
      render_body(body, ctx, out);
      ctx.scopes.pop_back();
      if (ctx.flow == Ctx::Flow::kBreak) {
        ctx.flow = Ctx::Flow::kNormal;
        break;
      }
      ctx.flow = Ctx::Flow::kNormal;
    }
  }
};

struct SetNode : Node {
  std::vector<std::string> targets;
  std::string attr;  // `set ns.attr = ...`
  ExprPtr value;     // null: block set
  Body body;
  void render(Ctx& ctx, std::string&) const override {
    V v;
    if (value) {
      v = eval(*value, ctx);
    } else {
      std::string captured;
      render_body(body, ctx, captured);
      v = V::string(captured);
    }
    if (!attr.empty()) {
      V ns = ctx.lookup(targets[0]);
      if (!ns.is_object()) fail_at(line, strprintf("cannot set attribute '%s' on a %s (use namespace())", attr.c_str(), ns.type_name()));
      ns.set(attr, v);
      return;
    }
    bind_targets(ctx, targets, v, line);
  }
};

struct MacroNode : Node {
  std::shared_ptr<TemplateMacro> macro;
  std::vector<ExprPtr> defaults;
  Body body;
  void render(Ctx& ctx, std::string&) const override { ctx.set(macro->name, V::macro(macro)); }
};

struct FlowNode : Node {
  Ctx::Flow flow;
  void render(Ctx& ctx, std::string&) const override { ctx.flow = flow; }
};

struct BlockNode : Node {  // {% generation %}: renders its body unchanged
  Body body;
  void render(Ctx& ctx, std::string& out) const override { render_body(body, ctx, out); }
};

void Ctx::fail_at_line(int line) { fail_at(line, "chat template runs too long"); }

void render_body(const Body& body, Ctx& ctx, std::string& out) {
  for (const auto& node : body) {
    ctx.step(node->line);
    node->render(ctx, out);
    if (ctx.flow != Ctx::Flow::kNormal) return;
  }
}

class TemplateParser {
 public:
  TemplateParser(std::vector<Segment> segs, const std::string& origin) : segs_(std::move(segs)), origin_(origin) {}

  Body parse() {
    std::string ended;
    Body body = parse_body({}, &ended);
    return body;
  }

 private:
  [[noreturn]] void fail(int line, const std::string& msg) const {
    throw_error(strprintf("%s: line %d: %s", origin_.c_str(), line, msg.c_str()));
  }

  // Parses until one of `enders` (left unconsumed at i_) or the end of input.
  Body parse_body(const std::set<std::string>& enders, std::string* ended_by) {
    Body body;
    while (i_ < segs_.size()) {
      const Segment& seg = segs_[i_];
      if (seg.kind == SegKind::kText) {
        auto n = std::make_unique<TextNode>();
        n->text = seg.text;
        n->line = seg.line;
        body.push_back(std::move(n));
        ++i_;
        continue;
      }
      if (seg.kind == SegKind::kExpr) {
        ExprParser p(seg.toks, 0, origin_, seg.line);
        auto n = std::make_unique<OutputNode>();
        n->expr = p.expression();
        p.expect_end();
        n->line = seg.line;
        body.push_back(std::move(n));
        ++i_;
        continue;
      }
      const Tok& kw = seg.toks[0];
      if (kw.kind != TokKind::kName) fail(seg.line, "expected a statement keyword, got '" + kw.text + "'");
      if (enders.count(kw.text)) {
        *ended_by = kw.text;
        return body;
      }
      ++i_;
      body.push_back(statement(seg));
    }
    if (!enders.empty()) {
      std::string list;
      for (const auto& e : enders) list += (list.empty() ? "" : " or ") + ("{% " + e + " %}");
      fail(segs_.empty() ? 1 : segs_.back().line, "unexpected end of template: expected " + list);
    }
    return body;
  }

  // Consumes the ender segment, checking it has no extra tokens.
  void end_tag(const char* name) {
    const Segment& seg = segs_[i_];
    if (seg.toks.size() != 1) fail(seg.line, strprintf("unexpected tokens after '%s'", name));
    ++i_;
  }

  std::unique_ptr<Node> statement(const Segment& seg) {
    const std::string& kw = seg.toks[0].text;
    ExprParser p(seg.toks, 1, origin_, seg.line);
    if (kw == "if") {
      auto n = std::make_unique<IfNode>();
      n->line = seg.line;
      ExprPtr cond = p.expression();
      p.expect_end();
      while (true) {
        std::string ended;
        Body b = parse_body({"elif", "else", "endif"}, &ended);
        n->branches.emplace_back(std::move(cond), std::move(b));
        const Segment& end = segs_[i_];
        if (ended == "endif") {
          end_tag("endif");
          return n;
        }
        ++i_;
        if (ended == "else") {
          if (end.toks.size() != 1) fail(end.line, "unexpected tokens after 'else'");
          Body eb = parse_body({"endif"}, &ended);
          n->branches.emplace_back(nullptr, std::move(eb));
          end_tag("endif");
          return n;
        }
        ExprParser ep(end.toks, 1, origin_, end.line);
        cond = ep.expression();
        ep.expect_end();
      }
    }
    if (kw == "for") {
      auto n = std::make_unique<ForNode>();
      n->line = seg.line;
      n->targets.push_back(p.expect_identifier("a loop variable"));
      while (p.accept_op(",")) n->targets.push_back(p.expect_identifier("a loop variable"));
      if (!p.accept_name("in")) p.fail("expected 'in' in for loop");
      n->iterable = p.or_expression();
      if (p.accept_name("if")) n->filter = p.expression();
      if (p.accept_name("recursive")) p.fail("recursive for loops are not supported");
      p.expect_end();
      std::string ended;
      n->body = parse_body({"else", "endfor"}, &ended);
      if (ended == "else") {
        end_tag("else");
        n->else_body = parse_body({"endfor"}, &ended);
      }
      end_tag("endfor");
      return n;
    }
    if (kw == "set") {
      auto n = std::make_unique<SetNode>();
      n->line = seg.line;
      n->targets.push_back(p.expect_identifier("a variable name"));
      if (p.accept_op(".")) {
        n->attr = p.expect_identifier("an attribute name");
      } else {
        while (p.accept_op(",")) n->targets.push_back(p.expect_identifier("a variable name"));
      }
      if (p.accept_op("=")) {
        n->value = p.expression();
        // `set a, b = x, y`: a tuple without parentheses.
        if (p.is_op(",")) {
          auto tup = std::make_unique<Expr>();
          tup->kind = Expr::kTuple;
          tup->line = seg.line;
          tup->args.push_back(std::move(n->value));
          while (p.accept_op(",")) tup->args.push_back(p.expression());
          n->value = std::move(tup);
        }
        p.expect_end();
        return n;
      }
      p.expect_end();
      if (!n->attr.empty() || n->targets.size() != 1) p.fail("a block set takes one variable name");
      std::string ended;
      n->body = parse_body({"endset"}, &ended);
      end_tag("endset");
      return n;
    }
    if (kw == "macro") {
      auto n = std::make_unique<MacroNode>();
      n->line = seg.line;
      n->macro = std::make_shared<TemplateMacro>();
      n->macro->name = p.expect_identifier("a macro name");
      p.expect_op("(");
      while (!p.is_op(")")) {
        n->macro->params.push_back(p.expect_identifier("a parameter name"));
        if (p.accept_op("=")) n->defaults.push_back(p.expression());
        else n->defaults.push_back(nullptr);
        if (!p.accept_op(",")) break;
      }
      p.expect_op(")");
      p.expect_end();
      std::string ended;
      n->body = parse_body({"endmacro"}, &ended);
      end_tag("endmacro");
      for (const auto& d : n->defaults) n->macro->defaults.push_back(d.get());
      n->macro->body = &n->body;
      return n;
    }
    if (kw == "break" || kw == "continue") {
      p.expect_end();
      auto n = std::make_unique<FlowNode>();
      n->line = seg.line;
      n->flow = kw == "break" ? Ctx::Flow::kBreak : Ctx::Flow::kContinue;
      return n;
    }
    if (kw == "generation") {
      p.expect_end();
      auto n = std::make_unique<BlockNode>();
      n->line = seg.line;
      std::string ended;
      n->body = parse_body({"endgeneration"}, &ended);
      end_tag("endgeneration");
      return n;
    }
    static const std::set<std::string> kEnders = {"endif", "endfor", "endset", "endmacro", "elif", "else", "endgeneration"};
    if (kEnders.count(kw)) fail(seg.line, "unexpected '{% " + kw + " %}'");
    fail(seg.line, "unsupported statement '{% " + kw + " %}'");
  }

  std::vector<Segment> segs_;
  const std::string& origin_;
  size_t i_ = 0;
};

}  // namespace jinja

struct ChatTemplate::Impl {
  std::string source;
  jinja::Body body;
};

ChatTemplate ChatTemplate::parse(const std::string& source, const std::string& origin) {
  auto impl = std::make_shared<Impl>();
  impl->source = source;
  jinja::TemplateLexer lexer(impl->source, origin);
  jinja::TemplateParser parser(lexer.run(), origin);
  impl->body = parser.parse();
  ChatTemplate t;
  t.impl_ = std::move(impl);
  return t;
}

std::string ChatTemplate::render(const TemplateValue& variables) const {
  jinja::Ctx ctx;
  ctx.scopes.emplace_back();
  auto& globals = ctx.scopes.back();
  for (const char* f : {"raise_exception", "range", "namespace", "dict", "strftime_now"}) globals[f] = V::function(f);
  if (variables.is_object())
    for (const auto& [k, v] : variables.fields()) globals[k] = v;
  ctx.scopes.emplace_back();  // the template's own top-level variables
  std::string out;
  jinja::render_body(impl_->body, ctx, out);
  return out;
}

const std::string& ChatTemplate::source() const { return impl_->source; }

}  // namespace distllm::serve
