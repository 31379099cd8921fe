// Reading and writing Hugging Face's tokenizer.json.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "distllm/base/error.h"
#include "distllm/tokenizer/tokenizer.h"
#include "distllm/tokenizer/tokenizer_impl.h"
#include "distllm/tokenizer/utf8.h"

namespace distllm {
namespace {

using json = nlohmann::json;
using ordered_json = nlohmann::ordered_json;

// GPT-2's split pattern, as tokenizer.json files spell it in a Split pre-tokenizer.
constexpr const char* kGpt2Pattern = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

constexpr int kMaxJsonDepth = 256;

class Reader {
 public:
  explicit Reader(const std::string& origin) : origin_(origin) {}

  [[noreturn]] void fail(const std::string& field, const std::string& problem) const {
    throw_error(origin_ + ": " + field + ": " + problem);
  }

  static const char* type_name(const json& v) {
    if (v.is_number_integer()) return "an integer";
    if (v.is_number()) return "a number";
    if (v.is_string()) return "a string";
    if (v.is_boolean()) return "a boolean";
    if (v.is_null()) return "null";
    if (v.is_array()) return "an array";
    return "an object";
  }

  const json* member(const json& obj, const char* key) const {
    auto it = obj.find(key);
    return it == obj.end() ? nullptr : &*it;
  }
  const json& require(const json& obj, const char* key, const std::string& where) const {
    const json* v = member(obj, key);
    if (v == nullptr) fail(join(where, key), "missing");
    return *v;
  }
  void expect_object(const json& v, const std::string& where) const {
    if (!v.is_object()) fail(where, std::string("expected an object, got ") + type_name(v));
  }
  void expect_array(const json& v, const std::string& where) const {
    if (!v.is_array()) fail(where, std::string("expected an array, got ") + type_name(v));
  }
  std::string string_of(const json& v, const std::string& where) const {
    if (!v.is_string()) fail(where, std::string("expected a string, got ") + type_name(v));
    return v.get<std::string>();
  }
  int64_t integer_of(const json& v, const std::string& where) const {
    if (!v.is_number_integer()) fail(where, std::string("expected an integer, got ") + type_name(v));
    if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) fail(where, "integer out of range");
    return v.get<int64_t>();
  }
  bool bool_member(const json& obj, const char* key, bool fallback, const std::string& where) const {
    const json* v = member(obj, key);
    if (v == nullptr || v->is_null()) return fallback;
    if (!v->is_boolean()) fail(join(where, key), std::string("expected a boolean, got ") + type_name(*v));
    return v->get<bool>();
  }
  std::string type_of(const json& obj, const std::string& where) const {
    expect_object(obj, where);
    return string_of(require(obj, "type", where), join(where, "type"));
  }
  static std::string join(const std::string& where, const char* key) { return where.empty() ? key : where + "." + key; }

 private:
  const std::string& origin_;
};

// Rejects nesting that could exhaust the stack of recursive JSON code.
void check_depth(const std::string& text, const std::string& origin) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      DL_CHECK(++depth <= kMaxJsonDepth, "%s: JSON nested deeper than %d levels", origin.c_str(), kMaxJsonDepth);
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
}

void parse_byte_level(const Reader& r, const json& pt, const std::string& where, TokenizerSpec& spec) {
  const json& aps = r.require(pt, "add_prefix_space", where);
  if (!aps.is_boolean()) r.fail(where + ".add_prefix_space", std::string("expected a boolean, got ") + Reader::type_name(aps));
  spec.add_prefix_space = aps.get<bool>();
  spec.trim_offsets = r.bool_member(pt, "trim_offsets", true, where);
  spec.use_regex = r.bool_member(pt, "use_regex", true, where);
}

