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
#include "distllm/tokenizer/json_reader.h"
#include "distllm/tokenizer/tokenizer_impl.h"
#include "distllm/tokenizer/utf8.h"

namespace distllm {
namespace {

using json = nlohmann::json;
using ordered_json = nlohmann::ordered_json;

constexpr int kMaxJsonDepth = 256;

using Reader = JsonReader;

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

// A pipeline part (normalizer, ...) as the file has it; absent is null.
json part(const Reader& r, const json& doc, const char* key) {
  const json* v = r.member(doc, key);
  if (v == nullptr || v->is_null()) return nullptr;
  r.expect_object(*v, key);
  return *v;
}

void parse_added_tokens(const Reader& r, const json& doc, TokenizerSpec& spec) {
  const json* list = r.member(doc, "added_tokens");
  if (list == nullptr || list->is_null()) return;
  r.expect_array(*list, "added_tokens");
  for (size_t i = 0; i < list->size(); ++i) {
    const std::string where = strprintf("added_tokens[%zu]", i);
    const json& e = (*list)[i];
    r.expect_object(e, where);
    r.known_fields(e, {"id", "content", "special", "single_word", "lstrip", "rstrip", "normalized"}, where);
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
  r.known_fields(model, {"type", "dropout", "unk_token", "continuing_subword_prefix", "end_of_word_suffix", "fuse_unk",
                         "byte_fallback", "ignore_merges", "vocab", "merges"}, "model");
  if (const json* type = r.member(model, "type")) {
    std::string t = r.string_of(*type, "model.type");
    if (t != "BPE") r.fail("model.type", quote_for_message(t) + " is not supported (only BPE)");
  }
  if (const json* d = r.member(model, "dropout"); d && !d->is_null() && !(d->is_number() && d->get<double>() == 0.0))
    r.fail("model.dropout", "BPE dropout is not supported (must be null)");
  BpeModelSpec& m = spec.model;
  m.continuing_subword_prefix = r.string_member(model, "continuing_subword_prefix", "", "model");
  m.end_of_word_suffix = r.string_member(model, "end_of_word_suffix", "", "model");
  m.byte_fallback = r.bool_member(model, "byte_fallback", false, "model");
  if (const json* unk = r.member(model, "unk_token"); unk && !unk->is_null())
    m.unk_token = r.string_of(*unk, "model.unk_token");
  m.fuse_unk = r.bool_member(model, "fuse_unk", false, "model");
  m.ignore_merges = r.bool_member(model, "ignore_merges", false, "model");

  const json& vocab = r.require(model, "vocab", "model");
  r.expect_object(vocab, "model.vocab");
  spec.vocab.reserve(vocab.size());
  for (auto it = vocab.begin(); it != vocab.end(); ++it)
    spec.vocab.emplace_back(it.key(), r.integer_of(it.value(), "model.vocab[\"" + utf8_sanitize(it.key()) + "\"]"));

  const json* merges = r.member(model, "merges");
  if (merges == nullptr || merges->is_null()) return;
  r.expect_array(*merges, "model.merges");
  spec.model.merges.reserve(merges->size());
  for (size_t i = 0; i < merges->size(); ++i) {
    const json& m = (*merges)[i];
    const std::string where = strprintf("model.merges[%zu]", i);
    if (m.is_string()) {  // "left right"
      const std::string& s = m.get_ref<const std::string&>();
      size_t space = s.find(' ');
      if (space == std::string::npos || space == 0 || space + 1 == s.size() || s.find(' ', space + 1) != std::string::npos)
        r.fail(where, "expected two tokens separated by one space, got '" + s + "'");
      spec.model.merges.emplace_back(s.substr(0, space), s.substr(space + 1));
    } else if (m.is_array()) {  // ["left", "right"]
      if (m.size() != 2) r.fail(where, strprintf("expected a pair of tokens, got %zu entries", m.size()));
      std::string a = r.string_of(m[0], where + "[0]");
      std::string b = r.string_of(m[1], where + "[1]");
      if (a.empty() || b.empty()) r.fail(where, "a merge of an empty token");
      spec.model.merges.emplace_back(std::move(a), std::move(b));
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
  spec.model.merge_where = [origin](size_t i) { return strprintf("%s: model.merges[%zu]", origin.c_str(), i); };
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
  r.known_fields(doc, {"version", "truncation", "padding", "added_tokens", "normalizer", "pre_tokenizer",
                       "post_processor", "decoder", "model"}, "");
  parse_model(r, doc, spec);
  parse_added_tokens(r, doc, spec);
  spec.normalizer = part(r, doc, "normalizer");
  spec.pre_tokenizer = part(r, doc, "pre_tokenizer");
  spec.post_processor = part(r, doc, "post_processor");
  spec.decoder = part(r, doc, "decoder");
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
  doc["normalizer"] = type_first(t.normalizer_json);
  doc["pre_tokenizer"] = type_first(t.pre_tokenizer_json);
  doc["post_processor"] = type_first(t.post_processor_json);
  doc["decoder"] = type_first(t.decoder_json);
  const BpeModel& m = *t.model;
  ordered_json model;
  model["type"] = "BPE";
  model["dropout"] = nullptr;
  model["unk_token"] = m.unk_id() ? ordered_json(t.token_string[*m.unk_id()]) : ordered_json(nullptr);
  model["continuing_subword_prefix"] =
      m.continuing_subword_prefix().empty() ? ordered_json(nullptr) : ordered_json(m.continuing_subword_prefix());
  model["end_of_word_suffix"] = m.end_of_word_suffix().empty() ? ordered_json(nullptr) : ordered_json(m.end_of_word_suffix());
  model["fuse_unk"] = m.fuse_unk();
  model["byte_fallback"] = m.byte_fallback();
  if (m.ignore_merges()) model["ignore_merges"] = true;
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
  for (const auto& [a, b] : m.merges())
    spaced = spaced || t.token_string[a].find(' ') != std::string::npos || t.token_string[b].find(' ') != std::string::npos;
  ordered_json merges = ordered_json::array();
  for (const auto& [a, b] : m.merges()) {
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
