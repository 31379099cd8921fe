#include "distllm/serve/model_bundle.h"

#include <nlohmann/json.hpp>

#include "distllm/base/error.h"
#include "distllm/io/file_util.h"
#include "distllm/model/hf_checkpoint.h"

namespace distllm::serve {

namespace {

nlohmann::json read_json(const std::string& path) {
  nlohmann::json j = nlohmann::json::parse(read_file(path), nullptr, /*allow_exceptions=*/false);
  DL_CHECK(!j.is_discarded() && j.is_object(), "%s: invalid JSON (expected an object)", path.c_str());
  return j;
}

}  // namespace

std::vector<int32_t> generation_eos_ids(const std::string& model_dir) {
  std::string path = join_path(model_dir, "generation_config.json");
  std::vector<int32_t> ids;
  if (!file_exists(path)) return ids;
  nlohmann::json j = read_json(path);
  auto it = j.find("eos_token_id");
  if (it == j.end() || it->is_null()) return ids;
  if (it->is_number_integer()) {
    ids.push_back(it->get<int32_t>());
  } else if (it->is_array()) {
    for (const auto& x : *it) {
      DL_CHECK(x.is_number_integer(), "%s: eos_token_id entries must be integers", path.c_str());
      ids.push_back(x.get<int32_t>());
    }
  } else {
    throw_error(strprintf("%s: eos_token_id must be an integer or a list of integers", path.c_str()));
  }
  return ids;
}

std::string special_token_text(const std::string& model_dir, const char* key) {
  std::string path = join_path(model_dir, "tokenizer_config.json");
  if (!file_exists(path)) return "";
  nlohmann::json j = read_json(path);
  auto it = j.find(key);
  if (it == j.end()) return "";
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string())
    return (*it)["content"].get<std::string>();
  return "";
}

ModelBundle load_model_bundle(const std::string& model_dir, const std::string& tokenizer_path) {
  DL_CHECK(is_directory(model_dir), "--model %s is not a directory", model_dir.c_str());
  ModelBundle b;
  b.weights = map_hf_model(model_dir);
  b.tokenizer = Tokenizer::load(tokenizer_path.empty() ? model_dir : tokenizer_path);
  DL_CHECK(b.tokenizer->vocab_size() <= b.weights->config().vocab_size,
           "%s: the tokenizer has %d tokens but the model only %d", model_dir.c_str(), b.tokenizer->vocab_size(),
           b.weights->config().vocab_size);
  b.eos_ids = generation_eos_ids(model_dir);
  if (!b.eos_ids.empty() && !b.tokenizer->eos_token_id()) b.tokenizer->set_eos_token_id(b.eos_ids[0]);
  if (b.eos_ids.empty() && b.tokenizer->eos_token_id()) b.eos_ids.push_back(*b.tokenizer->eos_token_id());
  return b;
}

std::string tokenizer_difference(const Tokenizer& serving, const Tokenizer& other) {
  if (other.vocab_size() != serving.vocab_size())
    return strprintf("its tokenizer has %d tokens but the model's has %d", other.vocab_size(), serving.vocab_size());
  for (int32_t id = 0; id < serving.vocab_size(); ++id) {
    if (other.token_bytes(id) != serving.token_bytes(id))
      return strprintf("token %d is '%s' in its tokenizer but '%s' in the model's", id, other.id_to_token(id).c_str(),
                       serving.id_to_token(id).c_str());
  }
  return "";
}

void check_same_tokenizer(const Tokenizer& target, const Tokenizer& draft, const std::string& draft_dir) {
  std::string diff = tokenizer_difference(target, draft);
  DL_CHECK(diff.empty(), "--draft-model %s: %s; the draft model must use the same tokenizer", draft_dir.c_str(),
           diff.c_str());
}

}  // namespace distllm::serve