void parse_pre_tokenizer(const Reader& r, const json& doc, TokenizerSpec& spec) {
  const json* pt = r.member(doc, "pre_tokenizer");
  if (pt == nullptr || pt->is_null())
    r.fail("pre_tokenizer", "missing; distllm implements byte-level BPE and needs the ByteLevel pre-tokenizer");
  std::string type = r.type_of(*pt, "pre_tokenizer");
  if (type == "ByteLevel") {
    spec.pre_form = PreTokenizerForm::kByteLevel;
    parse_byte_level(r, *pt, "pre_tokenizer", spec);
    return;
  }
  if (type != "Sequence")
    r.fail("pre_tokenizer.type", "'" + type + "' is not supported (only ByteLevel, or a Sequence of GPT-2's Split and ByteLevel)");
  const json& list = r.require(*pt, "pretokenizers", "pre_tokenizer");
  r.expect_array(list, "pre_tokenizer.pretokenizers");
  if (list.size() == 1 && r.type_of(list[0], "pre_tokenizer.pretokenizers[0]") == "ByteLevel") {
    spec.pre_form = PreTokenizerForm::kByteLevel;
    parse_byte_level(r, list[0], "pre_tokenizer.pretokenizers[0]", spec);
    return;
  }
  if (list.size() != 2)
    r.fail("pre_tokenizer.pretokenizers", strprintf("expected [Split, ByteLevel], got %zu entries", list.size()));
  const std::string split_where = "pre_tokenizer.pretokenizers[0]";
  std::string split_type = r.type_of(list[0], split_where);
  if (split_type != "Split") r.fail(split_where + ".type", "expected Split, got '" + split_type + "'");
  const json& pattern = r.require(list[0], "pattern", split_where);
  r.expect_object(pattern, split_where + ".pattern");
  const json* regex = r.member(pattern, "Regex");
  if (regex == nullptr) r.fail(split_where + ".pattern", "expected {\"Regex\": GPT-2's pattern}");
  if (r.string_of(*regex, split_where + ".pattern.Regex") != kGpt2Pattern)
    r.fail(split_where + ".pattern.Regex", "only GPT-2's split pattern is supported, got '" + regex->get<std::string>() + "'");
  std::string behavior = r.string_of(r.require(list[0], "behavior", split_where), split_where + ".behavior");
  if (behavior != "Isolated") r.fail(split_where + ".behavior", "only Isolated is supported, got '" + behavior + "'");
  if (r.bool_member(list[0], "invert", false, split_where)) r.fail(split_where + ".invert", "only false is supported");
  const std::string bl_where = "pre_tokenizer.pretokenizers[1]";
  std::string bl_type = r.type_of(list[1], bl_where);
  if (bl_type != "ByteLevel") r.fail(bl_where + ".type", "expected ByteLevel, got '" + bl_type + "'");
  parse_byte_level(r, list[1], bl_where, spec);
  if (spec.add_prefix_space) r.fail(bl_where + ".add_prefix_space", "true after a Split is not supported");
  spec.pre_form = PreTokenizerForm::kSplitThenByteLevel;
}

void parse_decoder(const Reader& r, const json& doc) {
  const json* dec = r.member(doc, "decoder");
  if (dec == nullptr || dec->is_null()) r.fail("decoder", "missing; byte-level BPE needs the ByteLevel decoder");
  std::string type = r.type_of(*dec, "decoder");
  if (type == "ByteLevel") return;
  if (type == "Sequence") {
    const json& list = r.require(*dec, "decoders", "decoder");
    r.expect_array(list, "decoder.decoders");
    if (list.size() == 1 && r.type_of(list[0], "decoder.decoders[0]") == "ByteLevel") return;
    r.fail("decoder.decoders", "only a single ByteLevel decoder is supported");
  }
  r.fail("decoder.type", "'" + type + "' is not supported (only ByteLevel)");
}

void parse_normalizer(const Reader& r, const json& doc) {
  const json* norm = r.member(doc, "normalizer");
  if (norm == nullptr || norm->is_null()) return;
  std::string type = r.type_of(*norm, "normalizer");
  if (type == "Sequence") {
    const json& list = r.require(*norm, "normalizers", "normalizer");
    r.expect_array(list, "normalizer.normalizers");
    if (list.empty()) return;
    r.fail("normalizer.normalizers[0]", "type '" + r.type_of(list[0], "normalizer.normalizers[0]") +
                                            "' is not supported (distllm implements no normalizer)");
  }
  r.fail("normalizer.type", "'" + type + "' is not supported (distllm implements no normalizer)");
}

