// Small hand-made tokenizer.json documents for unit tests.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "distllm/tokenizer/byte_level.h"

namespace distllm::test {

// A byte-level BPE tokenizer.json: the 256 byte tokens (id == byte value), then
// `extra` tokens (raw text, stored in byte-level form) with ids from 256 on, and
// `merges` of raw-text pairs, in rank order.
inline nlohmann::json tiny_tokenizer_json(const std::vector<std::string>& extra,
                                          const std::vector<std::pair<std::string, std::string>>& merges) {
  nlohmann::json vocab = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) vocab[bytes_to_byte_level(std::string(1, static_cast<char>(b)))] = b;
  int id = 256;
  for (const std::string& t : extra) vocab[bytes_to_byte_level(t)] = id++;
  nlohmann::json m = nlohmann::json::array();
  for (const auto& [a, b] : merges) m.push_back(bytes_to_byte_level(a) + " " + bytes_to_byte_level(b));
  return nlohmann::json{
      {"version", "1.0"},
      {"added_tokens", nlohmann::json::array()},
      {"normalizer", nullptr},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}}},
      {"post_processor", nullptr},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", m}}},
  };
}

inline nlohmann::json added_token(int id, const std::string& content, bool special) {
  return nlohmann::json{{"id", id},         {"content", content}, {"single_word", false}, {"lstrip", false},
                        {"rstrip", false}, {"normalized", false}, {"special", special}};
}

}  // namespace distllm::test
