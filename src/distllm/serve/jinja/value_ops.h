// Operations on template values that Jinja2 defines by Python's semantics:
// iteration, indexing and slicing (strings by code point), membership, ordering,
// and the string helpers the filters and methods share.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "distllm/serve/jinja/template_value.h"

namespace distllm::serve::jinja {

using V = TemplateValue;

std::vector<std::string> code_points(const std::string& s);
std::vector<V> iterate(const V& v, int line);
int64_t to_index(const V& v, int line);
V get_item(const V& obj, const V& key, int line);
V slice(const V& obj, const V* start_v, const V* stop_v, const V* step_v, int line);
bool contains(const V& container, const V& item, int line);
int compare_values(const V& a, const V& b, int line);
std::string strip_chars(const std::string& s, const std::string* chars, bool left, bool right);
std::string ascii_upper(std::string s);
std::string ascii_lower(std::string s);
std::string capitalize(const std::string& s);
std::string title(const std::string& s);
std::string replace_all(const std::string& s, const std::string& from, const std::string& to, int64_t count);

}  // namespace distllm::serve::jinja