// A copy with "type" first in every object, then the other keys sorted: parsing
// loses the file's key order, and this keeps what to_json writes stable.
ordered_json type_first(const json& v) {
  if (v.is_array()) {
    ordered_json out = ordered_json::array();
    for (const json& e : v) out.push_back(type_first(e));
    return out;
  }
  if (!v.is_object()) return ordered_json::parse(v.dump());
  ordered_json out = ordered_json::object();
  if (v.contains("type")) out["type"] = type_first(v["type"]);
  for (auto it = v.begin(); it != v.end(); ++it)
    if (it.key() != "type") out[it.key()] = type_first(it.value());
  return out;
}

void parse_post_processor(const Reader& r, const json& doc, TokenizerSpec& spec) {
  const json* pp = r.member(doc, "post_processor");
  if (pp == nullptr || pp->is_null()) return;
  r.expect_object(*pp, "post_processor");
  spec.post_processor = type_first(*pp);
  // A template such as "<s> $A" names the model's BOS token.
  const json* type = r.member(*pp, "type");
  const json* single = r.member(*pp, "single");
  if (type && type->is_string() && *type == "TemplateProcessing" && single && single->is_array() && !single->empty()) {
    const json& first = (*single)[0];
    if (first.is_object() && first.contains("SpecialToken") && first["SpecialToken"].is_object()) {
      const json& st = first["SpecialToken"];
      if (st.contains("id") && st["id"].is_string()) spec.template_bos_token = st["id"].get<std::string>();
    }
  }
}

void parse_added_tokens(const Reader& r, const json& doc, TokenizerSpec& spec) {
  const json* list = r.member(doc, "added_tokens");
  if (list == nullptr || list->is_null()) return;
  r.expect_array(*list, "added_tokens");
  for (size_t i = 0; i < list->size(); ++i) {
    const std::string where = strprintf("added_tokens[%zu]", i);
    const json& e = (*list)[i];
    r.expect_object(e, where);
    AddedToken a;
    int64_t id = r.integer_of(r.require(e, "id", where), where + ".id");
    if (id < 0 || id > INT32_MAX) r.fail(where + ".id", strprintf("%lld is out of range", (long long)id));
    a.id = static_cast<int32_t>(id);
    a.content = r.string_of(r.require(e, "content", where), where + ".content");
    a.special = r.bool_member(e, "special", false, where);
    a.single_word = r.bool_member(e, "single_word", false, where);
    a.lstrip = r.bool_member(e, "lstrip", false, where);
    a.rstrip = r.bool_member(e, "rstrip", false, where);
    a.normalized = r.bool_member(e, "normalized", true, where);
    spec.added.push_back(std::move(a));
    spec.added_where.push_back(spec.origin + ": " + where);
  }
}

