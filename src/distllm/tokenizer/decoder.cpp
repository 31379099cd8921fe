#include "distllm/tokenizer/decoder.h"

#include "distllm/base/error.h"
#include "distllm/tokenizer/byte_level.h"
#include "distllm/tokenizer/split.h"
#include "distllm/tokenizer/utf8.h"

namespace distllm {

using json = nlohmann::json;

class DecoderStep {
 public:
  virtual ~DecoderStep() = default;
  // Hugging Face's decode_chain, on raw bytes.
  virtual void chain(std::vector<std::string>& tokens) const = 0;
  // The same step on one token; `first`: the token is the first this step sees.
  virtual void token(std::string& t, bool first) const = 0;
  bool joined_before = false;  // an earlier step made one token of all (every token is "first")
};

namespace {

std::string join(const std::vector<std::string>& tokens, std::string_view sep) {
  std::string out;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (i) out += sep;
    out += tokens[i];
  }
  return out;
}

class ByteLevelDecode : public DecoderStep {
 public:
  void chain(std::vector<std::string>& tokens) const override {
    for (std::string& t : tokens) token(t, false);
    tokens = {join(tokens, "")};
  }
  // A token made of byte-level characters stands for their bytes; any other (an added
  // token such as "<|im_start|>" is both) for its own text.
  void token(std::string& t, bool) const override {
    std::string bytes;
    if (byte_level_to_bytes(t, &bytes)) t.swap(bytes);
  }
};

// "<0xE2>" -> the byte 0xE2.
bool byte_token_value(std::string_view t, char* byte) {
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  if (t.size() != 6 || t.substr(0, 3) != "<0x" || t[5] != '>') return false;
  int hi = hex(t[3]), lo = hex(t[4]);
  if (hi < 0 || lo < 0) return false;
  *byte = static_cast<char>(hi * 16 + lo);
  return true;
}

class ByteFallbackDecode : public DecoderStep {
 public:
  void chain(std::vector<std::string>& tokens) const override {
    std::vector<std::string> out;
    std::string bytes;
    bool in_bytes = false;
    for (std::string& t : tokens) {
      char b;
      if (byte_token_value(t, &b)) {
        bytes += b;
        in_bytes = true;
        continue;
      }
      if (in_bytes) out.push_back(std::move(bytes));
      bytes.clear();
      in_bytes = false;
      out.push_back(std::move(t));
    }
    if (in_bytes) out.push_back(std::move(bytes));
    tokens.swap(out);
  }
  void token(std::string& t, bool) const override {
    char b;
    if (byte_token_value(t, &b)) t.assign(1, b);
  }
};

class FuseDecode : public DecoderStep {
 public:
  void chain(std::vector<std::string>& tokens) const override { tokens = {join(tokens, "")}; }
  void token(std::string&, bool) const override {}
};

// Splits t into characters (ill-formed bytes one each).
std::vector<std::string_view> characters(std::string_view t) {
  std::vector<std::string_view> out;
  const auto* p = reinterpret_cast<const unsigned char*>(t.data());
  for (size_t i = 0; i < t.size();) {
    Utf8Step step = utf8_step(p + i, t.size() - i);
    size_t len = step.kind == Utf8Step::kChar ? step.length : 1;
    out.push_back(t.substr(i, len));
    i += len;
  }
  return out;
}

class StripDecode : public DecoderStep {
 public:
  StripDecode(std::string content, size_t start, size_t stop) : content_(std::move(content)), start_(start), stop_(stop) {}
  void chain(std::vector<std::string>& tokens) const override {
    for (std::string& t : tokens) token(t, false);
  }
  void token(std::string& t, bool) const override {
    std::vector<std::string_view> chars = characters(t);
    size_t begin = 0, end = chars.size();
    while (begin < start_ && begin < chars.size() && chars[begin] == content_) ++begin;
    while (chars.size() - end < stop_ && end > begin && chars[end - 1] == content_) --end;
    std::string out;
    for (size_t i = begin; i < end; ++i) out += chars[i];
    t.swap(out);
  }
  const std::string& content() const { return content_; }
  size_t start() const { return start_; }
  size_t stop() const { return stop_; }

