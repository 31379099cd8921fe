#include "distllm/tokenizer/pre_tokenizer_chain.h"

#include "distllm/base/error.h"
#include "distllm/tokenizer/byte_level.h"
#include "distllm/tokenizer/pretokenizer.h"
#include "distllm/tokenizer/split.h"
#include "distllm/tokenizer/unicode.h"
#include "distllm/tokenizer/utf8.h"

namespace distllm {
namespace {

using json = nlohmann::json;

// Llama 3's and Qwen 2's split patterns (tiktoken's cl100k style).
constexpr const char* kLlama3Pattern =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"
    "\\s+(?!\\S)|\\s+";
constexpr const char* kQwen2Pattern =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"
    "\\s+(?!\\S)|\\s+";

// Per-thread buffers, one set per step of a chain: a step's buffers hold the pieces it
// is handing on while the later steps run.
struct StepBuffers {
  std::string text, mapped;
  std::vector<MatchSpan> matches, pieces;
};
StepBuffers& buffers(size_t step) {
  thread_local std::vector<std::unique_ptr<StepBuffers>> all;
  while (all.size() <= step) all.push_back(std::make_unique<StepBuffers>());
  return *all[step];
}

PieceFlags sub_flags(PieceFlags parent, size_t begin) {
  return begin == 0 ? parent : PieceFlags{false, true};
}

// Hands each span of `text` on, in order.
template <typename Forward>
void forward_spans(std::string_view text, const std::vector<MatchSpan>& spans, PieceFlags flags, Forward&& fwd) {
  for (const MatchSpan& s : spans) fwd(text.substr(s.begin, s.end - s.begin), sub_flags(flags, s.begin));
}

}  // namespace

class SplitStep : public PreTokenizerStep {
 public:
  SplitStep(std::unique_ptr<SplitPattern> pattern, SplitBehavior behavior, bool invert, bool gpt2)
      : pattern_(std::move(pattern)), behavior_(behavior), invert_(invert), gpt2_(gpt2) {}
  void run(const PreTokenizer& chain, size_t next, std::string_view text, PieceFlags flags,
           PieceSink& sink) const override {
    if (gpt2_ && behavior_ == SplitBehavior::kIsolated && !invert_) {  // its pieces are its matches
      gpt2_pretokenize(text, [&](std::string_view p) {
        forward(chain, next, p, sub_flags(flags, static_cast<size_t>(p.data() - text.data())), sink);
      });
      return;
    }
    StepBuffers& b = buffers(next - 1);
    b.matches.clear();
    b.pieces.clear();
    pattern_->find(text, b.matches);
    split_by_matches(text, b.matches, invert_, behavior_, b.pieces);
    forward_spans(text, b.pieces, flags, [&](std::string_view p, PieceFlags f) { forward(chain, next, p, f, sink); });
  }

 private:
  std::unique_ptr<SplitPattern> pattern_;
  SplitBehavior behavior_;
  bool invert_, gpt2_;
};

class ByteLevelStep : public PreTokenizerStep {
 public:
  ByteLevelStep(bool add_prefix_space, bool use_regex) : add_prefix_space_(add_prefix_space), use_regex_(use_regex) {}
  void set_last(bool last) { last_ = last; }
  void run(const PreTokenizer& chain, size_t next, std::string_view text, PieceFlags flags,
           PieceSink& sink) const override {
    StepBuffers& b = buffers(next - 1);
    if (add_prefix_space_ && flags.split_start && !text.empty() && text[0] != ' ') {
      b.text.assign(1, ' ');
      b.text.append(text);
      text = b.text;
    }
    auto emit = [&](std::string_view p, PieceFlags f) {
      if (last_) {  // the model maps the bytes itself
        forward(chain, next, p, f, sink);
      } else {
        b.mapped = bytes_to_byte_level(p);
        forward(chain, next, b.mapped, f, sink);
      }
    };
    if (use_regex_) {
      gpt2_pretokenize(text, [&](std::string_view p) { emit(p, sub_flags(flags, static_cast<size_t>(p.data() - text.data()))); });
    } else if (!text.empty()) {
      emit(text, flags);
    }
  }

