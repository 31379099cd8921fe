// Reading the parts of tokenizer.json with errors that name the file and the field:
// "tokenizer.json: pre_tokenizer.pretokenizers[0].behavior: expected a string, got null".
#pragma once

#include <cstdint>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <string>

namespace distllm {

class JsonReader {
 public:
  using json = nlohmann::json;

  explicit JsonReader(std::string origin) : origin_(std::move(origin)) {}
  const std::string& origin() const { return origin_; }

  [[noreturn]] void fail(const std::string& field, const std::string& problem) const;

  static const char* type_name(const json& v);
  static std::string join(const std::string& where, const char* key) { return where.empty() ? key : where + "." + key; }
  static std::string index(const std::string& where, size_t i) { return where + "[" + std::to_string(i) + "]"; }

  const json* member(const json& obj, const char* key) const;
  const json& require(const json& obj, const char* key, const std::string& where) const;
  void expect_object(const json& v, const std::string& where) const;
  void expect_array(const json& v, const std::string& where) const;
  std::string string_of(const json& v, const std::string& where) const;
  int64_t integer_of(const json& v, const std::string& where) const;
  // The member's value; `fallback` when it is absent or null.
  bool bool_member(const json& obj, const char* key, bool fallback, const std::string& where) const;
  std::string string_member(const json& obj, const char* key, const std::string& fallback, const std::string& where) const;
  int64_t integer_member(const json& obj, const char* key, int64_t fallback, const std::string& where) const;
  // A string of exactly one character (e.g. Metaspace's replacement), as a code point.
  uint32_t char_member(const json& obj, const char* key, uint32_t fallback, const std::string& where) const;
  // obj["type"], which must be a string.
  std::string type_of(const json& obj, const std::string& where) const;
  // Refuses, by name, a member of `obj` that is not in `known`: a field this reader
  // does not understand is an error, never silently ignored.
  void known_fields(const json& obj, std::initializer_list<const char*> known, const std::string& where) const;
  // The array obj[key] (required).
  const json& array_member(const json& obj, const char* key, const std::string& where) const;

 private:
  std::string origin_;
};

}  // namespace distllm
