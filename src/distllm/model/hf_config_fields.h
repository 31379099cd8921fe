// Reading Hugging Face config.json fields with errors that name the file and the
// key (the families' parsers, model/families/, share these).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace distllm::hf_config {

// The value of `key`; throws "ORIGIN: missing required key 'KEY'" when absent or null.
const nlohmann::json& require(const nlohmann::json& j, const char* key, const std::string& origin);
// A positive integer no larger than `max`, named by its key when it is not.
int get_int(const nlohmann::json& j, const char* key, int max, const std::string& origin);
int get_int_or(const nlohmann::json& j, const char* key, int fallback, int max, const std::string& origin);
double get_number_or(const nlohmann::json& j, const char* key, double fallback, const std::string& origin);
bool get_bool_or(const nlohmann::json& j, const char* key, bool fallback, const std::string& origin);
std::string get_string_or(const nlohmann::json& j, const char* key, const std::string& fallback,
                          const std::string& origin);

}  // namespace distllm::hf_config
