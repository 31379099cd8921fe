#include "distllm/serve/jinja/value_ops.h"

#include <algorithm>

#include "distllm/base/strings.h"
#include "distllm/serve/jinja/context.h"
#include "distllm/serve/jinja/lexer.h"

namespace distllm::serve::jinja {

using V = TemplateValue;
using VK = TemplateValue::Kind;

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
}  // namespace distllm::serve::jinja
