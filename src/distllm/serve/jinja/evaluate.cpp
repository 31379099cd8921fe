// Expression evaluation.
#include <cmath>

#include "distllm/base/strings.h"
#include "distllm/serve/jinja/builtins.h"
#include "distllm/serve/jinja/chat_template.h"
#include "distllm/serve/jinja/value_ops.h"

namespace distllm::serve::jinja {

using V = TemplateValue;
using VK = TemplateValue::Kind;

void fail_at(int line, const std::string& msg) {
  throw TemplateError(strprintf("chat template line %d: %s", line, msg.c_str()));
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
}  // namespace distllm::serve::jinja
