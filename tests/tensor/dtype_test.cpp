// The project's one dtype enum and bf16/f16 codec (tensor/dtype.h).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "distllm/base/error.h"
#include "distllm/base/rng.h"
#include "distllm/tensor/dtype.h"

namespace distllm {
namespace {

TEST(DType, NamesRoundTrip) {
  for (DType t : kAllDTypes) {
    EXPECT_EQ(parse_dtype(dtype_name(t)), t);
    EXPECT_EQ(parse_dtype(dtype_short_name(t)), t);
    EXPECT_EQ(parse_dtype(dtype_nccl_name(t)), t);
    EXPECT_EQ(dtype_from_name(dtype_name(t)), t);
  }
  EXPECT_EQ(parse_dtype("float32"), DType::kF32);
  EXPECT_EQ(parse_dtype("float16"), DType::kF16);
  EXPECT_EQ(dtype_of<float>(), DType::kF32);
  EXPECT_EQ(dtype_of<uint8_t>(), DType::kU8);
  try {
    parse_dtype("f8");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown dtype 'f8'"), std::string::npos) << e.what();
  }
}

TEST(DType, HalfConversions) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3F80);
  EXPECT_EQ(bf16_to_f32(0x3F80), 1.0f);
  // 1 + 2^-8 is a tie between 1 and 1 + 2^-7: rounds to even (1).
  EXPECT_EQ(f32_to_bf16(1.00390625f), 0x3F80);
  EXPECT_EQ(f32_to_bf16(1.01171875f), 0x3F82);  // 1 + 3*2^-8 ties up to even
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(NAN))));
  EXPECT_EQ(f32_to_f16(1.0f), 0x3C00);
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7BFF);
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7C00);     // rounds to inf
  EXPECT_EQ(f32_to_f16(5.960464477539063e-08f), 0x0001);  // smallest subnormal
  EXPECT_EQ(f32_to_f16(2.98023223876953125e-08f), 0x0000);  // exactly half of it: ties to even (0)
  EXPECT_EQ(f16_to_f32(0x0001), 5.960464477539063e-08f);
  EXPECT_EQ(f16_to_f32(0xC000), -2.0f);
  EXPECT_TRUE(std::isinf(f16_to_f32(0x7C00)));
  // Every f16 survives f16 -> f32 -> f16, NaN payloads included (a signaling NaN
  // comes back quiet, as IEEE conversions make it); bf16 likewise.
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const bool f16_nan = (h & 0x7C00) == 0x7C00 && (h & 0x3FF) != 0;
    const uint32_t f16_back = f16_nan ? (h | 0x200) : h;
    ASSERT_EQ(f32_to_f16(f16_to_f32(static_cast<uint16_t>(h))), f16_back) << h;
    const bool bf16_nan = (h & 0x7F80) == 0x7F80 && (h & 0x7F) != 0;
    const uint32_t bf16_back = bf16_nan ? (h | 0x40) : h;
    ASSERT_EQ(f32_to_bf16(bf16_to_f32(static_cast<uint16_t>(h))), bf16_back) << h;
  }
}

// Round to nearest even against a reference computed in double: the f16/bf16
// neighbours of x, and the nearer one (the even one on a tie).
TEST(DType, RoundingMatchesAReferenceOnRandomFloats) {
  CounterRng rng(42, 0, 0);
  for (int i = 0; i < 200000; ++i) {
    uint32_t bits = static_cast<uint32_t>(rng.next_u64());
    float x;
    std::memcpy(&x, &bits, 4);
    if (!std::isfinite(x)) continue;
    for (int kind = 0; kind < 2; ++kind) {
      const uint16_t got = kind == 0 ? f32_to_f16(x) : f32_to_bf16(x);
      auto decode = [&](uint16_t h) { return kind == 0 ? f16_to_f32(h) : bf16_to_f32(h); };
      const double v = decode(got);
      if (std::isinf(v)) continue;  // overflow: checked by the fixed cases
      // Neighbours in the ordered encoding of |x|.
      const uint16_t sign = got & 0x8000;
      const uint16_t mag = got & 0x7FFF;
      const double below = mag > 0 ? std::fabs(decode(static_cast<uint16_t>(sign | (mag - 1)))) : -1.0;
      const double above = std::fabs(decode(static_cast<uint16_t>(sign | (mag + 1))));
      const double ax = std::fabs(static_cast<double>(x)), av = std::fabs(v);
      const double err = std::fabs(ax - av);
      if (below >= 0) {
        ASSERT_LE(err, std::fabs(ax - below)) << x << " kind " << kind;
      }
      if (std::isfinite(above)) {
        ASSERT_LE(err, std::fabs(above - ax)) << x << " kind " << kind;
      }
      if (below >= 0 && err == std::fabs(ax - below) && below != av) {
        ASSERT_EQ(mag & 1, 0) << x << " tie must go to even";
      }
    }
  }
}

TEST(DType, FirstNonFiniteFindsTheFirstNaNOrInfinityInEveryFloatDtype) {
  const size_t n = 300000;  // several parallel chunks
  std::vector<float> f32(n, 1.5f);
  std::vector<double> f64(n, -2.0);
  std::vector<uint16_t> bf16(n, f32_to_bf16(3.0f)), f16(n, f32_to_f16(3.0f));
  EXPECT_EQ(first_non_finite(DType::kF32, f32.data(), n), -1);
  EXPECT_EQ(first_non_finite(DType::kF64, f64.data(), n), -1);
  EXPECT_EQ(first_non_finite(DType::kBF16, bf16.data(), n), -1);
  EXPECT_EQ(first_non_finite(DType::kF16, f16.data(), n), -1);
  f32[200001] = std::numeric_limits<float>::infinity();
  f32[250000] = std::nanf("");
  f64[7] = -std::numeric_limits<double>::infinity();
  bf16[123456] = f32_to_bf16(std::nanf(""));
  f16[299999] = f32_to_f16(1e9f);  // overflows f16's range: infinity
  EXPECT_EQ(first_non_finite(DType::kF32, f32.data(), n), 200001);
  EXPECT_EQ(first_non_finite(DType::kF64, f64.data(), n), 7);
  EXPECT_EQ(first_non_finite(DType::kBF16, bf16.data(), n), 123456);
  EXPECT_EQ(first_non_finite(DType::kF16, f16.data(), n), 299999);
  // The largest finite values are finite.
  const float big = std::numeric_limits<float>::max();
  EXPECT_EQ(first_non_finite(DType::kF32, &big, 1), -1);
  const std::vector<int32_t> ints(10, -1);
  EXPECT_EQ(first_non_finite(DType::kI32, ints.data(), ints.size()), -1);
}

}  // namespace
}  // namespace distllm
