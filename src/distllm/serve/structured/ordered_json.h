// Parsing JSON text into nlohmann::ordered_json in linear time.
//
// ordered_json keeps an object's keys in document order (a JSON Schema's property
// order is the order a grammar writes them in), but its parser looks every key up
// in a vector: an object of n keys costs n^2/2 string comparisons, and a 1 MB
// request body with 100,000 keys kept a server thread busy for seconds. This parser
// builds the same value (duplicate keys: the last value, at the first key's place,
// as nlohmann does) with a hash index per open object.
#pragma once

#include <string_view>

#include <nlohmann/json.hpp>

namespace distllm::structured {

// Throws nlohmann::ordered_json::exception (a parse_error or out_of_range) for text
// that is not one JSON value, as nlohmann::ordered_json::parse does.
nlohmann::ordered_json parse_ordered_json(std::string_view text);

}  // namespace distllm::structured
