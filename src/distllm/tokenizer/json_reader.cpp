#include "distllm/tokenizer/json_reader.h"

#include "distllm/base/error.h"
#include "distllm/tokenizer/utf8.h"

namespace distllm {

void JsonReader::fail(const std::string& field, const std::string& problem) const {
  throw_error(origin_ + ": " + field + ": " + problem);
}

const char* JsonReader::type_name(const json& v) {
  if (v.is_number_integer()) return "an integer";
  if (v.is_number()) return "a number";
  if (v.is_string()) return "a string";
  if (v.is_boolean()) return "a boolean";
  if (v.is_null()) return "null";
  if (v.is_array()) return "an array";
  return "an object";
}

void JsonReader::known_fields(const json& obj, std::initializer_list<const char*> known,
                              const std::string& where) const {
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    bool found = false;
    for (const char* k : known) found = found || it.key() == k;
    if (found) continue;
    std::string list;
    for (const char* k : known) list += std::string(list.empty() ? "" : ", ") + k;
    fail(join(where, utf8_sanitize(it.key()).c_str()), "is not a field distllm knows here (known: " + list + ")");
  }
}

const JsonReader::json* JsonReader::member(const json& obj, const char* key) const {
  auto it = obj.find(key);
  return it == obj.end() ? nullptr : &*it;
}

const JsonReader::json& JsonReader::require(const json& obj, const char* key, const std::string& where) const {
  const json* v = member(obj, key);
  if (v == nullptr) fail(join(where, key), "missing");
  return *v;
}

void JsonReader::expect_object(const json& v, const std::string& where) const {
  if (!v.is_object()) fail(where, std::string("expected an object, got ") + type_name(v));
}

void JsonReader::expect_array(const json& v, const std::string& where) const {
  if (!v.is_array()) fail(where, std::string("expected an array, got ") + type_name(v));
}

std::string JsonReader::string_of(const json& v, const std::string& where) const {
  if (!v.is_string()) fail(where, std::string("expected a string, got ") + type_name(v));
  return v.get<std::string>();
}

int64_t JsonReader::integer_of(const json& v, const std::string& where) const {
  if (!v.is_number_integer()) fail(where, std::string("expected an integer, got ") + type_name(v));
  if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) fail(where, "integer out of range");
  return v.get<int64_t>();
}

bool JsonReader::bool_member(const json& obj, const char* key, bool fallback, const std::string& where) const {
  const json* v = member(obj, key);
  if (v == nullptr || v->is_null()) return fallback;
  if (!v->is_boolean()) fail(join(where, key), std::string("expected a boolean, got ") + type_name(*v));
  return v->get<bool>();
}

std::string JsonReader::string_member(const json& obj, const char* key, const std::string& fallback,
                                      const std::string& where) const {
  const json* v = member(obj, key);
  if (v == nullptr || v->is_null()) return fallback;
  return string_of(*v, join(where, key));
}

int64_t JsonReader::integer_member(const json& obj, const char* key, int64_t fallback, const std::string& where) const {
  const json* v = member(obj, key);
  if (v == nullptr || v->is_null()) return fallback;
  return integer_of(*v, join(where, key));
}

uint32_t JsonReader::char_member(const json& obj, const char* key, uint32_t fallback, const std::string& where) const {
  const json* v = member(obj, key);
  if (v == nullptr || v->is_null()) return fallback;
  std::string s = string_of(*v, join(where, key));
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  Utf8Step step = s.empty() ? Utf8Step{Utf8Step::kInvalid, 0, 0} : utf8_step(p, s.size());
  if (step.kind != Utf8Step::kChar || step.length != s.size())
    fail(join(where, key), std::string("expected exactly one character, got ") + quote_for_message(s));
  return step.cp;
}

std::string JsonReader::type_of(const json& obj, const std::string& where) const {
  expect_object(obj, where);
  return string_of(require(obj, "type", where), join(where, "type"));
}

const JsonReader::json& JsonReader::array_member(const json& obj, const char* key, const std::string& where) const {
  const json& v = require(obj, key, where);
  expect_array(v, join(where, key));
  return v;
}

}  // namespace distllm
