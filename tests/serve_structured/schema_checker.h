// A small JSON Schema validator written for the tests, independent of the grammar
// converter: it checks the keywords the converter supports (formats are left to ajv).
#pragma once

#include <nlohmann/json.hpp>

#include <cmath>
#include <regex>
#include <string>

namespace distllm::structured::testing_util {

class SchemaChecker {
 public:
  explicit SchemaChecker(nlohmann::json root) : root_(std::move(root)) {}

  // Empty when valid, else why not.
  std::string check(const nlohmann::json& v) const { return check(root_, v, "$"); }

 private:
  static size_t code_points(const std::string& s) {
    size_t n = 0;
    for (unsigned char c : s) n += (c & 0xC0) != 0x80;
    return n;
  }

  static bool has_type(const nlohmann::json& v, const std::string& t) {
    if (t == "string") return v.is_string();
    if (t == "integer") return v.is_number_integer() || (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>());
    if (t == "number") return v.is_number();
    if (t == "boolean") return v.is_boolean();
    if (t == "null") return v.is_null();
    if (t == "object") return v.is_object();
    if (t == "array") return v.is_array();
    return false;
  }

  std::string check(const nlohmann::json& s, const nlohmann::json& v, const std::string& at) const {
    if (s.is_boolean()) return s.get<bool>() ? "" : at + ": false schema";
    if (s.contains("$ref")) {
      std::string r = s["$ref"];
      if (r == "#") return check(root_, v, at);
      auto slash = r.rfind('/');
      std::string section = r.substr(2, slash - 2), name = r.substr(slash + 1);
      return check(root_[section][name], v, at);
    }
    if (s.contains("type")) {
      bool ok = false;
      if (s["type"].is_string()) ok = has_type(v, s["type"]);
      else
        for (auto& t : s["type"]) ok = ok || has_type(v, t);
      if (!ok) return at + ": wrong type";
    }
    if (s.contains("const") && v != s["const"]) return at + ": not the const";
    if (s.contains("enum")) {
      bool ok = false;
      for (auto& e : s["enum"]) ok = ok || e == v;
      if (!ok) return at + ": not in enum";
    }
    if (s.contains("anyOf")) {
      bool ok = false;
      for (auto& sub : s["anyOf"]) ok = ok || check(sub, v, at).empty();
      if (!ok) return at + ": no anyOf branch matches";
    }
    if (s.contains("oneOf")) {
      int n = 0;
      for (auto& sub : s["oneOf"]) n += check(sub, v, at).empty();
      if (n != 1) return at + ": oneOf matched " + std::to_string(n);
    }
    if (v.is_string()) {
      std::string str = v.get<std::string>();
      size_t n = code_points(str);
      if (s.contains("minLength") && n < s["minLength"].get<size_t>()) return at + ": too short";
      if (s.contains("maxLength") && n > s["maxLength"].get<size_t>()) return at + ": too long";
      if (s.contains("pattern") && !std::regex_search(str, std::regex(s["pattern"].get<std::string>())))
        return at + ": pattern mismatch";
    }
    if (v.is_number()) {
      double x = v.get<double>();
      if (!std::isfinite(x)) return at + ": not finite";
      if (s.contains("minimum") && x < s["minimum"].get<double>()) return at + ": below minimum";
      if (s.contains("maximum") && x > s["maximum"].get<double>()) return at + ": above maximum";
      if (s.contains("exclusiveMinimum") && x <= s["exclusiveMinimum"].get<double>()) return at + ": not above exclusiveMinimum";
      if (s.contains("exclusiveMaximum") && x >= s["exclusiveMaximum"].get<double>()) return at + ": not below exclusiveMaximum";
    }
    if (v.is_array()) {
      if (s.contains("minItems") && v.size() < s["minItems"].get<size_t>()) return at + ": too few items";
      if (s.contains("maxItems") && v.size() > s["maxItems"].get<size_t>()) return at + ": too many items";
      if (s.contains("items"))
        for (size_t i = 0; i < v.size(); ++i) {
          auto e = check(s["items"], v[i], at + "[" + std::to_string(i) + "]");
          if (!e.empty()) return e;
        }
    }
    if (v.is_object()) {
      if (s.contains("required"))
        for (auto& r : s["required"])
          if (!v.contains(r.get<std::string>())) return at + ": missing " + r.get<std::string>();
      for (auto it = v.begin(); it != v.end(); ++it) {
        if (s.contains("properties") && s["properties"].contains(it.key())) {
          auto e = check(s["properties"][it.key()], it.value(), at + "." + it.key());
          if (!e.empty()) return e;
        } else if (s.contains("additionalProperties")) {
          auto e = check(s["additionalProperties"], it.value(), at + "." + it.key());
          if (!e.empty()) return e;
        }
      }
    }
    return "";
  }

  nlohmann::json root_;
};

}  // namespace distllm::structured::testing_util
