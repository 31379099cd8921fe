// The syntax tree of a template: expressions, and statement nodes that render
// themselves (nodes.h).
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "distllm/serve/jinja/template_value.h"

namespace distllm::serve::jinja {

using V = TemplateValue;

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

}  // namespace distllm::serve::jinja

// Defined at namespace scope because template_value.h forward-declares it.
struct distllm::serve::TemplateMacro {
  std::string name;
  std::vector<std::string> params;
  std::vector<const jinja::Expr*> defaults;  // nullptr: required
  const jinja::Body* body = nullptr;
};
