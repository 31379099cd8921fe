#include "distllm/tokenizer/normalizer.h"

#include "distllm/base/error.h"
#include "distllm/tokenizer/split.h"
#include "distllm/tokenizer/unicode.h"
#include "distllm/tokenizer/utf8.h"

namespace distllm {
namespace {

using json = nlohmann::json;

class UnicodeForm : public NormalizerStep {
 public:
  explicit UnicodeForm(NormalForm form) : form_(form) {}
  void apply(std::string& text, std::string& scratch) const override {
    // ASCII is in every normal form, and text below U+0300 is in NFC (lead bytes
    // below 0xCC); ICU checks the rest before copying it.
    const unsigned char limit = form_ == NormalForm::kNFC ? 0xCC : 0x80;
    bool plain = true;
    for (unsigned char c : text) plain = plain && c < limit;
    if (plain) return;
    scratch.clear();
    unicode_normalize(form_, text, scratch);
    text.swap(scratch);
  }

 private:
  NormalForm form_;
};

class Lowercase : public NormalizerStep {
 public:
  void apply(std::string& text, std::string& scratch) const override {
    bool ascii = true;
    for (unsigned char c : text) ascii = ascii && c < 0x80;
    if (ascii) {
      for (char& c : text)
        if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
      return;
    }
    scratch.clear();
    unicode_lowercase(text, scratch);
    text.swap(scratch);
  }
};

// Length of the white-space character starting at text[i], or 0.
size_t white_space_at(std::string_view text, size_t i) {
  Utf8Step step = utf8_step(reinterpret_cast<const unsigned char*>(text.data()) + i, text.size() - i);
  return step.kind == Utf8Step::kChar && unicode_is_white_space(step.cp) ? step.length : 0;
}

class Strip : public NormalizerStep {
 public:
  Strip(bool left, bool right) : left_(left), right_(right) {}
  void apply(std::string& text, std::string&) const override {
    if (right_) {
      // Find the start of the trailing run of white space.
      size_t end = 0;
      for (size_t i = 0; i < text.size();) {
        size_t len = white_space_at(text, i);
        if (len == 0) {
          Utf8Step step = utf8_step(reinterpret_cast<const unsigned char*>(text.data()) + i, text.size() - i);
          i += step.kind == Utf8Step::kChar ? step.length : 1;
          end = i;
        } else {
          i += len;
        }
      }
      text.resize(end);
    }
    if (left_) {
      size_t begin = 0;
      while (begin < text.size()) {
        size_t len = white_space_at(text, begin);
        if (len == 0) break;
        begin += len;
      }
      text.erase(0, begin);
    }
  }

 private:
  bool left_, right_;
};

class StripAccents : public NormalizerStep {
 public:
  void apply(std::string& text, std::string& scratch) const override {
    scratch.clear();
    const auto* p = reinterpret_cast<const unsigned char*>(text.data());
    for (size_t i = 0; i < text.size();) {
      Utf8Step step = utf8_step(p + i, text.size() - i);
      size_t len = step.kind == Utf8Step::kChar ? step.length : 1;
      if (step.kind != Utf8Step::kChar || !unicode_is_mark(step.cp)) scratch.append(text, i, len);
      i += len;
    }
    text.swap(scratch);
  }
};

class Replace : public NormalizerStep {
 public:
  Replace(std::unique_ptr<SplitPattern> pattern, std::string content)
      : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void apply(std::string& text, std::string& scratch) const override {
    thread_local std::vector<MatchSpan> matches;
    matches.clear();
    pattern_->find(text, matches);
    if (matches.empty()) return;
    scratch.clear();
    size_t prev = 0;
    for (const MatchSpan& m : matches) {
      scratch.append(text, prev, m.begin - prev);
      scratch += content_;
      prev = m.end;
    }
    scratch.append(text, prev, std::string::npos);
    text.swap(scratch);
  }

 private:
  std::unique_ptr<SplitPattern> pattern_;
  std::string content_;
};

// Prepend / Append: only to text that is not empty.
class Affix : public NormalizerStep {
 public:
  Affix(std::string affix, bool front) : affix_(std::move(affix)), front_(front) {}
  void apply(std::string& text, std::string&) const override {
    if (text.empty()) return;
    if (front_) {
      text.insert(0, affix_);
    } else {
      text += affix_;
    }
  }

 private:
  std::string affix_;
  bool front_;
};

void parse_into(const JsonReader& r, const json& node, const std::string& where,
                std::vector<std::unique_ptr<NormalizerStep>>& steps, bool& local) {
  std::string type = r.type_of(node, where);
  if (type == "Sequence") {
    const json& list = r.array_member(node, "normalizers", where);
    for (size_t i = 0; i < list.size(); ++i)
      parse_into(r, list[i], JsonReader::index(JsonReader::join(where, "normalizers"), i), steps, local);
  } else if (type == "NFC") {
    steps.push_back(std::make_unique<UnicodeForm>(NormalForm::kNFC));
  } else if (type == "NFD") {
    steps.push_back(std::make_unique<UnicodeForm>(NormalForm::kNFD));
  } else if (type == "NFKC") {
    steps.push_back(std::make_unique<UnicodeForm>(NormalForm::kNFKC));
  } else if (type == "NFKD") {
    steps.push_back(std::make_unique<UnicodeForm>(NormalForm::kNFKD));
  } else if (type == "Lowercase") {
    steps.push_back(std::make_unique<Lowercase>());
  } else if (type == "StripAccents") {
    steps.push_back(std::make_unique<StripAccents>());
  } else if (type == "Strip") {
    steps.push_back(std::make_unique<Strip>(r.bool_member(node, "strip_left", true, where),
                                            r.bool_member(node, "strip_right", true, where)));
    local = false;
  } else if (type == "Replace") {
    auto pattern = SplitPattern::from_json(r, r.require(node, "pattern", where), JsonReader::join(where, "pattern"));
    std::string content = r.string_of(r.require(node, "content", where), JsonReader::join(where, "content"));
    steps.push_back(std::make_unique<Replace>(std::move(pattern), std::move(content)));
    local = false;  // a pattern may span a line break
  } else if (type == "Prepend" || type == "Append") {
    const char* key = type == "Prepend" ? "prepend" : "append";
    std::string affix = r.string_of(r.require(node, key, where), JsonReader::join(where, key));
    steps.push_back(std::make_unique<Affix>(std::move(affix), type == "Prepend"));
    local = false;
  } else {
    r.fail(JsonReader::join(where, "type"),
           quote_for_message(type) + " is not supported (supported: NFC, NFD, NFKC, NFKD, Lowercase, Strip, StripAccents, Replace, "
               "Prepend, Append, Sequence)");
  }
}

}  // namespace

std::unique_ptr<Normalizer> Normalizer::parse(const JsonReader& r, const json& node, const std::string& where) {
  if (node.is_null()) return nullptr;
  auto n = std::make_unique<Normalizer>();
  parse_into(r, node, where, n->steps_, n->local_at_newlines_);
  if (n->steps_.empty()) return nullptr;  // an empty Sequence
  return n;
}

void Normalizer::normalize(std::string_view text, std::string& out) const {
  thread_local std::string scratch;
  out.assign(text);
  for (const auto& step : steps_) step->apply(out, scratch);
}

}  // namespace distllm
