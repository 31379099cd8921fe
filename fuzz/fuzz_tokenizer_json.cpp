// libFuzzer target: tokenizer.json parsing, then use of whatever parsed.
//
// Any input must either load or fail with distllm::Error (a clear message); anything
// else escaping (another exception type, a crash, a sanitizer report) is a bug. A
// tokenizer that loads must encode and decode without crashing, round-trip bytes
// when it can, and survive to_json -> from_json unchanged.
#include <cstdint>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "distllm/base/error.h"
#include "distllm/tokenizer/tokenizer.h"
#include "distllm/tokenizer/utf8.h"

namespace {

void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "invariant broken: %s\n", what);
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using distllm::Tokenizer;
  std::string text(reinterpret_cast<const char*>(data), size);
  std::optional<Tokenizer> tok;
  try {
    tok = Tokenizer::from_json(text, "fuzz.json");
  } catch (const distllm::Error&) {
    return 0;
  }
  const std::string samples[] = {"Hello world, it's 2024!", " \t\n\n  x", "\xE4\xB8\xAD\xF0\x9F\x98\x80", "\xFF\xFE\x80 <s> a",
                                 std::string("\0ab", 3)};
  std::string json = tok->to_json();
  // Bytes come back exactly unless an unknown-token id, a white-space-stripping added
  // token, or an added prefix space is involved.
  nlohmann::json doc = nlohmann::json::parse(json);
  bool lossless = doc["model"]["unk_token"].is_null() && !doc["pre_tokenizer"].value("add_prefix_space", false);
  for (const auto& a : doc["added_tokens"]) lossless = lossless && !a["lstrip"].get<bool>() && !a["rstrip"].get<bool>();
  Tokenizer again = Tokenizer::from_json(json, "fuzz.json (written back)");
  check(again.to_json() == json, "to_json -> from_json -> to_json is stable");
  check(again.vocab_size() == tok->vocab_size(), "vocab size survives the round trip");
  for (const std::string& s : samples) {
    std::vector<int32_t> ids;
    try {
      ids = tok->encode(s);
    } catch (const distllm::Error&) {
      continue;  // e.g. a byte the vocabulary cannot encode
    }
    for (int32_t id : ids) check(id >= 0 && id < tok->vocab_size(), "encode returns ids in range");
    check(again.encode(s) == ids, "the written-back tokenizer encodes the same");
    std::string back = tok->decode(ids);
    distllm::IncrementalDecoder dec(*tok, /*skip_special=*/false);
    std::string streamed;
    for (int32_t id : ids) streamed += dec.push(id);
    streamed += dec.flush();
    if (lossless) check(back == s, "decode(encode(s)) == s");
    check(streamed == distllm::utf8_sanitize(back), "streaming decodes like decode + sanitize");
    try {
      (void)tok->encode(s, /*allow_special=*/false);  // special tokens' bytes may lack tokens
    } catch (const distllm::Error&) {
    }
  }
  for (int32_t id = 0; id < tok->vocab_size() && id < 512; ++id) (void)tok->token_bytes(id);
  return 0;
}
