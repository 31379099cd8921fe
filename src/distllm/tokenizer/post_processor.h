// tokenizer.json's "post_processor", for one sequence: the ids Hugging Face puts around
// a text's ids when it adds special tokens (encode(text) with add_special_tokens=True),
// e.g. <s> before them for Llama 2, nothing for Llama 3's and Qwen's ByteLevel.
//
// Supported: TemplateProcessing ("single"), BertProcessing, RobertaProcessing,
// ByteLevel (adds nothing) and Sequence of them (each wraps what the previous made).
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "distllm/tokenizer/json_reader.h"

namespace distllm {

struct SpecialTokensTemplate {
  std::vector<int32_t> before, after;
};

// `token_id` maps a token's string to its id (for Bert/Roberta's [token, id] pairs,
// which must agree with the vocabulary).
SpecialTokensTemplate parse_post_processor(const JsonReader& r, const nlohmann::json& node, const std::string& where,
                                           const std::function<std::optional<int32_t>(const std::string&)>& token_id,
                                           int32_t vocab_size);

}  // namespace distllm
