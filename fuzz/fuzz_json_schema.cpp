// Fuzzes the structured-output compiler: the first byte picks the front end (JSON
// Schema, GBNF, regex, choice list), the rest is its text. Compiling and then a few
// masked matching steps must never crash, hang or exhaust memory; bad input may
// only throw GrammarError.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "distllm/serve/structured/structured.h"

namespace {

distllm::structured::GrammarCompiler& compiler() {
  // Every single byte plus a few multi-byte tokens that cross rule boundaries.
  static distllm::structured::GrammarCompiler c = [] {
    std::vector<std::string> tokens;
    for (int b = 0; b < 256; ++b) tokens.push_back(std::string(1, static_cast<char>(b)));
    for (const char* t : {"\":", "\",", "{\"", "}}", "ab", "12", "null", "true", ", \"", "\xC3\xA9", ""})
      tokens.push_back(t);
    tokens.push_back("<eos>");
    return distllm::structured::GrammarCompiler(tokens, static_cast<int32_t>(tokens.size() - 1), 4);
  }();
  return c;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace distllm::structured;
  if (size == 0 || size > 4096) return 0;
  std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  GrammarSpec spec;
  switch (data[0] % 4) {
    case 0: spec = GrammarSpec::json_schema(text); break;
    case 1: spec = GrammarSpec::gbnf(text); break;
    case 2: spec = GrammarSpec::regex(text); break;
    default: spec = {GrammarKind::kChoice, text}; break;
  }
  try {
    auto g = compiler().compile(spec);
    GrammarMatcher m(g);
    std::vector<uint32_t> mask(m.mask_words());
    // Walk a few steps, choosing tokens by the input bytes.
    for (size_t step = 0; step < 16 && !m.is_terminated(); ++step) {
      m.fill_next_token_bitmask(mask);
      std::vector<int32_t> allowed;
      for (size_t t = 0; t < g->vocab_size(); ++t)
        if ((mask[t / 32] >> (t % 32)) & 1) allowed.push_back(static_cast<int32_t>(t));
      if (allowed.empty()) break;
      int32_t t = allowed[data[step % size] % allowed.size()];
      if (!m.accept_token(t)) std::abort();  // the mask allowed it
    }
    if (m.num_steps() > 2) m.rollback(2);
  } catch (const GrammarError&) {
  }
  return 0;
}
