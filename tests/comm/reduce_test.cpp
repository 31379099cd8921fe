#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "distllm/base/cpu.h"
#include "distllm/base/error.h"
#include "distllm/base/rng.h"
#include "distllm/comm/reduce.h"
#include "distllm/comm/types.h"

namespace distllm::comm {
namespace {

TEST(CommTypes, ReduceOpNamesAndCollectiveDTypes) {
  for (ReduceOp op : kAllReduceOps) EXPECT_EQ(parse_reduce_op(reduce_op_name(op)), op);
  EXPECT_THROW(parse_reduce_op("mean"), Error);
  for (DType t : kCollectiveDTypes) EXPECT_TRUE(is_collective_dtype(t));
  try {
    check_collective_dtype(DType::kBool);
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "collectives do not support dtype bool (they move f32, f64, bf16, f16, i32, i64 and u8)");
  }
}

// The AVX2 kernels must agree bit for bit with the scalar reference, for every
// dtype/op, any source count, odd lengths and misaligned pointers.
TEST(CommReduce, Avx2MatchesScalar) {
  if (!use_avx2()) GTEST_SKIP() << "no AVX2 on this CPU";
  CounterRng rng(7);
  for (DType t : kCollectiveDTypes) {
    size_t es = dtype_size(t);
    for (ReduceOp op : kAllReduceOps) {
      for (int n : {1, 2, 3, 5}) {
        for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{33}, size_t{1000}}) {
          for (bool widen : {false, true}) {
            std::vector<std::vector<uint8_t>> src(n, std::vector<uint8_t>(count * es + 8));
            for (auto& s : src) {
              for (size_t i = 0; i < count; ++i) {
                float v = static_cast<float>(static_cast<int>(rng.below(9)) - 4) * 0.5f + rng.uniform();
                uint8_t* p = s.data() + 1 + i * es;  // misaligned on purpose
                switch (t) {
                  case DType::kF32: std::memcpy(p, &v, 4); break;
                  case DType::kF64: { double d = v; std::memcpy(p, &d, 8); break; }
                  case DType::kBF16: { uint16_t h = f32_to_bf16(v); std::memcpy(p, &h, 2); break; }
                  case DType::kF16: { uint16_t h = f32_to_f16(v); std::memcpy(p, &h, 2); break; }
                  case DType::kI32: { int32_t x = static_cast<int32_t>(rng.next_u64()); std::memcpy(p, &x, 4); break; }
                  case DType::kI64: { int64_t x = static_cast<int64_t>(rng.next_u64()); std::memcpy(p, &x, 8); break; }
                  case DType::kU8: *p = static_cast<uint8_t>(rng.next_u64()); break;
                  default: FAIL() << "not a collective dtype";
                }
              }
            }
            std::vector<const void*> ptrs;
            for (auto& s : src) ptrs.push_back(s.data() + 1);
            size_t out_es = widen && (t == DType::kBF16 || t == DType::kF16) ? 4 : es;
            std::vector<uint8_t> a(count * out_es + 64), b(count * out_es + 64);
            for (bool stream : {false, true}) {
              detail::reduce_scalar(a.data() + 3, ptrs.data(), n, count, t, op, 3, widen && out_es == 4);
              detail::reduce_avx2(b.data() + 3, ptrs.data(), n, count, t, op, 3, stream, widen && out_es == 4);
              store_fence();
              ASSERT_EQ(std::memcmp(a.data(), b.data(), a.size()), 0)
                  << dtype_short_name(t) << " " << reduce_op_name(op) << " n=" << n << " count=" << count
                  << " stream=" << stream << " widen=" << widen;
            }
          }
        }
      }
    }
  }
}

TEST(CommReduce, SemanticsOfEachOp) {
  for (bool scalar : {true, false}) {
    set_force_scalar(scalar);
    int32_t a[3] = {7, -7, 100}, b[3] = {2, 3, -50}, c[3] = {0, 1, 1};
    const void* s[3] = {a, b, c};
    int32_t out[3];
    reduce_sources(out, s, 3, 3, DType::kI32, ReduceOp::kAvg, 3);
    EXPECT_EQ(out[0], 3);   // 9 / 3
    EXPECT_EQ(out[1], -1);  // -3 / 3
    EXPECT_EQ(out[2], 17);  // 51 / 3
    reduce_sources(out, s, 2, 3, DType::kI32, ReduceOp::kProd, 2);
    EXPECT_EQ(out[0], 14);
    EXPECT_EQ(out[2], -5000);
    uint8_t u1[2] = {200, 3}, u2[2] = {100, 4};
    const void* us[2] = {u1, u2};
    uint8_t uo[2];
    reduce_sources(uo, us, 2, 2, DType::kU8, ReduceOp::kSum, 2);
    EXPECT_EQ(uo[0], 44);  // 300 wraps modulo 256
    reduce_sources(uo, us, 2, 2, DType::kU8, ReduceOp::kAvg, 2);
    EXPECT_EQ(uo[0], 22);  // the wrapped sum, then divided (NCCL's rule)
    // bf16 accumulates in f32: 256 + 1 + 1 rounds once, to 258.
    uint16_t h[3] = {f32_to_bf16(256), f32_to_bf16(1), f32_to_bf16(1)};
    const void* hs[3] = {&h[0], &h[1], &h[2]};
    uint16_t ho;
    reduce_sources(&ho, hs, 3, 1, DType::kBF16, ReduceOp::kSum, 3);
    EXPECT_EQ(bf16_to_f32(ho), 258.0f);
    float fo;
    reduce_sources(&fo, hs, 3, 1, DType::kBF16, ReduceOp::kAvg, 3, false, true);
    EXPECT_EQ(fo, 86.0f);
  }
  set_force_scalar(false);
}

TEST(CommReduce, StreamingCopy) {
  std::vector<uint8_t> src(10000), dst(10000 + 64);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 31);
  for (size_t off : {0, 1, 5, 31}) {
    std::fill(dst.begin(), dst.end(), 0);
    copy_bytes(dst.data() + off, src.data(), src.size() - 3, true);
    store_fence();
    EXPECT_EQ(std::memcmp(dst.data() + off, src.data(), src.size() - 3), 0);
  }
}

}  // namespace
}  // namespace distllm::comm