 private:
  bool add_prefix_space_, use_regex_, last_ = false;
};

class MetaspaceStep : public PreTokenizerStep {
 public:
  enum class Prepend { kAlways, kFirst, kNever };
  MetaspaceStep(uint32_t replacement, Prepend prepend, bool split) : prepend_(prepend), split_(split) {
    utf8_append(replacement_, replacement);
  }
  void run(const PreTokenizer& chain, size_t next, std::string_view text, PieceFlags flags,
           PieceSink& sink) const override {
    StepBuffers& b = buffers(next - 1);
    b.text.clear();
    bool prepend = prepend_ == Prepend::kAlways ? flags.split_start
                   : prepend_ == Prepend::kFirst ? flags.text_start
                                                 : false;
    // The test is on the text after spaces became the replacement.
    bool starts_with_replacement = (!text.empty() && text[0] == ' ') || text.substr(0, replacement_.size()) == replacement_;
    if (prepend && !starts_with_replacement) b.text += replacement_;
    for (char c : text) {
      if (c == ' ') {
        b.text += replacement_;
      } else {
        b.text += c;
      }
    }
    std::string_view out = b.text;
    if (!split_) {
      if (!out.empty()) forward(chain, next, out, flags, sink);
      return;
    }
    b.matches.clear();
    b.pieces.clear();
    for (size_t pos = out.find(replacement_); pos != std::string_view::npos; pos = out.find(replacement_, pos + replacement_.size()))
      b.matches.push_back({pos, pos + replacement_.size()});
    split_by_matches(out, b.matches, false, SplitBehavior::kMergedWithNext, b.pieces);
    forward_spans(out, b.pieces, flags, [&](std::string_view p, PieceFlags f) { forward(chain, next, p, f, sink); });
  }

