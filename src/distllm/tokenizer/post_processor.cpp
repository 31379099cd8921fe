#include "distllm/tokenizer/post_processor.h"

#include "distllm/base/error.h"
#include "distllm/tokenizer/utf8.h"

namespace distllm {
namespace {

using json = nlohmann::json;

int32_t checked_id(const JsonReader& r, const json& v, const std::string& where, int32_t vocab_size) {
  int64_t id = r.integer_of(v, where);
  if (id < 0 || id >= vocab_size) r.fail(where, strprintf("token id %lld is out of range [0, %d)", (long long)id, vocab_size));
  return static_cast<int32_t>(id);
}

// Bert's and Roberta's ["[CLS]", 101].
int32_t token_pair(const JsonReader& r, const json& node, const char* key, const std::string& where,
                   const std::function<std::optional<int32_t>(const std::string&)>& token_id, int32_t vocab_size) {
  const std::string field = JsonReader::join(where, key);
  const json& pair = r.require(node, key, where);
  r.expect_array(pair, field);
  if (pair.size() != 2) r.fail(field, strprintf("expected [token, id], got %zu entries", pair.size()));
  std::string token = r.string_of(pair[0], field + "[0]");
  int32_t id = checked_id(r, pair[1], field + "[1]", vocab_size);
  std::optional<int32_t> known = token_id(token);
  if (known && *known != id)
    r.fail(field, strprintf("'%s' has id %d in the vocabulary, not %d", utf8_sanitize(token).c_str(), *known, id));
  return id;
}

SpecialTokensTemplate parse_template(const JsonReader& r, const json& node, const std::string& where,
                                     const std::function<std::optional<int32_t>(const std::string&)>& token_id,
                                     int32_t vocab_size) {
  SpecialTokensTemplate t;
  const json& single = r.array_member(node, "single", where);
  const json* specials = r.member(node, "special_tokens");
  if (specials && !specials->is_null()) r.expect_object(*specials, JsonReader::join(where, "special_tokens"));
  bool seen_sequence = false;
  for (size_t i = 0; i < single.size(); ++i) {
    const std::string item_where = JsonReader::index(JsonReader::join(where, "single"), i);
    const json& item = single[i];
    r.expect_object(item, item_where);
    if (const json* seq = r.member(item, "Sequence")) {
      r.expect_object(*seq, JsonReader::join(item_where, "Sequence"));
      std::string id = r.string_of(r.require(*seq, "id", JsonReader::join(item_where, "Sequence")),
                                   JsonReader::join(item_where, "Sequence.id"));
      if (id != "A") r.fail(JsonReader::join(item_where, "Sequence.id"), std::string("a single sequence can only hold A, got ") + quote_for_message(id));
      if (seen_sequence) r.fail(item_where, "A appears twice");
      seen_sequence = true;
      continue;
    }
    const json* special = r.member(item, "SpecialToken");
    if (special == nullptr) r.fail(item_where, "expected {\"Sequence\": ...} or {\"SpecialToken\": ...}");
    const std::string special_where = JsonReader::join(item_where, "SpecialToken");
    r.expect_object(*special, special_where);
    std::string name = r.string_of(r.require(*special, "id", special_where), JsonReader::join(special_where, "id"));
    const json* entry = specials && specials->is_object() ? r.member(*specials, name.c_str()) : nullptr;
    std::vector<int32_t>& side = seen_sequence ? t.after : t.before;
    if (entry == nullptr) {  // not listed: the token of that name, if there is one
      std::optional<int32_t> id = token_id(name);
      if (!id)
        r.fail(JsonReader::join(where, "special_tokens"),
               quote_for_message(name) + " (used by " + item_where + ") is missing");
      side.push_back(*id);
      continue;
    }
    const std::string entry_where = JsonReader::join(where, "special_tokens") + "[\"" + utf8_sanitize(name) + "\"]";
    r.expect_object(*entry, entry_where);
    const json& ids = r.array_member(*entry, "ids", entry_where);
    for (size_t k = 0; k < ids.size(); ++k)
      side.push_back(checked_id(r, ids[k], JsonReader::index(JsonReader::join(entry_where, "ids"), k), vocab_size));
  }
  if (!seen_sequence) r.fail(JsonReader::join(where, "single"), "has no {\"Sequence\": {\"id\": \"A\"}}");
  return t;
}

void parse_into(const JsonReader& r, const json& node, const std::string& where,
                const std::function<std::optional<int32_t>(const std::string&)>& token_id, int32_t vocab_size,
                SpecialTokensTemplate& t) {
  std::string type = r.type_of(node, where);
  SpecialTokensTemplate step;
  if (type == "Sequence") {
    const json& list = r.array_member(node, "processors", where);
    for (size_t i = 0; i < list.size(); ++i)
      parse_into(r, list[i], JsonReader::index(JsonReader::join(where, "processors"), i), token_id, vocab_size, t);
    return;
  } else if (type == "ByteLevel") {
    // Offsets only.
  } else if (type == "TemplateProcessing") {
    step = parse_template(r, node, where, token_id, vocab_size);
  } else if (type == "BertProcessing" || type == "RobertaProcessing") {
    step.before.push_back(token_pair(r, node, "cls", where, token_id, vocab_size));
    step.after.push_back(token_pair(r, node, "sep", where, token_id, vocab_size));
  } else {
    r.fail(JsonReader::join(where, "type"),
           quote_for_message(type) + " is not supported (supported: TemplateProcessing, BertProcessing, RobertaProcessing, ByteLevel, Sequence)");
  }
  // This step wraps what the steps before it made.
  step.before.insert(step.before.end(), t.before.begin(), t.before.end());
  t.after.insert(t.after.end(), step.after.begin(), step.after.end());
  t.before.swap(step.before);
}

}  // namespace

SpecialTokensTemplate parse_post_processor(const JsonReader& r, const json& node, const std::string& where,
                                           const std::function<std::optional<int32_t>(const std::string&)>& token_id,
                                           int32_t vocab_size) {
  SpecialTokensTemplate t;
  if (!node.is_null()) parse_into(r, node, where, token_id, vocab_size, t);
  return t;
}

}  // namespace distllm
