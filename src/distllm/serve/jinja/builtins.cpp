#include "distllm/serve/jinja/builtins.h"

#include <algorithm>
#include <cmath>
#include <ctime>
#include <functional>
#include <unordered_map>

#include "distllm/base/strings.h"
#include "distllm/serve/jinja/chat_template.h"
#include "distllm/serve/jinja/lexer.h"
#include "distllm/serve/jinja/value_ops.h"

namespace distllm::serve::jinja {

using V = TemplateValue;
using VK = TemplateValue::Kind;

const std::set<std::string> kFilters = {
    "trim", "upper", "lower", "capitalize", "title", "length", "count", "first", "last", "join", "default", "d",
    "tojson", "string", "int", "float", "list", "items", "replace", "safe", "abs", "map", "select", "reject",
    "selectattr", "rejectattr", "unique", "sort", "indent", "reverse", "dictsort"};
const std::set<std::string> kTests = {
    "defined", "undefined", "none", "string", "number", "integer", "float", "boolean", "mapping", "iterable",
    "sequence", "callable", "equalto", "eq", "==", "ne", "!=", "odd", "even", "true", "false", "in", "sameas",
    "divisibleby", "lt", "gt", "le", "ge"};

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
    JsonStyle style;
    if (const V* indent = a.get(0, "indent"); indent && indent->kind() == VK::kInt) style.indent = static_cast<int>(indent->as_int());
    if (const V* sort = a.keyword("sort_keys")) style.sort_keys = sort->truthy();
    if (const V* seps = a.keyword("separators"); seps && !seps->is_none()) {
      if (!seps->is_array() || seps->items().size() != 2)
        fail_at(line, "tojson separators must be a pair (item separator, key separator)");
      style.item_separator = need_string(seps->items()[0], "tojson separators", line);
      style.key_separator = need_string(seps->items()[1], "tojson separators", line);
      if (style.item_separator.empty() || style.key_separator.empty())
        fail_at(line, "tojson separators must not be empty");
    }
    return V::string(v.to_json(style));
  }
  if (name == "indent") {  // Jinja2's indent(width=4, first=False, blank=False)
    const V* width = a.get(0, "width");
    const V* first = a.get(1, "first");
    const V* blank = a.get(2, "blank");
    const std::string pad = width && width->is_string() ? width->as_string()
                                                        : std::string(width ? static_cast<size_t>(std::max<int64_t>(0, to_index(*width, line))) : 4, ' ');
    std::string out;
    const std::vector<std::string> lines = split(v.to_output(), '\n');
    for (size_t i = 0; i < lines.size(); ++i) {
      if (i) out += '\n';
      const bool skip = i == 0 ? !(first && first->truthy()) : lines[i].empty() && !(blank && blank->truthy());
      if (!skip) out += pad;
      out += lines[i];
    }
    return V::string(out);
  }
  if (name == "reverse") {
    std::vector<V> items = iterate(v, line);
    std::reverse(items.begin(), items.end());
    if (!v.is_string()) return V::array(std::move(items));
    std::string out;
    for (const V& c : items) out += c.as_string();
    return V::string(out);
  }
  if (name == "dictsort") {  // Jinja2's dictsort(case_sensitive=False, by='key', reverse=False)
    if (!v.is_object()) fail_at(line, strprintf("dictsort of a %s", v.type_name()));
    const V* case_sensitive = a.get(0, "case_sensitive");
    const V* by = a.get(1, "by");
    const V* reverse = a.get(2, "reverse");
    const bool by_value = by && by->is_string() && by->as_string() == "value";
    if (by && !(by->is_string() && (by->as_string() == "key" || by->as_string() == "value")))
      fail_at(line, "dictsort: 'by' must be 'key' or 'value'");
    std::vector<V> pairs;
    for (const auto& [k, x] : v.fields()) pairs.push_back(V::array({V::string(k), x}));
    auto key = [&](const V& pair) {
      V k = pair.items()[by_value ? 1 : 0];
      return k.is_string() && !(case_sensitive && case_sensitive->truthy()) ? V::string(ascii_lower(k.as_string())) : k;
    };
    std::stable_sort(pairs.begin(), pairs.end(), [&](const V& x, const V& y) { return compare_values(key(x), key(y), line) < 0; });
    if (reverse && reverse->truthy()) std::reverse(pairs.begin(), pairs.end());
    return V::array(std::move(pairs));
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
  inner.clock = ctx.clock;
  inner.steps = ctx.steps;
  std::string out;
  render_body(*m.body, inner, out);
  ctx.steps = inner.steps;
  return V::string(out);
}

V call_function(const std::string& name, const Args& a, Ctx& ctx, int line) {
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
    std::tm tm{};
    if (ctx.clock) {
      tm = (*ctx.clock)();
    } else {
      std::time_t now = std::time(nullptr);
      localtime_r(&now, &tm);
    }
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

}  // namespace distllm::serve::jinja