 private:
  std::string replacement_;
  Prepend prepend_;
  bool split_;
};

// Hugging Face's Whitespace: runs of \w and runs of [^\w\s]; white space is dropped.
class WhitespaceStep : public PreTokenizerStep {
 public:
  void run(const PreTokenizer& chain, size_t next, std::string_view text, PieceFlags flags,
           PieceSink& sink) const override {
    const auto* p = reinterpret_cast<const unsigned char*>(text.data());
    enum Kind { kSpace, kWord, kOther };
    auto kind_at = [&](size_t i, size_t* len) {
      Utf8Step step = utf8_step(p + i, text.size() - i);
      *len = step.kind == Utf8Step::kChar ? step.length : 1;
      uint32_t cp = step.kind == Utf8Step::kChar ? step.cp : 0xFFFD;
      return unicode_is_white_space(cp) ? kSpace : unicode_is_word(cp) ? kWord : kOther;
    };
    size_t i = 0;
    while (i < text.size()) {
      size_t len;
      Kind k = kind_at(i, &len);
      size_t begin = i;
      i += len;
      if (k == kSpace) continue;
      while (i < text.size()) {
        size_t l2;
        if (kind_at(i, &l2) != k) break;
        i += l2;
      }
      forward(chain, next, text.substr(begin, i - begin), sub_flags(flags, begin), sink);
    }
  }
};

namespace {

std::unique_ptr<SplitStep> char_split(bool (*test)(uint32_t), SplitBehavior behavior) {
  return std::make_unique<SplitStep>(SplitPattern::characters(test), behavior, false, false);
}

void parse_into(const JsonReader& r, const json& node, const std::string& where,
                std::vector<std::unique_ptr<PreTokenizerStep>>& steps) {
  std::string type = r.type_of(node, where);
  if (type == "Sequence") {
    const json& list = r.array_member(node, "pretokenizers", where);
    for (size_t i = 0; i < list.size(); ++i)
      parse_into(r, list[i], JsonReader::index(JsonReader::join(where, "pretokenizers"), i), steps);
  } else if (type == "ByteLevel") {
    const json& aps = r.require(node, "add_prefix_space", where);
    if (!aps.is_boolean())
      r.fail(JsonReader::join(where, "add_prefix_space"), std::string("expected a boolean, got ") + JsonReader::type_name(aps));
    r.bool_member(node, "trim_offsets", true, where);  // offsets only: checked, not used
    steps.push_back(std::make_unique<ByteLevelStep>(aps.get<bool>(), r.bool_member(node, "use_regex", true, where)));
  } else if (type == "Split") {
    const json& pattern = r.require(node, "pattern", where);
    const std::string pattern_where = JsonReader::join(where, "pattern");
    auto compiled = SplitPattern::from_json(r, pattern, pattern_where);
    bool gpt2 = pattern.is_object() && pattern.contains("Regex") && pattern["Regex"] == kGpt2SplitPattern;
    steps.push_back(std::make_unique<SplitStep>(std::move(compiled), read_split_behavior(r, node, "behavior", where),
                                                r.bool_member(node, "invert", false, where), gpt2));
  } else if (type == "Metaspace") {
    uint32_t replacement = r.char_member(node, "replacement", 0x2581, where);
    MetaspaceStep::Prepend prepend = MetaspaceStep::Prepend::kAlways;
    if (const json* scheme = r.member(node, "prepend_scheme"); scheme && !scheme->is_null()) {
      std::string s = r.string_of(*scheme, JsonReader::join(where, "prepend_scheme"));
      if (s == "always") prepend = MetaspaceStep::Prepend::kAlways;
      else if (s == "first") prepend = MetaspaceStep::Prepend::kFirst;
      else if (s == "never") prepend = MetaspaceStep::Prepend::kNever;
      else r.fail(JsonReader::join(where, "prepend_scheme"), std::string("expected always, first or never, got ") + quote_for_message(s));
    } else if (!r.bool_member(node, "add_prefix_space", true, where)) {  // files before prepend_scheme
      prepend = MetaspaceStep::Prepend::kNever;
    }
    steps.push_back(std::make_unique<MetaspaceStep>(replacement, prepend, r.bool_member(node, "split", true, where)));
  } else if (type == "Digits") {
    bool individual = r.bool_member(node, "individual_digits", false, where);
    steps.push_back(char_split(unicode_is_numeric, individual ? SplitBehavior::kIsolated : SplitBehavior::kContiguous));
  } else if (type == "Whitespace") {
    steps.push_back(std::make_unique<WhitespaceStep>());
  } else if (type == "WhitespaceSplit") {
    steps.push_back(char_split(unicode_is_white_space, SplitBehavior::kRemoved));
  } else if (type == "Punctuation") {
    SplitBehavior behavior = r.member(node, "behavior") ? read_split_behavior(r, node, "behavior", where)
                                                        : SplitBehavior::kIsolated;
    steps.push_back(char_split(unicode_is_punctuation, behavior));
  } else if (type == "BertPreTokenizer") {
    steps.push_back(char_split(unicode_is_white_space, SplitBehavior::kRemoved));
    steps.push_back(char_split(unicode_is_punctuation, SplitBehavior::kIsolated));
  } else if (type == "CharDelimiterSplit") {
    uint32_t delimiter = r.char_member(node, "delimiter", 0, where);
    if (delimiter == 0) r.fail(JsonReader::join(where, "delimiter"), "missing");
    std::string d;
    utf8_append(d, delimiter);
    steps.push_back(std::make_unique<SplitStep>(SplitPattern::literal(d), SplitBehavior::kRemoved, false, false));
  } else {
    r.fail(JsonReader::join(where, "type"),
           quote_for_message(type) + " is not supported (supported: ByteLevel, Split, Metaspace, Digits, Whitespace, WhitespaceSplit, "
               "Punctuation, CharDelimiterSplit, BertPreTokenizer, Sequence)");
  }
}

// The one Split of a [Split, ByteLevel] chain, when its pattern is `pattern`.
bool is_split_then_byte_level(const json& node, const char* pattern) {
  if (!node.is_object() || node.value("type", "") != "Sequence" || !node.contains("pretokenizers")) return false;
  const json& list = node["pretokenizers"];
  if (!list.is_array() || list.size() != 2) return false;
  const json& split = list[0];
  const json& bl = list[1];
  return split.value("type", "") == "Split" && split.contains("pattern") && split["pattern"].is_object() &&
         split["pattern"].value("Regex", "") == pattern && split.value("behavior", "") == "Isolated" &&
         !split.value("invert", false) && bl.value("type", "") == "ByteLevel" && !bl.value("add_prefix_space", true) &&
         !bl.value("use_regex", true);
}

}  // namespace

PreTokenizer::PreTokenizer() = default;
PreTokenizer::~PreTokenizer() = default;

std::unique_ptr<PreTokenizer> PreTokenizer::parse(const JsonReader& r, const json& node, const std::string& where) {
  std::unique_ptr<PreTokenizer> chain(new PreTokenizer());
  if (node.is_null()) return chain;
  parse_into(r, node, where, chain->steps_);
  if (!chain->steps_.empty()) {
    if (auto* bl = dynamic_cast<ByteLevelStep*>(chain->steps_.back().get())) {
      bl->set_last(true);
      chain->byte_level_output_ = true;
    }
  }
  bool lone_byte_level = node.value("type", "") == "ByteLevel" && node.value("use_regex", true);
  if (lone_byte_level || is_split_then_byte_level(node, kGpt2SplitPattern)) {
    chain->newline_cut_ = NewlineCut::kAfterPrintable;
  } else if (is_split_then_byte_level(node, kLlama3Pattern) || is_split_then_byte_level(node, kQwen2Pattern)) {
    chain->newline_cut_ = NewlineCut::kAfterLetter;
  }
  return chain;
}

void PreTokenizer::run(std::string_view text, PieceFlags flags, PieceSink& sink) const {
  run_from(0, text, flags, sink);
}

void PreTokenizer::run_from(size_t step, std::string_view text, PieceFlags flags, PieceSink& sink) const {
  if (text.empty()) return;
  if (step == steps_.size()) {
    sink.piece(text);
    return;
  }
  steps_[step]->run(*this, step + 1, text, flags, sink);
}

}  // namespace distllm