void parse_model(const Reader& r, const json& doc, TokenizerSpec& spec) {
  const json& model = r.require(doc, "model", "");
  r.expect_object(model, "model");
  if (const json* type = r.member(model, "type")) {
    std::string t = r.string_of(*type, "model.type");
    if (t != "BPE") r.fail("model.type", "'" + t + "' is not supported (only BPE)");
  }
  if (const json* d = r.member(model, "dropout"); d && !d->is_null() && !(d->is_number() && d->get<double>() == 0.0))
    r.fail("model.dropout", "BPE dropout is not supported (must be null)");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    const json* v = r.member(model, key);
    if (v && !v->is_null() && !(v->is_string() && v->get<std::string>().empty()))
      r.fail(std::string("model.") + key, "not supported (must be null or \"\")");
  }
  if (r.bool_member(model, "byte_fallback", false, "model"))
    r.fail("model.byte_fallback", "not supported (byte-level BPE covers every byte without it)");
  if (const json* unk = r.member(model, "unk_token"); unk && !unk->is_null())
    spec.unk_token = r.string_of(*unk, "model.unk_token");
  spec.fuse_unk = r.bool_member(model, "fuse_unk", false, "model");
  spec.ignore_merges = r.bool_member(model, "ignore_merges", false, "model");

  const json& vocab = r.require(model, "vocab", "model");
  r.expect_object(vocab, "model.vocab");
  spec.vocab.reserve(vocab.size());
  for (auto it = vocab.begin(); it != vocab.end(); ++it)
    spec.vocab.emplace_back(it.key(), r.integer_of(it.value(), "model.vocab[\"" + utf8_sanitize(it.key()) + "\"]"));

  const json* merges = r.member(model, "merges");
  if (merges == nullptr || merges->is_null()) return;
  r.expect_array(*merges, "model.merges");
  spec.merges.reserve(merges->size());
  for (size_t i = 0; i < merges->size(); ++i) {
    const json& m = (*merges)[i];
    const std::string where = strprintf("model.merges[%zu]", i);
    if (m.is_string()) {  // "left right"
      const std::string& s = m.get_ref<const std::string&>();
      size_t space = s.find(' ');
      if (space == std::string::npos || space == 0 || space + 1 == s.size() || s.find(' ', space + 1) != std::string::npos)
        r.fail(where, "expected two tokens separated by one space, got '" + s + "'");
      spec.merges.emplace_back(s.substr(0, space), s.substr(space + 1));
    } else if (m.is_array()) {  // ["left", "right"]
      if (m.size() != 2) r.fail(where, strprintf("expected a pair of tokens, got %zu entries", m.size()));
      std::string a = r.string_of(m[0], where + "[0]");
      std::string b = r.string_of(m[1], where + "[1]");
      if (a.empty() || b.empty()) r.fail(where, "a merge of an empty token");
      spec.merges.emplace_back(std::move(a), std::move(b));
    } else {
      r.fail(where, std::string("expected a string or a pair, got ") + Reader::type_name(m));
    }
  }
}

std::string read_whole_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  DL_CHECK(in.good(), "cannot open %s: %s", path.c_str(), std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  DL_CHECK(!in.bad(), "cannot read %s", path.c_str());
  return ss.str();
}

}  // namespace

TokenizerSpec parse_tokenizer_json(const std::string& text, const std::string& origin) {
  TokenizerSpec spec;
  spec.origin = origin;
  spec.vocab_where = origin + ": model.vocab";
  spec.merge_where = [origin](size_t i) { return strprintf("%s: model.merges[%zu]", origin.c_str(), i); };
  size_t bad = utf8_first_invalid(text);
  DL_CHECK(bad == text.size(), "%s: not UTF-8 (byte 0x%02X at offset %zu)", origin.c_str(),
           static_cast<unsigned char>(text[bad]), bad);
  check_depth(text, origin);
  json doc;
  try {
    doc = json::parse(text);
  } catch (const json::exception& e) {
    std::string what = e.what();
    size_t bracket = what.find("] ");  // drop nlohmann's "[json.exception.parse_error.101] "
    throw_error(origin + ": not valid JSON: " + (bracket == std::string::npos ? what : what.substr(bracket + 2)));
  }
  Reader r(origin);
  r.expect_object(doc, "top level");
  parse_model(r, doc, spec);
  parse_added_tokens(r, doc, spec);
  parse_normalizer(r, doc);
  parse_pre_tokenizer(r, doc, spec);
  parse_decoder(r, doc);
  parse_post_processor(r, doc, spec);
  return spec;
}

Tokenizer Tokenizer::from_json(const std::string& json_text, const std::string& origin) {
  return Tokenizer(build_tokenizer(parse_tokenizer_json(json_text, origin)));
}

Tokenizer Tokenizer::from_file(const std::string& path) { return from_json(read_whole_file(path), path); }

