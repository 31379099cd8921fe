// Recursive-descent parser of Jinja2 expressions over one tag's tokens, with
// Python's precedence: conditional < or < and < not < comparisons/tests < + - <
// ~ < * / // % < ** < unary < filters < postfix (attribute, item, call).
#pragma once

#include <string>
#include <vector>

#include "distllm/base/error.h"
#include "distllm/base/strings.h"
#include "distllm/serve/jinja/ast.h"
#include "distllm/serve/jinja/lexer.h"

namespace distllm::serve::jinja {

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
  ExprPtr make(Expr::Kind k);
  ExprPtr binary(const std::string& op, ExprPtr l, ExprPtr r, Expr::Kind k = Expr::kBinary);
  ExprPtr conditional();
  ExprPtr or_expr();
  ExprPtr and_expr();
  ExprPtr not_expr();
  ExprPtr compare();
  ExprPtr math1();
  ExprPtr concat();
  ExprPtr math2();
  ExprPtr power();
  ExprPtr unary(bool with_filter);
  ExprPtr primary();
  void call_args(Expr& e);
  ExprPtr postfix(ExprPtr e);
  ExprPtr filters(ExprPtr e);

  const std::vector<Tok>& t_;
  size_t i_;
  const std::string& origin_;
  int line_;
};

}  // namespace distllm::serve::jinja
