// The sampler never picks a token from logits it cannot trust: +inf or NaN, from
// the model or made by the sampling parameters, is a clear error for that request,
// never a silent choice (a softmax over +inf is NaN everywhere, and the draw then
// fell on the last candidate: often EOS, a "stop" after one token).
#include <gtest/gtest.h>

#include <limits>
#include <string>
#include <vector>

#include "distllm/base/error.h"
#include "distllm/serve/sampler.h"

namespace distllm::serve {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

std::string error_of(std::span<const float> logits, const SamplingParams& p, const SequenceContext& ctx = {}) {
  SamplerScratch s;
  try {
    sample_token(logits, p, 0, s, ctx);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(SamplerNonFinite, PlusInfinityFromTheModelIsAnError) {
  std::vector<float> l{0.5f, kInf, 1.0f, -kInf};
  for (float t : {0.0f, 1.0f}) {
    SamplingParams p;
    p.temperature = t;
    EXPECT_EQ(error_of(l, p), "model produced +inf logits") << "temperature " << t;
  }
  // -inf alone is a token the model rules out: fine.
  SamplingParams p;
  std::vector<float> ok{0.5f, -kInf, 1.0f};
  EXPECT_EQ(error_of(ok, p), "");
}

TEST(SamplerNonFinite, PenaltiesThatMakeLogitsInfiniteAreAnError) {
  std::vector<float> l{2.0f, 1.0f, -1.0f, 0.5f};
  const std::vector<int32_t> prompt{0, 2};
  SequenceContext ctx;
  ctx.prompt = prompt;
  // 2 / 1e-40 overflows to +inf.
  SamplingParams p;
  p.repetition_penalty = 1e-40f;
  std::string e = error_of(l, p, ctx);
  EXPECT_NE(e.find("+inf"), std::string::npos) << e;
  EXPECT_NE(e.find("repetition_penalty"), std::string::npos) << e;
  // 0 (what 1e-300 becomes as a float) times a masked -inf is NaN.
  const std::vector<uint32_t> mask{0b1101u};  // token 1 not allowed
  ctx.allowed = mask;
  const std::vector<int32_t> seen{1};
  ctx.prompt = seen;
  p.repetition_penalty = 0.0f;
  e = error_of(l, p, ctx);
  EXPECT_NE(e.find("NaN"), std::string::npos) << e;
  // The smallest accepted penalty keeps ordinary logits finite.
  ctx = {};
  ctx.prompt = prompt;
  p.repetition_penalty = kMinRepetitionPenalty;
  std::vector<float> big{30.0f, 1.0f, -30.0f, 0.5f};
  EXPECT_EQ(error_of(big, p, ctx), "");
}

}  // namespace
}  // namespace distllm::serve