std::string Tokenizer::to_json() const {
  const TokenizerImpl& t = *impl_;
  ordered_json doc;
  doc["version"] = "1.0";
  doc["truncation"] = nullptr;
  doc["padding"] = nullptr;
  ordered_json added = ordered_json::array();
  std::vector<const AddedToken*> sorted;
  for (const AddedToken& a : t.added) sorted.push_back(&a);
  std::sort(sorted.begin(), sorted.end(), [](const AddedToken* a, const AddedToken* b) { return a->id < b->id; });
  for (const AddedToken* a : sorted) {
    ordered_json e;
    e["id"] = a->id;
    e["content"] = a->content;
    e["single_word"] = a->single_word;
    e["lstrip"] = a->lstrip;
    e["rstrip"] = a->rstrip;
    e["normalized"] = a->normalized;
    e["special"] = a->special;
    added.push_back(std::move(e));
  }
  doc["added_tokens"] = std::move(added);
  doc["normalizer"] = nullptr;
  ordered_json byte_level;
  byte_level["type"] = "ByteLevel";
  byte_level["add_prefix_space"] = t.add_prefix_space;
  byte_level["trim_offsets"] = t.trim_offsets;
  byte_level["use_regex"] = t.use_regex;
  if (t.pre_form == PreTokenizerForm::kByteLevel) {
    doc["pre_tokenizer"] = byte_level;
  } else {
    ordered_json split;
    split["type"] = "Split";
    split["pattern"] = ordered_json{{"Regex", kGpt2Pattern}};
    split["behavior"] = "Isolated";
    split["invert"] = false;
    doc["pre_tokenizer"] = ordered_json{{"type", "Sequence"}, {"pretokenizers", ordered_json::array({split, byte_level})}};
  }
  doc["post_processor"] = t.post_processor;
  doc["decoder"] = ordered_json{{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}};
  ordered_json model;
  model["type"] = "BPE";
  model["dropout"] = nullptr;
  model["unk_token"] = t.unk_id ? ordered_json(t.token_string[*t.unk_id]) : ordered_json(nullptr);
  model["continuing_subword_prefix"] = nullptr;
  model["end_of_word_suffix"] = nullptr;
  model["fuse_unk"] = t.fuse_unk;
  model["byte_fallback"] = false;
  if (t.ignore_merges) model["ignore_merges"] = true;
  ordered_json vocab = ordered_json::object();
  {
    // Keys are unique: append to the underlying vector, skipping ordered_map's linear
    // search for an existing key (quadratic for a 50k-token vocab).
    auto& entries = static_cast<ordered_json::object_t::Container&>(vocab.get_ref<ordered_json::object_t&>());
    entries.reserve(t.token_string.size());
    for (size_t id = 0; id < t.token_string.size(); ++id)
      if (t.in_model[id]) entries.emplace_back(t.token_string[id], id);
  }
  model["vocab"] = std::move(vocab);
  // The "a b" form is what every version of Hugging Face tokenizers reads; it cannot
  // hold a token with a space, and then the ["a", "b"] form is written instead.
  bool spaced = false;
  for (const auto& [a, b] : t.merges)
    spaced = spaced || t.token_string[a].find(' ') != std::string::npos || t.token_string[b].find(' ') != std::string::npos;
  ordered_json merges = ordered_json::array();
  for (const auto& [a, b] : t.merges) {
    if (spaced) {
      merges.push_back(ordered_json::array({t.token_string[a], t.token_string[b]}));
    } else {
      merges.push_back(t.token_string[a] + " " + t.token_string[b]);
    }
  }
  model["merges"] = std::move(merges);
  doc["model"] = std::move(model);
  return doc.dump(2) + "\n";
}

void Tokenizer::save(const std::string& path) const {
  std::string text = to_json();
  std::string tmp = strprintf("%s.tmp.%d", path.c_str(), static_cast<int>(getpid()));
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  DL_CHECK(fd >= 0, "cannot create %s: %s", tmp.c_str(), std::strerror(errno));
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int err = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      throw_error(strprintf("cannot write %s: %s", tmp.c_str(), std::strerror(err)));
    }
    done += static_cast<size_t>(n);
  }
  bool synced = ::fsync(fd) == 0;
  int err = errno;
  ::close(fd);
  if (!synced) {
    ::unlink(tmp.c_str());
    throw_error(strprintf("cannot fsync %s: %s", tmp.c_str(), std::strerror(err)));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    err = errno;
    ::unlink(tmp.c_str());
    throw_error(strprintf("cannot rename %s to %s: %s", tmp.c_str(), path.c_str(), std::strerror(err)));
  }
  // Make the rename itself durable.
  std::string dir = path.find('/') == std::string::npos ? "." : path.substr(0, path.rfind('/') + 1);
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

}  // namespace distllm
