#include "distllm/serve/jinja/expr_parser.h"

#include "distllm/serve/jinja/builtins.h"

namespace distllm::serve::jinja {

using V = TemplateValue;
using VK = TemplateValue::Kind;

ExprPtr ExprParser::make(Expr::Kind k) {
  auto e = std::make_unique<Expr>();
  e->kind = k;
  e->line = i_ < t_.size() ? t_[i_].line : line_;
  return e;
}

ExprPtr ExprParser::binary(const std::string& op, ExprPtr l, ExprPtr r, Expr::Kind k) {
  auto e = make(k);
  e->name = op;
  e->args.push_back(std::move(l));
  e->args.push_back(std::move(r));
  return e;
}

ExprPtr ExprParser::conditional() {
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

ExprPtr ExprParser::or_expr() {
  ExprPtr l = and_expr();
  while (accept_name("or")) l = binary("or", std::move(l), and_expr(), Expr::kOr);
  return l;
}

ExprPtr ExprParser::and_expr() {
  ExprPtr l = not_expr();
  while (accept_name("and")) l = binary("and", std::move(l), not_expr(), Expr::kAnd);
  return l;
}

ExprPtr ExprParser::not_expr() {
  if (accept_name("not")) {
    auto e = make(Expr::kNot);
    e->args.push_back(not_expr());
    return e;
  }
  return compare();
}

ExprPtr ExprParser::compare() {
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

ExprPtr ExprParser::math1() {
  ExprPtr l = concat();
  while (true) {
    if (accept_op("+")) l = binary("+", std::move(l), concat());
    else if (accept_op("-")) l = binary("-", std::move(l), concat());
    else return l;
  }
}

ExprPtr ExprParser::concat() {
  ExprPtr l = math2();
  while (accept_op("~")) l = binary("~", std::move(l), math2());
  return l;
}

ExprPtr ExprParser::math2() {
  ExprPtr l = power();
  while (true) {
    if (accept_op("*")) l = binary("*", std::move(l), power());
    else if (accept_op("//")) l = binary("//", std::move(l), power());
    else if (accept_op("/")) l = binary("/", std::move(l), power());
    else if (accept_op("%")) l = binary("%", std::move(l), power());
    else return l;
  }
}

ExprPtr ExprParser::power() {
  ExprPtr l = unary(true);
  while (accept_op("**")) l = binary("**", std::move(l), unary(true));
  return l;
}

ExprPtr ExprParser::unary(bool with_filter) {
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

ExprPtr ExprParser::primary() {
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

void ExprParser::call_args(Expr& e) {
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

ExprPtr ExprParser::postfix(ExprPtr e) {
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

ExprPtr ExprParser::filters(ExprPtr e) {
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

}  // namespace distllm::serve::jinja
