// tokenizer_config.json (transformers' file beside tokenizer.json): BOS, EOS, and
// whether a text's encoding starts with BOS or ends with EOS.
#include "distllm/base/error.h"
#include "distllm/tokenizer/json_reader.h"
#include "distllm/tokenizer/tokenizer.h"
#include "distllm/tokenizer/utf8.h"

namespace distllm {
namespace {

using json = nlohmann::json;

// bos_token / eos_token: a string, or an AddedToken object {"content": ...}; null or
// absent is none.
std::optional<std::string> token_field(const JsonReader& r, const json& doc, const char* key) {
  const json* v = r.member(doc, key);
  if (v == nullptr || v->is_null()) return std::nullopt;
  if (v->is_object()) return r.string_of(r.require(*v, "content", key), std::string(key) + ".content");
  return r.string_of(*v, key);
}

}  // namespace

void Tokenizer::apply_config(const std::string& config_json, const std::string& origin) {
  size_t bad = utf8_first_invalid(config_json);
  DL_CHECK(bad == config_json.size(), "%s: not UTF-8 (byte 0x%02X at offset %zu)", origin.c_str(),
           static_cast<unsigned char>(config_json[bad]), bad);
  json doc;
  try {
    doc = json::parse(config_json);
  } catch (const json::exception& e) {
    std::string what = e.what();
    size_t bracket = what.find("] ");
    throw_error(origin + ": not valid JSON: " + (bracket == std::string::npos ? what : what.substr(bracket + 2)));
  }
  JsonReader r(origin);
  r.expect_object(doc, "top level");
  auto id_of = [&](const char* key) -> std::optional<int32_t> {
    std::optional<std::string> token = token_field(r, doc, key);
    if (!token) return std::nullopt;
    std::optional<int32_t> id = token_to_id(*token);
    if (!id) r.fail(key, quote_for_message(*token) + " is not a token of the tokenizer");
    return id;
  };
  std::optional<int32_t> bos = id_of("bos_token"), eos = id_of("eos_token");
  if (bos) bos_ = bos;
  if (eos) eos_ = eos;
  if (const json* v = r.member(doc, "add_bos_token"); v && !v->is_null()) {
    bool add = r.bool_member(doc, "add_bos_token", false, "");
    if (add && !bos) r.fail("add_bos_token", "true, but there is no bos_token");
    special_before_ = add ? std::vector<int32_t>{*bos} : std::vector<int32_t>{};
  }
  if (const json* v = r.member(doc, "add_eos_token"); v && !v->is_null()) {
    bool add = r.bool_member(doc, "add_eos_token", false, "");
    if (add && !eos) r.fail("add_eos_token", "true, but there is no eos_token");
    special_after_ = add ? std::vector<int32_t>{*eos} : std::vector<int32_t>{};
  }
}

}  // namespace distllm
