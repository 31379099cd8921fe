// What templates can call: filters, tests, global functions, methods of strings,
// lists and dicts, macros, and the arithmetic operators — and the names of the
// filters and tests, which the parser checks so that an unknown one fails at parse
// time, not mid-render.
#pragma once

#include <set>
#include <string>
#include <utility>
#include <vector>

#include "distllm/serve/jinja/ast.h"
#include "distllm/serve/jinja/context.h"

namespace distllm::serve::jinja {

extern const std::set<std::string> kFilters;
extern const std::set<std::string> kTests;

struct Args {
  std::vector<V> pos;
  std::vector<std::pair<std::string, V>> kw;
  const V* get(size_t i, const char* name) const {
    if (i < pos.size()) return &pos[i];
    return keyword(name);
  }
  const V* keyword(const char* name) const {
    for (const auto& [k, v] : kw)
      if (k == name) return &v;
    return nullptr;
  }
};

Args eval_args(const Expr& e, size_t first, Ctx& ctx);
bool apply_test(const std::string& name, const V& v, const Args& a, int line);
V apply_filter(const std::string& name, const V& v, const Args& a, int line);
V call_macro(const TemplateMacro& m, const Args& a, Ctx& ctx, int line);
V call_function(const std::string& name, const Args& a, Ctx& ctx, int line);
V call_method(const V& obj, const std::string& name, const Args& a, int line);
V arithmetic(const std::string& op, const V& l, const V& r, int line);

}  // namespace distllm::serve::jinja
