// Helpers for multi-rank tests: deterministic per-rank data and a plain reference.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "distllm/base/rng.h"
#include "distllm/base/timer.h"
#include "distllm/comm/errors.h"
#include "distllm/comm/process_group.h"
#include "distllm/comm/types.h"
#include "distllm/comm/world.h"

namespace distllm::comm::test {

// Generous enough for 4 oversubscribed ranks under sanitizers, short enough that a
// broken test fails instead of stalling the suite.
inline constexpr double kTestTimeout = 30.0;

// A typed buffer that reads and writes elements as doubles.
class Buf {
 public:
  Buf(DType t, size_t n) : t_(t), n_(n), bytes_(n * dtype_size(t) + 1) {}
  DType dtype() const { return t_; }
  size_t size() const { return n_; }
  void* data() { return bytes_.data(); }
  const void* data() const { return bytes_.data(); }
  uint8_t* at(size_t i) { return bytes_.data() + i * dtype_size(t_); }
  void set(size_t i, double v) {
    uint8_t* p = at(i);
    switch (t_) {
      case DType::kF32: { float f = static_cast<float>(v); std::memcpy(p, &f, 4); break; }
      case DType::kF64: std::memcpy(p, &v, 8); break;
      case DType::kBF16: { uint16_t h = f32_to_bf16(static_cast<float>(v)); std::memcpy(p, &h, 2); break; }
      case DType::kF16: { uint16_t h = f32_to_f16(static_cast<float>(v)); std::memcpy(p, &h, 2); break; }
      case DType::kI32: { int32_t x = static_cast<int32_t>(static_cast<int64_t>(v)); std::memcpy(p, &x, 4); break; }
      case DType::kI64: { int64_t x = static_cast<int64_t>(v); std::memcpy(p, &x, 8); break; }
      case DType::kU8: *p = static_cast<uint8_t>(static_cast<int64_t>(v)); break;
      default: ADD_FAILURE() << "not a collective dtype";
    }
  }
  double get(size_t i) const {
    const uint8_t* p = bytes_.data() + i * dtype_size(t_);
    switch (t_) {
      case DType::kF32: { float f; std::memcpy(&f, p, 4); return f; }
      case DType::kF64: { double d; std::memcpy(&d, p, 8); return d; }
      case DType::kBF16: { uint16_t h; std::memcpy(&h, p, 2); return bf16_to_f32(h); }
      case DType::kF16: { uint16_t h; std::memcpy(&h, p, 2); return f16_to_f32(h); }
      case DType::kI32: { int32_t x; std::memcpy(&x, p, 4); return x; }
      case DType::kI64: { int64_t x; std::memcpy(&x, p, 8); return static_cast<double>(x); }
      case DType::kU8: return *p;
      default: ADD_FAILURE() << "not a collective dtype";
    }
    return 0;
  }
  void fill(double v) {
    for (size_t i = 0; i < n_; ++i) set(i, v);
  }

 private:
  DType t_;
  size_t n_;
  std::vector<uint8_t> bytes_;
};

// Element i of rank r's input. Small integers keep every reduction exact in every
// dtype and order: sums of up to 4 values in [-4, 4] (u8: [0, 8]), products of
// values in {-1, 1, 2} (u8: {1, 2, 3}).
inline double pattern(int rank, size_t i, DType t, ReduceOp op, uint64_t salt = 0) {
  uint64_t h = mix64(static_cast<uint64_t>(rank) * 1000003u + i * 7919u + salt);
  if (op == ReduceOp::kProd) {
    if (t == DType::kU8) return static_cast<double>(1 + h % 3);
    static const double kChoices[4] = {1, 2, -1, 1};
    return kChoices[h % 4];
  }
  if (t == DType::kU8) return static_cast<double>(h % 9);
  return static_cast<double>(static_cast<int>(h % 9) - 4);
}

// The reduction of vals (one per rank) as the dtype stores it.
inline double reference(const double* vals, int nvals, DType t, ReduceOp op) {
  double acc = vals[0];
  for (int r = 1; r < nvals; ++r) {
    double v = vals[r];
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAvg: acc += v; break;
      case ReduceOp::kProd: acc *= v; break;
      case ReduceOp::kMax: acc = std::max(acc, v); break;
      case ReduceOp::kMin: acc = std::min(acc, v); break;
    }
  }
  if (op != ReduceOp::kAvg) return acc;
  const double n = static_cast<double>(nvals);
  switch (t) {
    case DType::kF64: return acc / n;
    case DType::kF32:
    case DType::kBF16:
    case DType::kF16: return static_cast<double>(static_cast<float>(acc) / static_cast<float>(n));
    default: return std::trunc(acc / n);
  }
}

// Compares every element; reports the first few differences.
inline ::testing::AssertionResult same(const Buf& got, const Buf& want, size_t count, const std::string& what) {
  size_t bad = 0;
  std::string first;
  for (size_t i = 0; i < count; ++i) {
    double g = got.get(i), w = want.get(i);
    if (g != w && !(std::isnan(g) && std::isnan(w))) {
      if (bad++ < 3) first += " [" + std::to_string(i) + "] got " + std::to_string(g) + " want " + std::to_string(w);
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << ": " << bad << " of " << count << " wrong:" << first;
}

// Groups over the whole world, one per backend under test. Built once per process
// (creation is collective, so every rank builds the same list in the same order).
struct Backends {
  std::vector<std::pair<std::string, ProcessGroupPtr>> groups;
  static Backends& get();
};

}  // namespace distllm::comm::test
