// Values a chat template works on: what Jinja sees of Python data (None, bools,
// numbers, strings, lists, dicts) plus Jinja's `undefined` and callables.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace distllm::serve {

struct TemplateMacro;

// How tojson writes JSON, as Python's json.dumps(ensure_ascii=False, indent=...,
// separators=..., sort_keys=...): empty separators mean json.dumps' defaults
// (", " between items, or "," when indenting; ": " after keys).
struct JsonStyle {
  int indent = -1;  // < 0: one line
  std::string item_separator;
  std::string key_separator;
  bool sort_keys = false;
};

class TemplateValue {
 public:
  enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kArray, kObject, kFunction, kMacro };
  using Array = std::vector<TemplateValue>;
  using Object = std::vector<std::pair<std::string, TemplateValue>>;  // insertion order, like a Python dict

  TemplateValue() = default;  // undefined
  static TemplateValue none();
  static TemplateValue boolean(bool b);
  static TemplateValue integer(int64_t i);
  static TemplateValue number(double f);
  static TemplateValue string(std::string s);
  static TemplateValue array(Array items = {});
  static TemplateValue object(Object items = {});
  static TemplateValue function(std::string name);  // built-in callable
  static TemplateValue macro(std::shared_ptr<const TemplateMacro> m);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_number() const { return kind_ == Kind::kInt || kind_ == Kind::kFloat; }
  bool is_array() const { return kind_ == Kind::kArray; }
  bool is_object() const { return kind_ == Kind::kObject; }

  bool as_bool() const { return b_; }
  int64_t as_int() const { return i_; }
  double as_double() const { return kind_ == Kind::kInt ? static_cast<double>(i_) : f_; }
  const std::string& as_string() const { return s_; }  // also a function's name
  // Arrays and objects are shared (reference semantics, as in Python), which is
  // what lets `namespace()` objects be updated by `set ns.x = ...`.
  Array& items() const { return *arr_; }
  Object& fields() const { return *obj_; }
  const std::shared_ptr<const TemplateMacro>& macro_def() const { return macro_; }

  // Object field, or undefined.
  TemplateValue get(const std::string& key) const;
  void set(const std::string& key, TemplateValue v) const;  // objects only
  void push(TemplateValue v) const;                         // arrays only

  bool truthy() const;
  // What `{{ v }}` prints (Python's str(): None, True, 1.5, ['a', 1], {'k': 'v'}).
  std::string to_output() const;
  // JSON text as Python's json.dumps(ensure_ascii=False) writes it; indent < 0: one line.
  std::string to_json(int indent = -1) const;
  std::string to_json(const JsonStyle& style) const;
  const char* type_name() const;

 private:
  Kind kind_ = Kind::kUndefined;
  bool b_ = false;
  int64_t i_ = 0;
  double f_ = 0.0;
  std::string s_;
  std::shared_ptr<Array> arr_;
  std::shared_ptr<Object> obj_;
  std::shared_ptr<const TemplateMacro> macro_;
};

bool template_equal(const TemplateValue& a, const TemplateValue& b);

}  // namespace distllm::serve
