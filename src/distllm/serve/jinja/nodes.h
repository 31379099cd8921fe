// Statement nodes: text, {{ output }}, if, for, set, macro, break/continue and
// generation blocks. Each renders itself into the output string.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "distllm/serve/jinja/ast.h"
#include "distllm/serve/jinja/context.h"

namespace distllm::serve::jinja {

struct TextNode : Node {
  std::string text;
  void render(Ctx&, std::string& out) const override;
};

struct OutputNode : Node {
  ExprPtr expr;
  void render(Ctx& ctx, std::string& out) const override;
};

struct IfNode : Node {
  std::vector<std::pair<ExprPtr, Body>> branches;  // else: nullptr condition
  void render(Ctx& ctx, std::string& out) const override;
};

struct ForNode : Node {
  std::vector<std::string> targets;
  ExprPtr iterable;
  ExprPtr filter;  // optional `if` clause
  Body body, else_body;
  void render(Ctx& ctx, std::string& out) const override;
};

struct SetNode : Node {
  std::vector<std::string> targets;
  std::string attr;  // `set ns.attr = ...`
  ExprPtr value;     // null: block set
  Body body;
  void render(Ctx& ctx, std::string&) const override;
};

struct MacroNode : Node {
  std::shared_ptr<TemplateMacro> macro;
  std::vector<ExprPtr> defaults;
  Body body;
  void render(Ctx& ctx, std::string&) const override;
};

struct FlowNode : Node {
  Ctx::Flow flow;
  void render(Ctx& ctx, std::string&) const override;
};

struct BlockNode : Node {  // {% generation %}: renders its body unchanged
  Body body;
  void render(Ctx& ctx, std::string& out) const override;
};

}  // namespace distllm::serve::jinja