 private:
  std::string content_;
  size_t start_, stop_;
};

class ReplaceDecode : public DecoderStep {
 public:
  ReplaceDecode(std::unique_ptr<SplitPattern> pattern, std::string content, bool one_char)
      : pattern_(std::move(pattern)), content_(std::move(content)), one_char_(one_char) {}
  void chain(std::vector<std::string>& tokens) const override {
    for (std::string& t : tokens) token(t, false);
  }
  void token(std::string& t, bool) const override {
    std::vector<MatchSpan> matches;
    pattern_->find(t, matches);
    if (matches.empty()) return;
    std::string out;
    size_t prev = 0;
    for (const MatchSpan& m : matches) {
      out.append(t, prev, m.begin - prev);
      out += content_;
      prev = m.end;
    }
    out.append(t, prev, std::string::npos);
    t.swap(out);
  }
  bool one_char() const { return one_char_; }

 private:
  std::unique_ptr<SplitPattern> pattern_;
  std::string content_;
  bool one_char_;
};

class MetaspaceDecode : public DecoderStep {
 public:
  MetaspaceDecode(uint32_t replacement, bool drop_in_first) : drop_in_first_(drop_in_first) {
    utf8_append(replacement_, replacement);
  }
  void chain(std::vector<std::string>& tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) token(tokens[i], i == 0);
  }
  // The first token loses its replacement characters (the prefix the pre-tokenizer
  // added); elsewhere each stands for a space.
  void token(std::string& t, bool first) const override {
    std::string out;
    for (size_t i = 0; i < t.size();) {
      if (t.compare(i, replacement_.size(), replacement_) == 0) {
        if (!(first && drop_in_first_)) out += ' ';
        i += replacement_.size();
      } else {
        out += t[i++];
      }
    }
    t.swap(out);
  }

 private:
  std::string replacement_;
  bool drop_in_first_;
};

class BpeSuffixDecode : public DecoderStep {
 public:
  explicit BpeSuffixDecode(std::string suffix) : suffix_(std::move(suffix)) {}
  void chain(std::vector<std::string>& tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) replace(tokens[i], i + 1 == tokens.size() ? "" : " ");
  }
  void token(std::string& t, bool) const override { replace(t, " "); }

 private:
  void replace(std::string& t, std::string_view with) const {
    if (suffix_.empty()) return;
    std::string out;
    size_t prev = 0;
    for (size_t pos = t.find(suffix_); pos != std::string::npos; pos = t.find(suffix_, prev)) {
      out.append(t, prev, pos - prev);
      out += with;
      prev = pos + suffix_.size();
    }
    out.append(t, prev, std::string::npos);
    t.swap(out);
  }
  std::string suffix_;
};

// No decoder: Hugging Face joins the tokens with spaces.
class JoinWithSpaces : public DecoderStep {
 public:
  void chain(std::vector<std::string>& tokens) const override { tokens = {join(tokens, " ")}; }
  void token(std::string& t, bool first) const override {
    if (!first) t.insert(0, 1, ' ');
  }
};

