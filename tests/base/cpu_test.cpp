// ISA levels: detection is consistent, DISTLLM_ISA names parse, and a cap lowers
// the active level (what the kernel equivalence tests rely on).
#include <gtest/gtest.h>

#include "distllm/base/cpu.h"

namespace distllm {
namespace {

TEST(Cpu, LevelsFollowFeatures) {
  const CpuFeatures& f = cpu_features();
  EXPECT_EQ(best_isa() >= Isa::kAvx2, f.avx2 && f.fma && f.f16c);
  if (best_isa() == Isa::kAvx512) {
    EXPECT_TRUE(f.avx512f && f.avx512bw && f.avx512vl);
  }
  if (f.avx512_bf16 || f.avx512_vnni) {
    EXPECT_TRUE(f.avx512f);
  }
  EXPECT_EQ(cpu_has_avx2(), best_isa() >= Isa::kAvx2);
  EXPECT_FALSE(cpu_feature_list().empty());
}

TEST(Cpu, IsaNamesParse) {
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) EXPECT_EQ(parse_isa(isa_name(isa)), isa);
  EXPECT_FALSE(parse_isa("sse2").has_value());
  EXPECT_FALSE(parse_isa("").has_value());
}

TEST(Cpu, CapLowersTheActiveLevel) {
  set_isa_cap(Isa::kScalar);
  EXPECT_EQ(active_isa(), Isa::kScalar);
  EXPECT_FALSE(use_avx2());
  EXPECT_FALSE(use_avx512());
  set_isa_cap(Isa::kAvx2);
  EXPECT_EQ(active_isa(), best_isa() >= Isa::kAvx2 ? Isa::kAvx2 : Isa::kScalar);
  EXPECT_FALSE(use_avx512());
  set_isa_cap(Isa::kAvx512);
  EXPECT_EQ(active_isa(), best_isa());
  set_force_scalar(true);
  EXPECT_FALSE(use_avx2());
  set_force_scalar(false);
  EXPECT_EQ(use_avx2(), best_isa() >= Isa::kAvx2);
}

// AMX needs the AVX-512 level with VNNI and the AMX-INT8 feature; a lower ISA cap or
// set_amx_enabled(false) turns it off, and the features alone never turn it on.
TEST(Cpu, AmxFollowsFeaturesAndSwitches) {
  const CpuFeatures& f = cpu_features();
  if (f.amx_int8) {
    EXPECT_TRUE(f.amx);
  }
  if (use_amx()) {
    EXPECT_TRUE(f.amx_int8 && f.avx512_vnni && use_avx512());
  }
  set_isa_cap(Isa::kAvx2);
  EXPECT_FALSE(use_amx());
  set_isa_cap(Isa::kAvx512);
  set_amx_enabled(false);
  EXPECT_FALSE(use_amx());
  set_amx_enabled(true);
  if (!f.amx_int8) {
    EXPECT_FALSE(use_amx());
  }
}

}  // namespace
}  // namespace distllm
