#include "distllm/serve/jinja/template_value.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "distllm/base/error.h"

namespace distllm::serve {
namespace {

// Python's repr(float): shortest round-trip digits, always with a '.' or exponent.
std::string float_repr(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  for (int p = 1; p <= 17; ++p) {
    std::snprintf(buf, sizeof buf, "%.*g", p, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  std::string s = buf;
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}

std::string py_repr_string(const std::string& s) {
  char q = (s.find('\'') != std::string::npos && s.find('"') == std::string::npos) ? '"' : '\'';
  std::string out(1, q);
  for (char c : s) {
    if (c == q || c == '\\') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\r') {
      out += "\\r";
    } else {
      out += c;
    }
  }
  out += q;
  return out;
}

std::string repr(const TemplateValue& v) {
  if (v.is_string()) return py_repr_string(v.as_string());
  return v.to_output();
}

void json_string(std::string& out, const std::string& s) {
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
}

void json_write(std::string& out, const TemplateValue& v, const JsonStyle& style, int depth) {
  const int indent = style.indent;
  const std::string& item_sep = !style.item_separator.empty() ? style.item_separator : indent >= 0 ? "," : ", ";
  const std::string& key_sep = !style.key_separator.empty() ? style.key_separator : ": ";
  auto newline = [&](int d) {
    out += '\n';
    out.append(static_cast<size_t>(indent * d), ' ');
  };
  switch (v.kind()) {
    case TemplateValue::Kind::kUndefined:
    case TemplateValue::Kind::kNone:
    case TemplateValue::Kind::kFunction:
    case TemplateValue::Kind::kMacro: out += "null"; return;
    case TemplateValue::Kind::kBool: out += v.as_bool() ? "true" : "false"; return;
    case TemplateValue::Kind::kInt: out += std::to_string(v.as_int()); return;
    case TemplateValue::Kind::kFloat: {
      double f = v.as_double();
      out += std::isnan(f) ? "NaN" : std::isinf(f) ? (f > 0 ? "Infinity" : "-Infinity") : float_repr(f);
      return;
    }
    case TemplateValue::Kind::kString: json_string(out, v.as_string()); return;
    case TemplateValue::Kind::kArray: {
      const auto& items = v.items();
      if (items.empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += item_sep;
        if (indent >= 0) newline(depth + 1);
        json_write(out, items[i], style, depth + 1);
      }
      if (indent >= 0) newline(depth);
      out += ']';
      return;
    }
    case TemplateValue::Kind::kObject: {
      std::vector<const std::pair<std::string, TemplateValue>*> fields;
      for (const auto& f : v.fields()) fields.push_back(&f);
      if (fields.empty()) {
        out += "{}";
        return;
      }
      if (style.sort_keys)
        std::stable_sort(fields.begin(), fields.end(), [](const auto* a, const auto* b) { return a->first < b->first; });
      out += '{';
      for (size_t i = 0; i < fields.size(); ++i) {
        if (i) out += item_sep;
        if (indent >= 0) newline(depth + 1);
        json_string(out, fields[i]->first);
        out += key_sep;
        json_write(out, fields[i]->second, style, depth + 1);
      }
      if (indent >= 0) newline(depth);
      out += '}';
      return;
    }
  }
}

}  // namespace

TemplateValue TemplateValue::none() {
  TemplateValue v;
  v.kind_ = Kind::kNone;
  return v;
}
TemplateValue TemplateValue::boolean(bool b) {
  TemplateValue v;
  v.kind_ = Kind::kBool;
  v.b_ = b;
  return v;
}
TemplateValue TemplateValue::integer(int64_t i) {
  TemplateValue v;
  v.kind_ = Kind::kInt;
  v.i_ = i;
  return v;
}
TemplateValue TemplateValue::number(double f) {
  TemplateValue v;
  v.kind_ = Kind::kFloat;
  v.f_ = f;
  return v;
}
TemplateValue TemplateValue::string(std::string s) {
  TemplateValue v;
  v.kind_ = Kind::kString;
  v.s_ = std::move(s);
  return v;
}
TemplateValue TemplateValue::array(Array items) {
  TemplateValue v;
  v.kind_ = Kind::kArray;
  v.arr_ = std::make_shared<Array>(std::move(items));
  return v;
}
TemplateValue TemplateValue::object(Object items) {
  TemplateValue v;
  v.kind_ = Kind::kObject;
  v.obj_ = std::make_shared<Object>(std::move(items));
  return v;
}
TemplateValue TemplateValue::function(std::string name) {
  TemplateValue v;
  v.kind_ = Kind::kFunction;
  v.s_ = std::move(name);
  return v;
}
TemplateValue TemplateValue::macro(std::shared_ptr<const TemplateMacro> m) {
  TemplateValue v;
  v.kind_ = Kind::kMacro;
  v.macro_ = std::move(m);
  return v;
}

TemplateValue TemplateValue::get(const std::string& key) const {
  if (kind_ != Kind::kObject) return {};
  for (const auto& [k, v] : *obj_)
    if (k == key) return v;
  return {};
}

void TemplateValue::set(const std::string& key, TemplateValue v) const {
  DL_ASSERT(kind_ == Kind::kObject);
  for (auto& [k, old] : *obj_) {
    if (k == key) {
      old = std::move(v);
      return;
    }
  }
  obj_->emplace_back(key, std::move(v));
}

void TemplateValue::push(TemplateValue v) const {
  DL_ASSERT(kind_ == Kind::kArray);
  arr_->push_back(std::move(v));
}

bool TemplateValue::truthy() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone: return false;
    case Kind::kBool: return b_;
    case Kind::kInt: return i_ != 0;
    case Kind::kFloat: return f_ != 0.0;
    case Kind::kString: return !s_.empty();
    case Kind::kArray: return !arr_->empty();
    case Kind::kObject: return !obj_->empty();
    case Kind::kFunction:
    case Kind::kMacro: return true;
  }
  return false;
}