void parse_into(const JsonReader& r, const json& node, const std::string& where,
                std::vector<std::unique_ptr<DecoderStep>>& steps) {
  std::string type = r.type_of(node, where);
  if (type == "Sequence") {
    const json& list = r.array_member(node, "decoders", where);
    for (size_t i = 0; i < list.size(); ++i)
      parse_into(r, list[i], JsonReader::index(JsonReader::join(where, "decoders"), i), steps);
  } else if (type == "ByteLevel") {
    steps.push_back(std::make_unique<ByteLevelDecode>());
  } else if (type == "ByteFallback") {
    steps.push_back(std::make_unique<ByteFallbackDecode>());
  } else if (type == "Fuse") {
    steps.push_back(std::make_unique<FuseDecode>());
  } else if (type == "Strip") {
    uint32_t c = r.char_member(node, "content", ' ', where);
    int64_t start = r.integer_member(node, "start", 0, where);
    int64_t stop = r.integer_member(node, "stop", 0, where);
    if (start < 0 || start > 1'000'000) r.fail(JsonReader::join(where, "start"), "out of range");
    if (stop < 0 || stop > 1'000'000) r.fail(JsonReader::join(where, "stop"), "out of range");
    std::string content;
    utf8_append(content, c);
    steps.push_back(std::make_unique<StripDecode>(content, static_cast<size_t>(start), static_cast<size_t>(stop)));
  } else if (type == "Replace") {
    const json& pattern = r.require(node, "pattern", where);
    auto compiled = SplitPattern::from_json(r, pattern, JsonReader::join(where, "pattern"));
    bool one_char = false;
    if (const json* s = pattern.is_object() ? r.member(pattern, "String") : nullptr; s && s->is_string()) {
      std::string text = s->get<std::string>();
      Utf8Step step = utf8_step(reinterpret_cast<const unsigned char*>(text.data()), text.size());
      one_char = step.kind == Utf8Step::kChar && step.length == text.size();
    }
    std::string content = r.string_of(r.require(node, "content", where), JsonReader::join(where, "content"));
    steps.push_back(std::make_unique<ReplaceDecode>(std::move(compiled), std::move(content), one_char));
  } else if (type == "Metaspace") {
    uint32_t replacement = r.char_member(node, "replacement", 0x2581, where);
    bool drop = true;
    if (const json* scheme = r.member(node, "prepend_scheme"); scheme && !scheme->is_null()) {
      std::string s = r.string_of(*scheme, JsonReader::join(where, "prepend_scheme"));
      if (s != "always" && s != "first" && s != "never")
        r.fail(JsonReader::join(where, "prepend_scheme"), std::string("expected always, first or never, got ") + quote_for_message(s));
      drop = s != "never";
    } else {
      drop = r.bool_member(node, "add_prefix_space", true, where);
    }
    steps.push_back(std::make_unique<MetaspaceDecode>(replacement, drop));
  } else if (type == "BPEDecoder") {
    steps.push_back(std::make_unique<BpeSuffixDecode>(r.string_member(node, "suffix", "</w>", where)));
  } else {
    r.fail(JsonReader::join(where, "type"),
           quote_for_message(type) + " is not supported (supported: ByteLevel, Metaspace, ByteFallback, Fuse, Strip, Replace, BPEDecoder, "
               "Sequence)");
  }
}

}  // namespace

Decoder::Decoder() = default;
Decoder::~Decoder() = default;

std::unique_ptr<Decoder> Decoder::parse(const JsonReader& r, const json& node, const std::string& where) {
  std::unique_ptr<Decoder> d(new Decoder());
  if (node.is_null()) {
    d->steps_.push_back(std::make_unique<JoinWithSpaces>());
  } else {
    parse_into(r, node, where, d->steps_);
  }
  // Reduce the chain to per-token text plus trimmed ends, where it allows that.
  bool joined = false, after_bytes = false;
  for (size_t i = 0; i < d->steps_.size(); ++i) {
    DecoderStep* s = d->steps_[i].get();
    s->joined_before = joined;
    if (!d->ends_.strip.empty()) d->by_token_ = false;  // a step after the trimmed ends
    if (dynamic_cast<ByteLevelDecode*>(s) || dynamic_cast<FuseDecode*>(s) || dynamic_cast<JoinWithSpaces*>(s)) {
      joined = true;
    } else if (dynamic_cast<ByteFallbackDecode*>(s)) {
      after_bytes = true;
    } else if (auto* strip = dynamic_cast<StripDecode*>(s)) {
      if (joined) {
        d->ends_ = {strip->content(), strip->start(), strip->stop()};
      } else if (after_bytes) {
        d->by_token_ = false;  // Hugging Face matches on the bytes' characters, not on each byte
      }
    } else if (auto* replace = dynamic_cast<ReplaceDecode*>(s)) {
      if (after_bytes || (joined && !replace->one_char())) d->by_token_ = false;
    } else if (dynamic_cast<MetaspaceDecode*>(s)) {
      if (after_bytes) d->by_token_ = false;
    } else {
      d->by_token_ = false;  // BPEDecoder: the last token is different
    }
  }
  return d;
}

std::string Decoder::decode(const std::vector<std::string_view>& tokens) const {
  std::vector<std::string> work(tokens.begin(), tokens.end());
  for (const auto& step : steps_) step->chain(work);
  return join(work, "");
}

std::string Decoder::token_text(std::string_view token, bool first) const {
  std::string t(token);
  for (const auto& step : steps_) {
    // Ends are trimmed by the caller, on the whole text.
    if (!ends_.strip.empty() && step->joined_before && dynamic_cast<StripDecode*>(step.get())) continue;
    step->token(t, step->joined_before || first);
  }
  return t;
}

}  // namespace distllm
