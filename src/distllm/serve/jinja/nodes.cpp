#include "distllm/serve/jinja/nodes.h"

#include "distllm/base/strings.h"
#include "distllm/serve/jinja/value_ops.h"

namespace distllm::serve::jinja {

using V = TemplateValue;
using VK = TemplateValue::Kind;

void bind_targets(Ctx& ctx, const std::vector<std::string>& targets, const V& item, int line) {
  if (targets.size() == 1) {
    ctx.set(targets[0], item);
    return;
  }
  if (!item.is_array() || item.items().size() != targets.size())
    fail_at(line, strprintf("cannot unpack a %s into %zu names", item.type_name(), targets.size()));
  for (size_t i = 0; i < targets.size(); ++i) ctx.set(targets[i], item.items()[i]);
}

void TextNode::render(Ctx&, std::string& out) const {
  out += text;
}

void OutputNode::render(Ctx& ctx, std::string& out) const {
  out += eval(*expr, ctx).to_output();
  if (out.size() > kMaxOutput) fail_at(line, "chat template output too large");
}

void IfNode::render(Ctx& ctx, std::string& out) const {
  for (const auto& [cond, body] : branches) {
    if (!cond || eval(*cond, ctx).truthy()) {
      render_body(body, ctx, out);
      return;
    }
  }
}

void ForNode::render(Ctx& ctx, std::string& out) const {
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

void SetNode::render(Ctx& ctx, std::string&) const {
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

void MacroNode::render(Ctx& ctx, std::string&) const {
  ctx.set(macro->name, V::macro(macro));
}

void FlowNode::render(Ctx& ctx, std::string&) const {
  ctx.flow = flow;
}

void BlockNode::render(Ctx& ctx, std::string& out) const {
  render_body(body, ctx, out);
}

void Ctx::fail_at_line(int line) { fail_at(line, "chat template runs too long"); }

void render_body(const Body& body, Ctx& ctx, std::string& out) {
  for (const auto& node : body) {
    ctx.step(node->line);
    node->render(ctx, out);
    if (ctx.flow != Ctx::Flow::kNormal) return;
  }
}
}  // namespace distllm::serve::jinja