std::string TemplateValue::to_output() const {
  switch (kind_) {
    case Kind::kUndefined: return "";
    case Kind::kNone: return "None";
    case Kind::kBool: return b_ ? "True" : "False";
    case Kind::kInt: return std::to_string(i_);
    case Kind::kFloat: return float_repr(f_);
    case Kind::kString: return s_;
    case Kind::kArray: {
      std::string out = "[";
      for (size_t i = 0; i < arr_->size(); ++i) out += (i ? ", " : "") + repr((*arr_)[i]);
      return out + "]";
    }
    case Kind::kObject: {
      std::string out = "{";
      for (size_t i = 0; i < obj_->size(); ++i)
        out += (i ? ", " : "") + py_repr_string((*obj_)[i].first) + ": " + repr((*obj_)[i].second);
      return out + "}";
    }
    case Kind::kFunction:
    case Kind::kMacro: return "<function>";
  }
  return "";
}

std::string TemplateValue::to_json(int indent) const {
  JsonStyle style;
  style.indent = indent;
  return to_json(style);
}

std::string TemplateValue::to_json(const JsonStyle& style) const {
  std::string out;
  json_write(out, *this, style, 0);
  return out;
}

const char* TemplateValue::type_name() const {
  switch (kind_) {
    case Kind::kUndefined: return "undefined";
    case Kind::kNone: return "none";
    case Kind::kBool: return "bool";
    case Kind::kInt: return "int";
    case Kind::kFloat: return "float";
    case Kind::kString: return "string";
    case Kind::kArray: return "list";
    case Kind::kObject: return "dict";
    case Kind::kFunction:
    case Kind::kMacro: return "function";
  }
  return "?";
}

bool template_equal(const TemplateValue& a, const TemplateValue& b) {
  using K = TemplateValue::Kind;
  if (a.is_number() && b.is_number()) {
    if (a.kind() == K::kInt && b.kind() == K::kInt) return a.as_int() == b.as_int();
    return a.as_double() == b.as_double();
  }
  // Python: True == 1; keep bools apart from numbers except that case.
  if (a.kind() == K::kBool && b.is_number()) return (a.as_bool() ? 1.0 : 0.0) == b.as_double();
  if (b.kind() == K::kBool && a.is_number()) return (b.as_bool() ? 1.0 : 0.0) == a.as_double();
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case K::kUndefined:
    case K::kNone: return true;
    case K::kBool: return a.as_bool() == b.as_bool();
    case K::kString: return a.as_string() == b.as_string();
    case K::kArray: {
      if (a.items().size() != b.items().size()) return false;
      for (size_t i = 0; i < a.items().size(); ++i)
        if (!template_equal(a.items()[i], b.items()[i])) return false;
      return true;
    }
    case K::kObject: {
      if (a.fields().size() != b.fields().size()) return false;
      for (const auto& [k, v] : a.fields()) {
        bool found = false;
        for (const auto& [k2, v2] : b.fields())
          if (k == k2) found = template_equal(v, v2);
        if (!found) return false;
      }
      return true;
    }
    default: return a.as_string() == b.as_string();
  }
}

}  // namespace distllm::serve
